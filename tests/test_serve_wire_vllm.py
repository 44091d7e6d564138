"""mediaref writes processed items on the wire byte for byte as vLLM 0.33's render server does.

``tests/data/vllm_0_33_wire_vectors.json`` holds items described as data and vLLM's own encoding
of each (``scripts/vllm_wire_vectors.py`` ran vLLM's ``encode_mm_kwargs_item``): every field kind,
``keep_on_cpu``, nested lists, numbers, every dtype a processor emits, and the items vLLM's Qwen2-VL
processor made. An engine reading a mediaref response must not be able to tell it from vLLM's.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from mediaref import vllm_mm_serde
from mediaref.inputs import (
    BaseMultiModalField,
    MultiModalBatchedField,
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalKwargsItem,
    MultiModalSharedField,
)
from mediaref.serve.mm_serde import (
    decode_mm_kwargs_item,
    encode_mm_kwargs_item,
    request_items,
)

DATA = Path(__file__).resolve().parent / "data" / "vllm_0_33_wire_vectors.json"
DOCUMENT = json.loads(DATA.read_text())
VECTORS = {vector["name"]: vector for vector in DOCUMENT["vectors"]}


def build_slice(described: Any) -> Any:
    if all(v is None or isinstance(v, int) for v in described):
        return slice(*described)
    return tuple(build_slice(v) for v in described)


def build_field(described: dict[str, Any]) -> BaseMultiModalField:
    keep = described["keep_on_cpu"]
    if described["kind"] == "flat":
        slices = [build_slice(s) for s in described["slices"]]
        return MultiModalFlatField(slices, described["dim"], keep_on_cpu=keep)
    if described["kind"] == "shared":
        return MultiModalSharedField(described["batch_size"], keep_on_cpu=keep)
    return MultiModalBatchedField(keep_on_cpu=keep)


def build_value(described: dict[str, Any]) -> Any:
    if "tensor" in described:
        dtype = getattr(torch, described["tensor"])
        raw = bytearray(base64.b64decode(described["bytes"]))
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        return flat.reshape(described["shape"])
    if "list" in described:
        return [build_value(v) for v in described["list"]]
    return described["number"]


def build_item(described: dict[str, Any]) -> MultiModalKwargsItem:
    return MultiModalKwargsItem(
        {
            key: MultiModalFieldElem(build_value(elem["data"]), build_field(elem["field"]))
            for key, elem in described.items()
        }
    )


def test_the_vectors_are_vllms() -> None:
    assert DOCUMENT["versions"]["vllm"] == "0.33.0"
    assert {"qwen2_vl_processor_one_image", "qwen2_vl_processor_clip", "audio_features"} <= set(
        VECTORS
    )


@pytest.mark.parametrize("name", list(VECTORS))
def test_an_item_encodes_to_vllms_bytes(name: str) -> None:
    item = build_item(VECTORS[name]["item"])
    assert encode_mm_kwargs_item(item) == VECTORS[name]["vllm"]


@pytest.mark.parametrize("name", list(VECTORS))
def test_vllms_encoding_decodes_to_the_item(name: str) -> None:
    item = build_item(VECTORS[name]["item"])
    decoded = decode_mm_kwargs_item(VECTORS[name]["vllm"])
    assert list(decoded) == list(item)
    for key, elem in item.items():
        assert decoded[key].field == elem.field or str(decoded[key].field) == str(elem.field)
        assert MultiModalKwargsItem({key: decoded[key]}) == MultiModalKwargsItem({key: elem})


def test_an_item_from_another_batch_is_written_with_this_requests_fields() -> None:
    # The second image of a two-image batch, served alone later from the cache: vLLM would have
    # processed it alone, so its flat field covers only its own rows.
    cached = build_item(VECTORS["image_second_of_two"]["item"])
    (alone,) = request_items([cached])
    pixels = alone["pixel_values"]
    assert isinstance(pixels.field, MultiModalFlatField)
    assert pixels.field.slices == [slice(0, 24)]
    assert cached["pixel_values"].field.slices == [slice(0, 16), slice(16, 40)]  # unchanged
    first = build_item(VECTORS["image_uint8_one"]["item"])
    both = request_items([first, cached])
    assert encode_mm_kwargs_item(both[1]) == VECTORS["image_second_of_two"]["vllm"]


def test_a_payload_with_a_pickle_extension_is_refused() -> None:
    import msgspec

    payload = msgspec.msgpack.encode(
        {"x": {"data": msgspec.msgpack.Ext(1, b"cos\nsystem\n"), "field": ["batched", {}]}}
    )
    with pytest.raises(ValueError, match="extension 1"):
        decode_mm_kwargs_item(base64.b64encode(payload))


# -- vLLM's own render server on mediaref (mediaref-vllm answers its mm_serde with this) ---------


@pytest.mark.parametrize("name", list(VECTORS))
def test_vllms_mm_serde_on_mediaref_writes_vllms_bytes_first_and_again(name: str) -> None:
    item = build_item(VECTORS[name]["item"])
    assert vllm_mm_serde.encode_mm_kwargs_item(item) == VECTORS[name]["vllm"]
    assert vllm_mm_serde.encode_mm_kwargs_item(item) == VECTORS[name]["vllm"]  # kept
    assert vllm_mm_serde.decode_mm_kwargs_item is decode_mm_kwargs_item


def test_an_item_handed_out_again_is_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[MultiModalKwargsItem] = []

    def counting(item: MultiModalKwargsItem) -> str:
        written.append(item)
        return encode_mm_kwargs_item(item)

    monkeypatch.setattr(vllm_mm_serde, "_encode", counting)
    encoded = vllm_mm_serde._EncodedItems(capacity_bytes=1 << 20)
    vector = VECTORS["qwen2_vl_processor_one_image"]
    item = build_item(vector["item"])
    assert [encoded.encode(item) for _ in range(3)] == [vector["vllm"]] * 3
    assert len(written) == 1 and (encoded.hits, encoded.misses) == (2, 1)

    twin = build_item(vector["item"])  # equal, but another object: not assumed the same
    assert encoded.encode(twin) == vector["vllm"] and len(written) == 2

    key = next(iter(item))
    item[key] = MultiModalFieldElem(torch.zeros(2), MultiModalBatchedField())  # replaced
    assert encoded.encode(item) == encode_mm_kwargs_item(item) != vector["vllm"]
    assert len(written) == 3


def test_no_budget_keeps_no_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = vllm_mm_serde._EncodedItems(capacity_bytes=0)
    item = build_item(VECTORS["audio_features"]["item"])
    assert encoded.encode(item) == encoded.encode(item) == VECTORS["audio_features"]["vllm"]
    assert encoded.hits == 0
