"""A processed item as bytes for shared memory, and back: data only, never code.

Readers are other processes, so nothing here unpickles: the layout is a JSON header describing
each field (its kind and the tree of its value) followed by the raw bytes of its tensors and
arrays::

    payload := [uint32 header length][header JSON][buffer bytes ...]

Leaves are tensors (any dtype, bfloat16 included; copied out to the CPU), numpy arrays of a plain
dtype, ``bytes``, ``str``, ``int``, ``float``, ``bool`` and ``None``; lists and tuples nest. A
value outside that set is refused with a ``ValueError`` (the sender then serves it uncached).

Decoding reads bytes the caller has already copied out of the segment and checked (``_shm_store``
checks each object's MAC first); each tensor, array and ``bytes`` leaf is copied once more into a
buffer of its own, so the item keeps nothing of that copy alive and every array is aligned.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mediaref.inputs import (
    BaseMultiModalField,
    MultiModalBatchedField,
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalKwargsItem,
    MultiModalSharedField,
)

_LENGTH_BYTES = 4


class _Writer:
    def __init__(self) -> None:
        self.buffers: list[memoryview] = []
        self.nbytes = 0

    def add(self, raw: memoryview) -> list[int]:
        span = [self.nbytes, raw.nbytes]
        self.buffers.append(raw)
        self.nbytes += raw.nbytes
        return span

    def value(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return {"v": value}
        if isinstance(value, int):
            return {"i": str(value)}  # as text: JSON numbers lose precision past 2**53
        if isinstance(value, float):
            return {"f": value.hex()}  # exact, and NaN/inf survive
        if isinstance(value, torch.Tensor):
            tensor = value.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
            raw = tensor.reshape(-1).view(torch.uint8).numpy().data
            dtype = str(tensor.dtype).removeprefix("torch.")
            return {"T": [dtype, list(tensor.shape), *self.add(raw)]}
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject or value.dtype.fields is not None:
                raise ValueError(f"an array of dtype {value.dtype} cannot go to shared memory")
            array = np.ascontiguousarray(value)
            raw = array.reshape(-1).view(np.uint8).data
            return {"A": [array.dtype.str, list(array.shape), *self.add(raw)]}
        if isinstance(value, (bytes, bytearray, memoryview)):
            return {"B": self.add(memoryview(bytes(value)))}
        if isinstance(value, list):
            return {"L": [self.value(element) for element in value]}
        if isinstance(value, tuple):
            return {"U": [self.value(element) for element in value]}
        raise ValueError(f"a {type(value).__name__} cannot go to shared memory")


def _slice_spec(index: Any) -> Any:
    if isinstance(index, slice):
        return [index.start, index.stop, index.step]
    return {"t": [_slice_spec(part) for part in index]}


def _slice_of(spec: Any) -> Any:
    if isinstance(spec, dict):
        return tuple(_slice_of(part) for part in spec["t"])
    return slice(*spec)


def _field_spec(field: BaseMultiModalField) -> dict[str, Any]:
    spec: dict[str, Any] = {"keep_on_cpu": field.keep_on_cpu}
    if isinstance(field, MultiModalFlatField):
        spec.update(kind="flat", dim=field.dim, slices=[_slice_spec(s) for s in field.slices])
    elif isinstance(field, MultiModalSharedField):
        spec.update(kind="shared", batch_size=field.batch_size)
    elif isinstance(field, MultiModalBatchedField):
        spec.update(kind="batched")
    else:
        raise ValueError(f"a {type(field).__name__} cannot go to shared memory")
    return spec


def _field_of(spec: dict[str, Any]) -> BaseMultiModalField:
    keep_on_cpu = bool(spec["keep_on_cpu"])
    kind = spec["kind"]
    if kind == "flat":
        slices = [_slice_of(s) for s in spec["slices"]]
        return MultiModalFlatField(slices, int(spec["dim"]), keep_on_cpu=keep_on_cpu)
    if kind == "shared":
        return MultiModalSharedField(int(spec["batch_size"]), keep_on_cpu=keep_on_cpu)
    if kind == "batched":
        return MultiModalBatchedField(keep_on_cpu=keep_on_cpu)
    raise ValueError(f"unknown field kind {kind!r} in shared memory")


def serialize_item(item: MultiModalKwargsItem) -> tuple[bytes, list[memoryview], int]:
    """``(header, buffers, total bytes)`` of ``item``; the payload is the header (with its
    length prefix) followed by the buffers in order."""
    writer = _Writer()
    fields = [[key, _field_spec(elem.field), writer.value(elem.data)] for key, elem in item.items()]
    header = json.dumps({"fields": fields}, separators=(",", ":")).encode()
    prefixed = len(header).to_bytes(_LENGTH_BYTES, "little") + header
    return prefixed, writer.buffers, len(prefixed) + writer.nbytes


def write_payload(target: memoryview, header: bytes, buffers: Sequence[memoryview]) -> None:
    """Copy a serialized item into ``target`` (exactly its size)."""
    target[: len(header)] = header
    position = len(header)
    for raw in buffers:
        target[position : position + raw.nbytes] = raw
        position += raw.nbytes


def _torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown tensor dtype {name!r} in shared memory")
    return dtype


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data = data

    def raw(self, offset: int, nbytes: int) -> bytes:
        return bytes(self.span(offset, nbytes))

    def span(self, offset: int, nbytes: int) -> memoryview:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.data.nbytes:
            raise ValueError("a buffer runs past the end of its shared-memory object")
        return self.data[offset : offset + nbytes]

    def value(self, node: dict[str, Any]) -> Any:
        ((tag, body),) = node.items()
        if tag == "v":
            return body
        if tag == "i":
            return int(body)
        if tag == "f":
            return float.fromhex(body)
        if tag == "T":
            name, shape, offset, nbytes = body
            dtype = _torch_dtype(name)
            if nbytes == 0:
                return torch.empty(shape, dtype=dtype)
            flat = torch.frombuffer(bytearray(self.span(offset, nbytes)), dtype=torch.uint8)
            return flat.view(dtype).reshape(shape)
        if tag == "A":
            dtype_str, shape, offset, nbytes = body
            return (
                np.frombuffer(self.span(offset, nbytes), dtype=np.dtype(dtype_str))
                .reshape(shape)
                .copy()
            )
        if tag == "B":
            return self.raw(*body)
        if tag == "L":
            return [self.value(element) for element in body]
        if tag == "U":
            return tuple(self.value(element) for element in body)
        raise ValueError(f"unknown value tag {tag!r} in shared memory")


def deserialize_item(data: bytes | bytearray | memoryview) -> MultiModalKwargsItem:
    """The item :func:`serialize_item` wrote; ``data`` is the caller's checked copy of the
    payload (the item refers to none of it afterwards)."""
    with memoryview(data) as payload:
        length = int.from_bytes(payload[:_LENGTH_BYTES], "little")
        end = _LENGTH_BYTES + length
        if end > payload.nbytes:
            raise ValueError("a shared-memory object's header runs past its end")
        header = json.loads(bytes(payload[_LENGTH_BYTES:end]))
        with payload[end:] as buffers:
            reader = _Reader(buffers)
            return MultiModalKwargsItem(
                {
                    key: MultiModalFieldElem(reader.value(tree), _field_of(spec))
                    for key, spec, tree in header["fields"]
                }
            )


__all__ = ["deserialize_item", "serialize_item", "write_payload"]
