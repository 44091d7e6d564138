"""Qwen2-VL's opt-in approximate modes (``MEDIAREF_QWEN2_VL_APPROX``): off by default, keyed apart
from exact decodes, the exact path's grid, pixels close to the exact path's (PSNR on real photos).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from _image_samples import SKIMAGE_DATA
from _parity_references import IMAGE_PROMPT
from mediaref.media.image import ImageMediaIO
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import _approx as approx
from mediaref.models.qwen2_vl import _fused as fused
from mediaref.processing.context import ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
SMALL = {"max_pixels": 128 * 28 * 28}  # a deployment's usual cap: large photos shrink a lot


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def photo_jpeg(size: tuple[int, int], *, orientation: int | None = None) -> bytes:
    with Image.open(SKIMAGE_DATA / "astronaut.png") as image:
        photo = image.convert("RGB").resize(size, Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation
    photo.save(buffer, "JPEG", quality=92, exif=exif.tobytes())
    return buffer.getvalue()


def processor(**mm_kwargs: Any) -> Any:
    config = ModelConfig(model=QWEN2_VL, mm_processor_cache_gb=0, mm_processor_kwargs=mm_kwargs)
    return MULTIMODAL_REGISTRY.create_processor(config)


def pixels_of(proc: Any, data: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    ref = proc.info.get_media_io("image").load_bytes_ref(data)
    out = proc.apply(proc.build_inputs(IMAGE_PROMPT, {"image": [ref]}))
    item = out["mm_kwargs"]["image"][0]
    return item["pixel_values"].data, item["image_grid_thw"].data


def test_no_approximate_mode_is_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDIAREF_QWEN2_VL_APPROX", raising=False)
    assert approx.approx_modes() == frozenset()
    assert type(processor().info.get_media_io("image")) is ImageMediaIO


def test_an_unknown_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_APPROX", "jpeg_draft, jpeg_drafts")
    with pytest.raises(ValueError, match="jpeg_drafts"):
        approx.approx_modes()


def test_jpeg_draft_keeps_the_grid_and_stays_close(monkeypatch: pytest.MonkeyPatch) -> None:
    data = photo_jpeg((2400, 1800))
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_APPROX", "jpeg_draft")
    proc = processor(**SMALL)
    decoder = proc.info.get_media_io("image")
    assert isinstance(decoder, approx.DraftingImageMediaIO)
    # Keyed apart: a drafted decode never answers for an exact one.
    assert decoder.load_bytes_ref(data).key != ImageMediaIO().load_bytes_ref(data).key
    drafted = decoder.load_bytes(data)
    assert drafted.size == (600, 450)  # 1/4: the smallest DCT scale still >= the target
    assert drafted.info[fused.DRAFT_SOURCE_SIZE] == (2400, 1800)
    approx_pixels, approx_grid = pixels_of(proc, data)
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_APPROX", "")
    exact_pixels, exact_grid = pixels_of(processor(**SMALL), data)
    assert torch.equal(approx_grid, exact_grid)
    assert approx_pixels.shape == exact_pixels.shape
    assert not torch.equal(approx_pixels, exact_pixels)
    assert psnr(approx_pixels.numpy(), exact_pixels.numpy()) > 30


def test_jpeg_draft_leaves_images_it_would_not_halve_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_APPROX", "jpeg_draft")
    decoder = processor(**SMALL).info.get_media_io("image")
    small = decoder.load_bytes(photo_jpeg((500, 400)))
    assert small.size == (500, 400) and fused.DRAFT_SOURCE_SIZE not in small.info
    with Image.open(SKIMAGE_DATA / "coffee.png") as image:
        png = io.BytesIO()
        image.convert("RGB").resize((2400, 1600)).save(png, "PNG")
    assert decoder.load_bytes(png.getvalue()).size == (2400, 1600)  # not a JPEG


def test_a_drafted_rotated_jpeg_is_sized_upright(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_APPROX", "jpeg_draft")
    decoder = processor(**SMALL).info.get_media_io("image")
    drafted = decoder.load_bytes(photo_jpeg((2400, 1800), orientation=6))
    assert drafted.size == (450, 600)
    assert drafted.info[fused.DRAFT_SOURCE_SIZE] == (1800, 2400)


def test_a_drafted_image_is_sized_from_its_source() -> None:
    from transformers import AutoImageProcessor

    settings = fused.image_settings(AutoImageProcessor.from_pretrained(QWEN2_VL), {})
    assert settings is not None
    drafted = Image.new("RGB", (300, 200))
    assert fused.image_target(drafted, settings) == (196, 308)
    drafted.info[fused.DRAFT_SOURCE_SIZE] = (1200, 800)
    assert fused.image_target(drafted, settings) == (812, 1204)
