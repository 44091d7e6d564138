"""``mm_device_do_normalize`` end to end: the toggle's resolution (vLLM 0.33.0's), the Qwen2-VL
processor emitting raw uint8 pixels when it is on, the module restoring exactly what HF's CPU
normalize gives, the cache holding uint8, and the output saying which path was taken.

Media is real: scikit-image photos (JPEG and PNG), and video frames cut from a photo (and a
generated H.264 clip through the decoder). bf16 results are compared within 1 ulp: HF computes
``(x * rescale - mean) / std`` and the module ``x * weight + bias``, two fp32 roundings of the
same value, which bf16 rounding may put on either side of a tie.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from _image_samples import sample_path
from _parity_references import IMAGE_PROMPT, VIDEO_PROMPT, image_bytes, video_bytes
from mediaref.inputs import MultiModalInputs
from mediaref.media.image import ImageMediaIO
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import Qwen2VLMultiModalProcessor
from mediaref.ops.mm_input_norm import (
    FusedMMInputNorm,
    IdentityInputNorm,
    build_mm_input_norm,
)
from mediaref.processing.context import InputProcessingContext, ModelConfig
from mediaref.processing.processor import BaseMultiModalProcessor
from mediaref.registry import MULTIMODAL_REGISTRY

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
QWEN2_AUDIO = str(builtin_model_path("qwen2_audio"))
PIXEL_FIELDS = {"image": "pixel_values", "video": "pixel_values_videos"}


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    def ordered(t: torch.Tensor) -> torch.Tensor:
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (ordered(actual) - ordered(expected)).abs()


def assert_bf16_within_1_ulp(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype == torch.bfloat16 and actual.shape == expected.shape
    distance = ulp_distance(actual, expected)
    assert int(distance.max()) <= 1, f"max ulp distance {int(distance.max())}"


@pytest.fixture(scope="module")
def device_norm() -> FusedMMInputNorm:
    norm = build_mm_input_norm(ModelConfig(model=QWEN2_VL))
    assert isinstance(norm, FusedMMInputNorm)
    return norm


def photo(name: str, size: tuple[int, int]) -> Image.Image:
    with Image.open(sample_path(name)) as opened:
        return opened.convert("RGB").resize(size, Image.Resampling.BICUBIC)


def photo_frames(num_frames: int, size: tuple[int, int]) -> np.ndarray:
    """Frames panning across a real photo (``(T, H, W, 3)`` uint8)."""
    source = np.asarray(photo("chelsea.png", (size[0] * 2, size[1] * 2)))
    return np.stack(
        [source[3 * i : 3 * i + size[1], 5 * i : 5 * i + size[0]] for i in range(num_frames)]
    )


def processor(toggle: bool | None = None, cache_gb: float = 0) -> BaseMultiModalProcessor[Any]:
    config = ModelConfig(
        model=QWEN2_VL, mm_device_do_normalize=toggle, mm_processor_cache_gb=cache_gb
    )
    cache = MULTIMODAL_REGISTRY.processor_cache_from_config(config)
    return MULTIMODAL_REGISTRY.create_processor(config, cache=cache)


def request(proc: BaseMultiModalProcessor[Any], **kwargs: Any) -> MultiModalInputs:
    """One image (a real JPEG) and one video (a real H.264 clip, 4 frames sampled)."""
    image = ImageMediaIO().load_bytes_ref(image_bytes("coffee"))
    video = proc.info.get_media_io("video", {"num_frames": 4}).load_bytes_ref(video_bytes("b"))
    prompt = f"{IMAGE_PROMPT} then {VIDEO_PROMPT}"
    return proc.apply(proc.build_inputs(prompt, {"image": [image], "video": [video]}, **kwargs))


# ---------------------------------------------------------------- the toggle's resolution


@pytest.mark.parametrize(
    ("model", "requested", "expected"),
    [(QWEN2_VL, None, True), (QWEN2_VL, True, True), (QWEN2_VL, False, False),
     (QWEN2_AUDIO, None, False), (QWEN2_AUDIO, False, False)],
)  # fmt: skip
def test_default_is_what_the_family_supports(
    model: str, requested: bool | None, expected: bool
) -> None:
    config = ModelConfig(model=model, mm_device_do_normalize=requested)
    assert config.get_mm_device_do_normalize() is expected
    info_cls = MULTIMODAL_REGISTRY.get_factories(config).info
    assert info_cls(InputProcessingContext(config)).mm_device_do_normalize is expected


def test_requested_on_for_an_unsupporting_family_is_forced_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert (
            ModelConfig(model=QWEN2_AUDIO, mm_device_do_normalize=True).get_mm_device_do_normalize()
            is False
        )
    assert "does not support mm_device_do_normalize" in caplog.text


def test_an_unknown_family_supports_nothing(tmp_path: Any) -> None:
    assert ModelConfig(model=str(tmp_path / "absent")).get_mm_device_do_normalize() is False


@pytest.mark.parametrize("requested", [None, True])
def test_the_rust_frontend_vetoes_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, requested: bool | None
) -> None:
    monkeypatch.setenv("VLLM_USE_RUST_FRONTEND", "1")
    with caplog.at_level(logging.WARNING):
        assert (
            ModelConfig(
                model=QWEN2_VL, mm_device_do_normalize=requested
            ).get_mm_device_do_normalize()
            is False
        )
    assert ("VLLM_USE_RUST_FRONTEND" in caplog.text) is (
        requested is True
    )  # an explicit request is warned about


def test_builder_follows_the_resolved_toggle() -> None:
    assert isinstance(build_mm_input_norm(ModelConfig(model=QWEN2_VL)), FusedMMInputNorm)
    assert isinstance(
        build_mm_input_norm(ModelConfig(model=QWEN2_VL, mm_device_do_normalize=False)),
        IdentityInputNorm,
    )
    assert isinstance(build_mm_input_norm(ModelConfig(model=QWEN2_AUDIO)), IdentityInputNorm)


# ---------------------------------------------------------------- the module against HF's CPU path


@pytest.mark.parametrize(
    ("name", "size"), [("astronaut.png", (448, 336)), ("rocket.jpg", (300, 427))]
)
def test_module_restores_hf_normalized_images(
    hf_vl: Any, device_norm: FusedMMInputNorm, name: str, size: tuple[int, int]
) -> None:
    image = photo(name, size)
    raw = hf_vl.image_processor(
        images=[image], do_rescale=False, do_normalize=False, return_tensors="pt"
    )
    normalized = hf_vl.image_processor(images=[image], return_tensors="pt")
    assert raw["pixel_values"].dtype == torch.uint8
    ours = device_norm.forward_native(raw["pixel_values"], torch.bfloat16)
    assert_bf16_within_1_ulp(ours, normalized["pixel_values"].to(torch.bfloat16))


def test_module_restores_hf_normalized_video(hf_vl: Any, device_norm: FusedMMInputNorm) -> None:
    frames = photo_frames(6, (280, 196))
    kwargs = dict(videos=[frames], do_sample_frames=False, return_tensors="pt")
    raw = hf_vl.video_processor(do_rescale=False, do_normalize=False, **kwargs)
    normalized = hf_vl.video_processor(**kwargs)
    assert raw["pixel_values_videos"].dtype == torch.uint8
    ours = device_norm.forward_native(raw["pixel_values_videos"], torch.bfloat16)
    assert_bf16_within_1_ulp(ours, normalized["pixel_values_videos"].to(torch.bfloat16))


# ---------------------------------------------------------------- the processor, toggle on and off


@pytest.fixture(scope="module")
def both_paths() -> dict[bool, MultiModalInputs]:
    return {toggle: request(processor(toggle)) for toggle in (True, False)}


def test_device_path_emits_uint8_and_says_so(both_paths: dict[bool, MultiModalInputs]) -> None:
    on, off = both_paths[True], both_paths[False]
    assert on["mm_device_do_normalize"] is True and off["mm_device_do_normalize"] is False
    for modality, field in PIXEL_FIELDS.items():
        assert on["mm_kwargs"][modality][0][field].data.dtype == torch.uint8
        assert off["mm_kwargs"][modality][0][field].data.dtype == torch.float32


def test_toggle_on_and_off_give_the_same_model_input(
    both_paths: dict[bool, MultiModalInputs],
) -> None:
    """After each path's module (build_mm_input_norm for its config), the model sees the same."""
    on, off = both_paths[True], both_paths[False]
    assert on["prompt_token_ids"] == off["prompt_token_ids"]
    assert on["mm_placeholders"] == off["mm_placeholders"]
    device_module = build_mm_input_norm(ModelConfig(model=QWEN2_VL))
    cpu_module = build_mm_input_norm(ModelConfig(model=QWEN2_VL, mm_device_do_normalize=False))
    for modality, field in PIXEL_FIELDS.items():
        grid = f"{modality}_grid_thw"
        on_item, off_item = on["mm_kwargs"][modality][0], off["mm_kwargs"][modality][0]
        assert torch.equal(on_item[grid].data, off_item[grid].data)
        assert_bf16_within_1_ulp(
            device_module(on_item[field].data, torch.bfloat16),
            cpu_module(off_item[field].data, torch.bfloat16),
        )


def test_a_request_cannot_turn_cpu_normalization_back_on(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        out = request(
            processor(True), hf_processor_mm_kwargs={"do_normalize": True, "do_rescale": True}
        )
    assert (
        out["mm_kwargs"]["image"][0]["pixel_values"].data.dtype == torch.uint8
    )  # not normalized twice
    assert out["mm_kwargs"]["video"][0]["pixel_values_videos"].data.dtype == torch.uint8


def test_the_cache_holds_uint8(both_paths: dict[bool, MultiModalInputs]) -> None:
    proc = processor(True, cache_gb=1)
    miss = request(proc)
    hit = request(proc)
    assert proc.cache is not None and hit["mm_device_do_normalize"] is True
    assert all(proc.cache.is_cached(hit["mm_hashes"]["image"] + hit["mm_hashes"]["video"]))
    for modality, field in PIXEL_FIELDS.items():
        hit_item = hit["mm_kwargs"][modality][0]
        assert torch.equal(hit_item[field].data, miss["mm_kwargs"][modality][0][field].data)
        # One byte per element: a quarter of the CPU path's fp32, half of bf16.
        assert hit_item[field].data.nbytes == hit_item[field].data.numel()
        off_item = both_paths[False]["mm_kwargs"][modality][0]
        assert off_item.nbytes > 3 * hit_item.nbytes


def test_hf_is_called_without_dummy_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen2-VL's pixels do not depend on text: HF must not expand and tokenize placeholders."""
    # The fused path (on by default) calls no HF processor at all; this pins the HF path's call.
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_FUSED", "0")
    proc = processor(True)
    hf = proc.info.get_hf_processor()
    calls: list[dict[str, Any]] = []
    original = type(hf).__call__

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(hf), "__call__", spy)
    out = request(proc)
    assert calls and all(call.get("text") is None for call in calls)
    assert calls[0]["do_rescale"] is False and calls[0]["do_normalize"] is False
    assert len(out["mm_placeholders"]["image"]) == 1


def test_raw_video_family_inherits_support() -> None:
    config = ModelConfig(model=QWEN2_VL, family="qwen2_vl_raw_video")
    assert config.get_mm_device_do_normalize() is True
    assert issubclass(
        MULTIMODAL_REGISTRY.get_factories(config).processor, Qwen2VLMultiModalProcessor
    )


def test_renderer_output_says_which_path() -> None:
    from mediaref.renderers.base import BaseRenderer, MultiModalRequest

    for toggle in (True, False):
        renderer = BaseRenderer(ModelConfig(model=QWEN2_VL, mm_device_do_normalize=toggle))
        try:
            image = ImageMediaIO().load_bytes_ref(image_bytes("coffee"))
            out = renderer.process_multimodal(MultiModalRequest(IMAGE_PROMPT, {"image": [image]}))
        finally:
            renderer.shutdown()
        assert out["mm_device_do_normalize"] is toggle
        expected = torch.uint8 if toggle else torch.float32
        assert out["mm_kwargs"]["image"][0]["pixel_values"].data.dtype == expected
