"""The per-request media caps (sglang-mm's): 64 items, 64 MiB per item, 256 MiB per request.

They hold for every modality and source form, are read when the request's data is parsed (before
any item is hashed or decoded), answer 413 and are configurable (0 turns one off).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from mediaref.exceptions import MediaTooLargeError
from mediaref.media.base import MediaWithBytes
from mediaref.media.image import ImageMediaIO
from mediaref.parse import MultiModalDataParser


def png(seed: int, size: int = 64) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def refs(count: int, size: int = 16) -> list[object]:
    return [ImageMediaIO().load_bytes_ref(png(i, size)) for i in range(count)]


def test_the_defaults_are_the_peers() -> None:
    from mediaref import envs

    assert envs.MEDIAREF_MAX_MEDIA_ITEMS_PER_REQUEST == 64
    assert envs.MEDIAREF_MAX_MEDIA_ITEM_SIZE_MB == 64.0
    assert envs.MEDIAREF_MAX_MEDIA_REQUEST_SIZE_MB == 256.0


def test_64_items_pass_and_65_are_refused_before_any_decode() -> None:
    parser = MultiModalDataParser()
    assert parser.parse_mm_data({"image": refs(64)}).get_count("image") == 64
    items = refs(65)
    with pytest.raises(MediaTooLargeError, match="more than 64 media items") as caught:
        parser.parse_mm_data({"image": items})
    assert caught.value.status_code == 413 and caught.value.index == 64
    assert not any(ref.is_decoded for ref in items)  # type: ignore[attr-defined]


def test_items_of_all_modalities_count_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAREF_MAX_MEDIA_ITEMS_PER_REQUEST", "3")
    frames = np.zeros((2, 8, 8, 3), np.uint8)
    with pytest.raises(MediaTooLargeError, match="more than 3"):
        MultiModalDataParser().parse_mm_data({"image": refs(2), "video": [frames, frames]})


def test_one_item_over_the_item_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    big = ImageMediaIO().load_bytes_ref(png(1, 256))
    monkeypatch.setenv("MEDIAREF_MAX_MEDIA_ITEM_SIZE_MB", str(len(big.data) / 2 / 2**20))
    with pytest.raises(
        MediaTooLargeError, match=r"image item 1 .* MEDIAREF_MAX_MEDIA_ITEM_SIZE_MB"
    ):
        MultiModalDataParser().parse_mm_data({"image": [*refs(1), big]})
    assert not big.is_decoded


def test_bytes_carried_beside_decoded_media_count_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAREF_MAX_MEDIA_ITEM_SIZE_MB", str(1000 / 2**20))
    wrapped = MediaWithBytes(Image.new("RGB", (4, 4)), b"\0" * 1001)
    with pytest.raises(MediaTooLargeError):
        MultiModalDataParser().parse_mm_data({"image": [wrapped]})


def test_the_request_total_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    items = refs(4, size=64)
    sizes = [len(ref.data) for ref in items]  # type: ignore[attr-defined]
    monkeypatch.setenv("MEDIAREF_MAX_MEDIA_REQUEST_SIZE_MB", str((sum(sizes) - 1) / 2**20))
    with pytest.raises(MediaTooLargeError, match="MEDIAREF_MAX_MEDIA_REQUEST_SIZE_MB") as caught:
        MultiModalDataParser().parse_mm_data({"image": items})
    assert caught.value.index == 3
    monkeypatch.setenv("MEDIAREF_MAX_MEDIA_REQUEST_SIZE_MB", str(sum(sizes) / 2**20))
    assert MultiModalDataParser().parse_mm_data({"image": items}).get_count("image") == 4


def test_zero_turns_each_cap_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "MEDIAREF_MAX_MEDIA_ITEMS_PER_REQUEST",
        "MEDIAREF_MAX_MEDIA_ITEM_SIZE_MB",
        "MEDIAREF_MAX_MEDIA_REQUEST_SIZE_MB",
    ):
        monkeypatch.setenv(name, "0")
    assert MultiModalDataParser().parse_mm_data({"image": refs(70)}).get_count("image") == 70


def test_a_data_url_request_over_the_cap_is_a_413_from_the_processor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import base64

    from mediaref.media.connector import MediaConnector
    from mediaref.models.builtin import builtin_model_path
    from mediaref.processing.context import ModelConfig
    from mediaref.registry import MULTIMODAL_REGISTRY

    monkeypatch.setenv("MEDIAREF_MAX_MEDIA_ITEMS_PER_REQUEST", "2")
    url = "data:image/png;base64," + base64.b64encode(png(7)).decode()
    images = [MediaConnector().fetch_image(url) for _ in range(3)]
    proc = MULTIMODAL_REGISTRY.create_processor(
        ModelConfig(model=str(builtin_model_path("qwen2_vl")))
    )
    prompt = "<|vision_start|><|image_pad|><|vision_end|>" * 3
    with pytest.raises(MediaTooLargeError) as caught:
        proc.apply(proc.build_inputs(prompt, {"image": images}))
    assert caught.value.status_code == 413
