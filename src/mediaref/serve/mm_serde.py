"""Processed items on the wire as vLLM 0.33 writes them: base64 of its engine's msgpack.

vLLM's render server encodes each ``MultiModalKwargsItem`` of a ``GenerateRequest`` with
``encode_mm_kwargs_item`` (``vllm/entrypoints/scale_out/token_in_token_out/mm_serde.py``): base64
of ``MsgpackEncoder(size_threshold=2**62)`` (``vllm/v1/serial_utils.py``), every tensor inline.
This module writes the same bytes without vLLM (``tests/test_serve_wire_vllm.py`` holds them to
vectors vLLM wrote, ``scripts/vllm_wire_vectors.py``), so an engine reading a mediaref response
cannot tell it from vLLM's. The layout, a msgpack map per item::

    {field name: {"data": <value>, "field": [<kind>, {<the field's arguments>}]}}

    <value>  := [dtype name, [shape...], Ext(3, the tensor's bytes, C order)]   a tensor
              | [<value>, ...] | a number | nil
    <kind>   := "flat" (keep_on_cpu, slices, dim) | "shared" (keep_on_cpu, batch_size)
              | "batched" (keep_on_cpu)

with each slice written as ``[start, stop, step]`` (vLLM's ``enc_hook`` for ``slice``).

**Fields of a request.** A flat field's slices (and a shared field's ``batch_size``) describe the
batch an item was processed in: vLLM processes a request's items together, so its items carry that
request's slices. An item from mediaref's processor cache carries the slices of the request that
first processed it; :func:`request_items` gives a request's items the fields vLLM would have
given them, from the items' own sizes, before they are encoded.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import msgspec
import pybase64
import torch

from mediaref.inputs import (
    BaseMultiModalField,
    MultiModalBatchedField,
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalKwargsItem,
    MultiModalSharedField,
)

RAW_VIEW = 3
"""vLLM's msgpack extension code for a tensor's bytes (``CUSTOM_TYPE_RAW_VIEW``)."""


def _slice(value: slice) -> tuple[int | None, int | None, int | None]:
    # vLLM's enc_hook: bounds may be 0-d tensors (flat_from_sizes' cumsum), written as ints.
    return tuple(None if v is None else int(v) for v in (value.start, value.stop, value.step))  # type: ignore[return-value]


def _tensor(value: torch.Tensor) -> tuple[str, tuple[int, ...], msgspec.msgpack.Ext]:
    flat = value.detach().cpu().reshape(-1).contiguous()
    raw = memoryview(flat.view(torch.uint8).numpy().data) if flat.numel() else memoryview(b"")
    dtype = str(value.dtype).removeprefix("torch.")
    return dtype, tuple(value.shape), msgspec.msgpack.Ext(RAW_VIEW, raw)


def _value(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _tensor(value)
    if isinstance(value, (int, float)) or value is None:
        return value
    return [_value(v) for v in value]


def _field(field: BaseMultiModalField) -> tuple[str, dict[str, Any]]:
    # The keyword arguments in vLLM's dataclass field order (the base class's keep_on_cpu first).
    if isinstance(field, MultiModalFlatField):
        return "flat", {"keep_on_cpu": field.keep_on_cpu, "slices": field.slices, "dim": field.dim}
    if isinstance(field, MultiModalSharedField):
        return "shared", {"keep_on_cpu": field.keep_on_cpu, "batch_size": field.batch_size}
    if isinstance(field, MultiModalBatchedField):
        return "batched", {"keep_on_cpu": field.keep_on_cpu}
    raise TypeError(f"Unsupported field type: {type(field)}")


def _enc_hook(value: Any) -> Any:
    if isinstance(value, slice):
        return _slice(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)


def _item(item: MultiModalKwargsItem) -> dict[str, Any]:
    return {
        key: {"data": None if elem.data is None else _value(elem.data), "field": _field(elem.field)}
        for key, elem in item.items()
    }


def encode_mm_kwargs_item_bytes(item: MultiModalKwargsItem) -> bytes:
    """:func:`encode_mm_kwargs_item` as ASCII bytes (for writing JSON without re-scanning it)."""
    return pybase64.b64encode(_encoder.encode(_item(item)))


def encode_mm_kwargs_item(item: MultiModalKwargsItem) -> str:
    """``item`` as vLLM's render server writes it: base64 of its engine's msgpack (straight to a
    ``str``: half the time of encoding to bytes and decoding those, 9 against 18 ms for 12 MB)."""
    return pybase64.b64encode_as_string(_encoder.encode(_item(item)))


def _decoded_slice(value: Any) -> Any:
    if len(value) == 3 and all(v is None or isinstance(v, int) for v in value):
        return slice(*value)
    return tuple(_decoded_slice(v) for v in value)


def _decoded_field(encoded: Sequence[Any]) -> BaseMultiModalField:
    kind, kwargs = encoded
    keep_on_cpu = bool(kwargs.get("keep_on_cpu", False))
    if kind == "flat":
        slices = [_decoded_slice(s) for s in kwargs["slices"]]
        return MultiModalFlatField(slices, kwargs.get("dim", 0), keep_on_cpu=keep_on_cpu)
    if kind == "shared":
        return MultiModalSharedField(int(kwargs["batch_size"]), keep_on_cpu=keep_on_cpu)
    if kind == "batched":
        return MultiModalBatchedField(keep_on_cpu=keep_on_cpu)
    raise ValueError(f"unknown field kind {kind!r}")


def _decoded_value(value: Any) -> Any:
    if isinstance(value, list) and len(value) == 3 and isinstance(value[2], bytes):
        dtype_name, shape, raw = value
        dtype = getattr(torch, dtype_name)
        flat = torch.frombuffer(bytearray(raw), dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        return flat.reshape(shape)
    if isinstance(value, list):
        return [_decoded_value(v) for v in value]
    return value


def _ext_hook(code: int, data: memoryview) -> bytes:
    if code != RAW_VIEW:
        raise ValueError(f"unexpected msgpack extension {code} (only raw tensor bytes are taken)")
    return bytes(data)


_decoder = msgspec.msgpack.Decoder(ext_hook=_ext_hook)


def decode_mm_kwargs_item(data: str | bytes) -> MultiModalKwargsItem:
    """:func:`encode_mm_kwargs_item`'s inverse (vLLM's ``decode_mm_kwargs_item``). Takes no
    pickle or other code-carrying extension, whatever the payload says."""
    decoded = _decoder.decode(pybase64.b64decode(data, validate=True))
    if not isinstance(decoded, dict):
        raise ValueError("an encoded item is a map of fields")
    return MultiModalKwargsItem(
        {
            key: MultiModalFieldElem(_decoded_value(elem["data"]), _decoded_field(elem["field"]))
            for key, elem in decoded.items()
        }
    )


def _size_along(value: Any, dim: int) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.shape[dim])
    return len(value)  # a list of tensors: one entry a row (dim 0 only)


def _request_field(field: BaseMultiModalField, sizes: Sequence[int]) -> BaseMultiModalField:
    """``field`` as a batch of items of ``sizes`` would have it (flat and shared fields)."""
    if isinstance(field, MultiModalFlatField):
        bounds = [0, *itertools.accumulate(sizes)]
        plain = bool(field.slices) and isinstance(field.slices[0], slice)
        leading = (slice(None),) * field.dim
        slices: list[Any] = [
            slice(a, b) if plain else (*leading, slice(a, b)) for a, b in itertools.pairwise(bounds)
        ]
        return MultiModalFlatField(slices, field.dim, keep_on_cpu=field.keep_on_cpu)
    if isinstance(field, MultiModalSharedField):
        return MultiModalSharedField(len(sizes), keep_on_cpu=field.keep_on_cpu)
    return field


def request_items(items: Sequence[MultiModalKwargsItem]) -> list[MultiModalKwargsItem]:
    """One modality's items of one request, their flat and shared fields rewritten as that
    request's batch gives them (see the module docstring); the items themselves are not changed."""
    out = [MultiModalKwargsItem(dict(item)) for item in items]
    for key in dict.fromkeys(k for item in items for k in item):
        elems = [item.get(key) for item in items]
        if any(e is None for e in elems):
            continue  # not a field every item has: leave it as processed
        first = elems[0].field  # type: ignore[union-attr]
        if isinstance(first, MultiModalBatchedField):
            continue
        if isinstance(first, MultiModalFlatField):
            sizes = [_size_along(e.data, first.dim) for e in elems]  # type: ignore[union-attr]
        else:
            sizes = [1] * len(elems)
        field = _request_field(first, sizes)
        for item, elem in zip(out, elems, strict=True):
            item[key] = MultiModalFieldElem(elem.data, field)  # type: ignore[union-attr]
    return out


__all__ = [
    "RAW_VIEW",
    "decode_mm_kwargs_item",
    "encode_mm_kwargs_item",
    "encode_mm_kwargs_item_bytes",
    "request_items",
]
