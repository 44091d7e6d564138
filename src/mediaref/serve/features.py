"""A rendered request's multimodal features as JSON: vLLM 0.33's ``MultiModalFeatures``.

::

    {"mm_hashes":       {"image": ["7af9..."]},
     "mm_placeholders": {"image": [{"offset": 26, "length": 324}]},
     "kwargs_data":     {"image": ["<base64>"]} | null,     # null when mm_payload is "none"
     "mm_metadata":     {"image": ["<base64>"]} | null}     # keep_on_cpu + metadata fields

Every list is parallel to ``mm_hashes[modality]``.

**The tensors** (``kwargs_data``, ``mm_metadata``) are in one of two formats
(``--tensor-format``):

- ``vllm`` (the default): exactly what vLLM's render server sends, base64 of its engine's msgpack
  (:mod:`mediaref.serve.mm_serde`), which a vLLM engine's ``/generate`` reads; ``mm_metadata``
  holds each item's ``keep_on_cpu`` fields and the fields its modality's placeholders are sized
  by (vLLM's ``placeholder_metadata_fields``), as vLLM sends them for disaggregated prefill;
- ``safetensors``: base64 of a `safetensors <https://github.com/huggingface/safetensors>`_ blob,
  one tensor per field (a field holding a list of tensors is stored as ``name.0``, ``name.1``...,
  a plain value goes into the blob's ``__metadata__`` as JSON), which any client reads
  (``safetensors.torch.load``, or :func:`decode_kwargs_item`) and which cannot carry code;
  ``mm_metadata`` holds the ``keep_on_cpu`` fields, and the features gain ``kwargs_info``: each
  item's fields' names, dtypes and shapes, whether or not the tensors are sent.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Collection, Mapping
from typing import Any

import pybase64
import torch

from mediaref.inputs import MultiModalInputs, MultiModalKwargsItem
from mediaref.serve.encoded_cache import EncodedItemCache
from mediaref.serve.mm_serde import encode_mm_kwargs_item_bytes, request_items
from mediaref.serve.options import TensorFormat

_TO_SAFETENSORS: dict[torch.dtype, str] = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
_FROM_SAFETENSORS = {code: dtype for dtype, code in _TO_SAFETENSORS.items()}
_LIST_KEY = "mediaref.lists"  # __metadata__: field -> number of tensors stored as field.0, .1...
_HEADER_ALIGN = 8


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tensor_info(value: object) -> dict[str, Any]:
    if isinstance(value, torch.Tensor):
        return {"dtype": dtype_name(value.dtype), "shape": list(value.shape)}
    if isinstance(value, (list, tuple)):
        return {"items": [_tensor_info(v) for v in value]}
    return {"type": type(value).__name__}


def item_info(item: MultiModalKwargsItem) -> dict[str, Any]:
    """Each field's dtype and shape (a list field: its items'), without the data."""
    return {name: _tensor_info(elem.data) for name, elem in item.items()}


def _safetensors_blob(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    chunks: list[memoryview] = []
    offset = 0
    for name, tensor in tensors.items():
        if tensor.dtype not in _TO_SAFETENSORS:
            raise TypeError(f"field {name!r}: dtype {tensor.dtype} has no safetensors code")
        # A view of the tensor's bytes: the join below is the only copy before base64.
        flat = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        raw = memoryview(flat.data)
        header[name] = {
            "dtype": _TO_SAFETENSORS[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % _HEADER_ALIGN)
    return b"".join([struct.pack("<Q", len(encoded)), encoded, *chunks])


def encode_kwargs_item(item: MultiModalKwargsItem) -> bytes:
    """One processed item as base64 safetensors (see the module docstring), as ASCII bytes:
    :func:`mediaref.serve.json_body.dump_json` writes them as a JSON string without re-scanning
    megabytes of it."""
    tensors: dict[str, torch.Tensor] = {}
    metadata: dict[str, str] = {}
    lists: dict[str, int] = {}
    for name, elem in item.items():
        data = elem.data
        if isinstance(data, torch.Tensor):
            tensors[name] = data
        elif isinstance(data, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in data):
            lists[name] = len(data)
            for index, tensor in enumerate(data):
                assert isinstance(tensor, torch.Tensor)  # checked above; mypy cannot see it
                tensors[f"{name}.{index}"] = tensor
        else:
            metadata[name] = json.dumps(data)
    if lists:
        metadata[_LIST_KEY] = json.dumps(lists)
    return pybase64.b64encode(_safetensors_blob(tensors, metadata))


def decode_kwargs_item(encoded: str | bytes) -> dict[str, Any]:
    """:func:`encode_kwargs_item`'s inverse: field name -> tensor, list of tensors, or value."""
    blob = pybase64.b64decode(encoded, validate=True)
    (header_len,) = struct.unpack_from("<Q", blob)
    header = json.loads(blob[8 : 8 + header_len])
    body = memoryview(blob)[8 + header_len :]
    metadata = header.pop("__metadata__", {})
    fields: dict[str, Any] = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _FROM_SAFETENSORS[info["dtype"]]
        raw = bytearray(body[begin:end])
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        fields[name] = flat.reshape(info["shape"])
    lists = json.loads(metadata.pop(_LIST_KEY, "{}"))
    for name, count in lists.items():
        fields[name] = [fields.pop(f"{name}.{i}") for i in range(count)]
    fields.update({name: json.loads(value) for name, value in metadata.items()})
    return fields


def _cpu_only(item: MultiModalKwargsItem, also: Collection[str]) -> MultiModalKwargsItem | None:
    kept = {name: elem for name, elem in item.items() if elem.field.keep_on_cpu or name in also}
    return MultiModalKwargsItem(kept) if kept else None


def _fields_key(item: MultiModalKwargsItem) -> tuple[Any, ...]:
    """What of an item's fields its vLLM encoding depends on besides its data (the batch)."""
    return tuple(
        (name, repr(getattr(elem.field, "slices", None)), getattr(elem.field, "batch_size", None))
        for name, elem in item.items()
    )


def build_features(
    output: MultiModalInputs,
    *,
    with_tensors: bool,
    encoded: EncodedItemCache | None = None,
    model: str = "",
    tensor_format: TensorFormat = "vllm",
    metadata_fields_for: Callable[[str], Collection[str]] = lambda modality: (),
) -> dict[str, Any] | None:
    """The ``features`` of one rendered prompt; None when it carries no multimodal item.

    ``encoded``: where items already encoded for ``model`` are kept (by hash and, in vLLM's
    format, the request's fields), so a repeated item is not encoded again.
    ``metadata_fields_for(modality)``: the fields ``mm_metadata`` carries besides the
    ``keep_on_cpu`` ones (vLLM's format)."""
    hashes = {m: list(h) for m, h in (output.get("mm_hashes") or {}).items() if h}
    if not hashes:
        return None
    placeholders = output.get("mm_placeholders") or {}
    kwargs: Mapping[str, Any] = output.get("mm_kwargs") or {}
    items = {m: list(kwargs.get(m) or [None] * len(hashes[m])) for m in hashes}
    features: dict[str, Any] = {
        "mm_hashes": hashes,
        "mm_placeholders": {
            m: [{"offset": p.offset, "length": p.length} for p in placeholders.get(m, ())]
            for m in hashes
        },
        "kwargs_data": None,
        "mm_metadata": None,
    }
    vllm = tensor_format == "vllm"
    if not vllm:
        features["kwargs_info"] = {
            m: [None if item is None else item_info(item) for item in items[m]] for m in hashes
        }
    if not with_tensors:
        return features
    if vllm:
        for m, row in items.items():
            if all(item is not None for item in row):
                items[m] = list(request_items(row))
    write = encode_mm_kwargs_item_bytes if vllm else encode_kwargs_item

    def encode(part: str, mm_hash: str, item: MultiModalKwargsItem | None) -> bytes | None:
        if item is None:
            return None
        if encoded is None:
            return write(item)
        key = (model, tensor_format, mm_hash, part, _fields_key(item) if vllm else ())
        return encoded.get_or_encode(key, lambda: write(item))

    features["kwargs_data"] = {
        m: [encode("data", h, item) for h, item in zip(hashes[m], items[m], strict=True)]
        for m in hashes
    }
    metadata = {
        m: [
            None if i is None else _cpu_only(i, metadata_fields_for(m) if vllm else ())
            for i in items[m]
        ]
        for m in hashes
    }
    if any(item is not None for row in metadata.values() for item in row):
        features["mm_metadata"] = {
            m: [encode("meta", h, item) for h, item in zip(hashes[m], row, strict=True)]
            for m, row in metadata.items()
            if any(item is not None for item in row)
        }
    return features


__all__ = [
    "build_features",
    "decode_kwargs_item",
    "dtype_name",
    "encode_kwargs_item",
    "item_info",
]
