"""Qwen2-VL's opt-in ``video_scale`` mode (``MEDIAREF_QWEN2_VL_APPROX=video_scale``): sampled frames
decoded straight to their ``smart_resize`` target by FFmpeg's scaler. Off by default, keyed apart
from exact decodes, the exact path's grid, pixels close to it on a real-media clip, the request's
decoded-bytes budget charged for the target frames.
"""

from __future__ import annotations

import functools
import io
from fractions import Fraction
from typing import Any

import av
import numpy as np
import pytest
import torch
from PIL import Image

from _image_samples import SKIMAGE_DATA
from _video_samples import make_clip
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO
from mediaref.media.video._frame_collector import FrameCollector
from mediaref.media.video._frame_scaling import (
    DEFAULT_INTERPOLATION,
    FrameScaling,
    current_frame_scaling,
)
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import _approx as approx
from mediaref.processing.context import ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
VIDEO_PROMPT = "<|vision_start|><|video_pad|><|vision_end|>Describe this video."
SMALL = {"max_pixels": 64 * 28 * 28}  # a deployment's token cap well below the clip's size
CLIP_SIZE = (432, 288)  # (width, height) of the real-media clip
CLIP_FRAMES = 16
TARGET = (252, 168)  # smart_resize(288, 432, 28, 56 * 56, 64 * 784), as (width, height)
# This clip (coffee.png at its own resolution, sharp) measures 38.8 dB at 64 tokens (scaled as
# YUV) and 37.0 dB at 16 (one step); the benchmark's pans 42-49 dB (docs/performance.md). A wrong
# channel order, a one-pixel shift or a frame off gives under 25 dB, nearest-neighbour 31 dB.
PSNR_FLOOR_DB = 35.0


@pytest.fixture(autouse=True)
def _no_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_MAX_IMAGE_PIXELS", raising=False)
    monkeypatch.delenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", raising=False)


@functools.cache
def coffee_pan_clip() -> bytes:
    """A real-media H.264 clip: a window panning across scikit-image's coffee.png (600x400)."""
    with Image.open(SKIMAGE_DATA / "coffee.png") as image:
        photo = np.asarray(image.convert("RGB"))
    width, height = CLIP_SIZE
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as output:
        stream = output.add_stream("libx264", rate=Fraction(8), options={"crf": "18"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index in range(CLIP_FRAMES):
            x, y = 8 * index, 4 * index
            window = np.ascontiguousarray(photo[y : y + height, x : x + width])
            for packet in stream.encode(av.VideoFrame.from_ndarray(window, format="rgb24")):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    return buffer.getvalue()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def processor(**mm_kwargs: Any) -> Any:
    # pyav keeps every frame of the clip (the bound qwen2_vl loader would sample 2 a second).
    config = ModelConfig(
        model=QWEN2_VL,
        mm_processor_cache_gb=0,
        mm_processor_kwargs=mm_kwargs,
        media_io_kwargs={"video": {"video_backend": "pyav"}},
    )
    return MULTIMODAL_REGISTRY.create_processor(config)


def video_io(monkeypatch: pytest.MonkeyPatch, mode: str, **mm_kwargs: Any) -> VideoMediaIO:
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_APPROX", mode)
    decoder = processor(**mm_kwargs).info.get_media_io("video")
    assert isinstance(decoder, VideoMediaIO)
    return decoder


def video_rows(
    monkeypatch: pytest.MonkeyPatch, mode: str, data: bytes
) -> tuple[torch.Tensor, torch.Tensor]:
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_APPROX", mode)
    proc = processor(**SMALL)
    ref = proc.info.get_media_io("video").load_bytes_ref(data)
    out = proc.apply(proc.build_inputs(VIDEO_PROMPT, {"video": [ref]}))
    item = out["mm_kwargs"]["video"][0]
    return item["pixel_values_videos"].data, item["video_grid_thw"].data


def test_video_scale_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDIAREF_QWEN2_VL_APPROX", raising=False)
    assert approx.approx_modes() == frozenset()
    decoder = processor(**SMALL).info.get_media_io("video")
    assert isinstance(decoder, VideoMediaIO) and decoder.frame_scaling is None
    # The exact decoder's spec (hence every exact key) is what it was before the mode existed.
    assert "frame_scaling" not in decoder.get_decode_spec().settings
    frames, _ = decoder.load_bytes(coffee_pan_clip())
    assert frames.shape[1:3] == CLIP_SIZE[::-1]


def test_a_deployment_off_the_fused_path_keeps_exact_videos(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fused path would not take these videos (a kwarg it does not honour): nothing to skip.
    decoder = video_io(monkeypatch, "video_scale", **SMALL, do_resize=False)
    assert decoder.frame_scaling is None


def test_unknown_modes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_APPROX", "video_scale,video_scaled")
    with pytest.raises(ValueError, match="video_scaled"):
        approx.approx_modes()
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_APPROX", " jpeg_draft , video_scale ")
    assert approx.approx_modes() == {"jpeg_draft", "video_scale"}


def test_video_scale_decodes_frames_at_the_target_size(monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = video_io(monkeypatch, "jpeg_draft,video_scale", **SMALL)
    assert decoder.frame_scaling is not None
    assert decoder.frame_scaling.interpolation == DEFAULT_INTERPOLATION
    frames, metadata = decoder.load_bytes(coffee_pan_clip())
    assert frames.shape == (CLIP_FRAMES, TARGET[1], TARGET[0], 3)
    assert (metadata["width"], metadata["height"]) == TARGET
    assert (metadata.details["source_width"], metadata.details["source_height"]) == CLIP_SIZE
    assert current_frame_scaling() is None  # the scope ended with the decode


def test_the_scaled_decode_is_keyed_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    data = coffee_pan_clip()
    scaled = video_io(monkeypatch, "video_scale", **SMALL)
    exact = video_io(monkeypatch, "", **SMALL)
    other_sizing = video_io(monkeypatch, "video_scale", max_pixels=256 * 28 * 28)
    keys = {d.load_bytes_ref(data).key for d in (scaled, exact, other_sizing)}
    assert len(keys) == 3  # a scaled decode never answers for an exact one, nor another sizing
    settings = scaled.get_decode_spec().settings["frame_scaling"]
    assert settings["rule"] == {
        "qwen2_vl_smart_resize": {"factor": 28, "min_pixels": 3136, "max_pixels": 50176}
    }
    assert settings["interpolation"] == DEFAULT_INTERPOLATION
    assert settings["method"]  # the conversion is versioned: a new one gets new keys


def test_video_scale_keeps_the_grid_and_stays_close(monkeypatch: pytest.MonkeyPatch) -> None:
    data = coffee_pan_clip()
    scaled_rows, scaled_grid = video_rows(monkeypatch, "video_scale", data)
    exact_rows, exact_grid = video_rows(monkeypatch, "", data)
    assert scaled_grid.tolist() == exact_grid.tolist() == [8, 12, 18]
    assert scaled_rows.shape == exact_rows.shape and scaled_rows.dtype == exact_rows.dtype
    assert not torch.equal(scaled_rows, exact_rows)  # approximate: FFmpeg's bicubic
    assert psnr(scaled_rows.numpy(), exact_rows.numpy()) > PSNR_FLOOR_DB


def test_a_strong_downscale_stays_close(monkeypatch: pytest.MonkeyPatch) -> None:
    # Below half the source size the frames are converted and scaled in one step (the other
    # method): the grid and the floor hold there too.
    tiny = {"max_pixels": 16 * 28 * 28}
    data = coffee_pan_clip()
    rows = {}
    for mode in ("video_scale", ""):
        monkeypatch.setenv("MEDIAREF_QWEN2_VL_APPROX", mode)
        proc = processor(**tiny)
        ref = proc.info.get_media_io("video").load_bytes_ref(data)
        item = proc.apply(proc.build_inputs(VIDEO_PROMPT, {"video": [ref]}))["mm_kwargs"]["video"]
        rows[mode] = (item[0]["pixel_values_videos"].data, item[0]["video_grid_thw"].data)
    assert (
        rows["video_scale"][1].tolist() == rows[""][1].tolist() == [8, 6, 8]
    )  # 112x84: under half the source
    assert psnr(rows["video_scale"][0].numpy(), rows[""][0].numpy()) > PSNR_FLOOR_DB


def test_the_two_scaling_methods() -> None:
    scaling = FrameScaling(lambda w, h: (w, h), key={})
    rgb = np.asarray(Image.open(SKIMAGE_DATA / "coffee.png").convert("RGB"))[:288, :432]
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24").reformat(
        format="yuv420p"
    )
    # At least half the size on both sides: scaled as YUV, then converted without scaling.
    mild = frame.reformat(width=252, height=168, interpolation="BICUBIC").to_ndarray(format="rgb24")
    assert np.array_equal(scaling.to_rgb(frame, 252, 168), mild)
    # Further down (126 < 288 / 2): converted and scaled in one step.
    strong = frame.to_ndarray(format="rgb24", width=196, height=126, interpolation="BICUBIC")
    assert np.array_equal(scaling.to_rgb(frame, 196, 126), strong)
    # A frame that is not YUV always takes the one step.
    packed = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
    direct = packed.to_ndarray(format="rgb24", width=252, height=168, interpolation="BICUBIC")
    assert np.array_equal(scaling.to_rgb(packed, 252, 168), direct)


def test_the_budget_is_charged_for_the_target_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    data = coffee_pan_clip()
    source_bytes = CLIP_FRAMES * CLIP_SIZE[0] * CLIP_SIZE[1] * 3  # 5.97 MB
    target_bytes = CLIP_FRAMES * TARGET[0] * TARGET[1] * 3  # 2.03 MB
    limit = (source_bytes + target_bytes) // 2  # the target frames fit, the source frames not
    scaled = video_io(monkeypatch, "video_scale", **SMALL)
    exact = video_io(monkeypatch, "", **SMALL)

    budget = MediaDecodedBudget(limit_bytes=limit)
    with decode_budget_scope(budget):
        frames, _ = scaled.load_bytes(data)
    assert frames.nbytes == target_bytes
    assert target_bytes <= budget.used < target_bytes + 4096  # the frames and the packet index

    with decode_budget_scope(MediaDecodedBudget(limit_bytes=limit)):
        with pytest.raises(MediaTooLargeError):
            exact.load_bytes(data)


def test_an_upscaling_target_is_charged_before_it_is_allocated() -> None:
    # A small source whose target is larger: the budget that fits the source must not fit it.
    frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 90, np.uint8), format="rgb24")
    double = FrameScaling(lambda w, h: (2 * w, 2 * h), key={"test": "double"})
    one = 48 * 64 * 3
    with decode_budget_scope(MediaDecodedBudget(limit_bytes=4 * one)):
        FrameCollector(4, header_size=(64, 48)).add(frame, 0)
    with decode_budget_scope(MediaDecodedBudget(limit_bytes=4 * one)):
        with pytest.raises(MediaTooLargeError):
            FrameCollector(4, header_size=(64, 48), scaling=double)
    budget = MediaDecodedBudget(limit_bytes=10**9)
    with decode_budget_scope(budget):
        collector = FrameCollector(4, scaling=double)  # no header: charged at the first frame
        collector.add(frame, 0)
    assert budget.used == 4 * 4 * one
    assert collector.frames().shape == (1, 96, 128, 3)


def test_the_smart_resize_rule_only_uses_fixed_points() -> None:
    scaling = approx.smart_resize_scaling(factor=28, min_pixels=3136, max_pixels=50176)
    assert scaling.target_size(*CLIP_SIZE) == TARGET
    # 5000x30: smart_resize gives 2884x28, which it would shrink again (its floor against
    # max_pixels is not a fixed point there): the frames keep their size, resized exactly later.
    assert scaling.target_size(5000, 30) == (5000, 30)
    assert scaling.target_size(10000, 40) == (10000, 40)  # aspect ratio over 200: HF's error


def test_a_request_cannot_set_a_frame_scaling() -> None:
    merged = VideoMediaIO.merge_kwargs({"num_frames": 8}, {"frame_scaling": {"rule": {}}})
    assert "frame_scaling" not in merged
    with pytest.raises(ValueError, match="FrameScaling"):
        VideoMediaIO(ImageMediaIO(), frame_scaling={"rule": {}})  # type: ignore[arg-type]


def test_only_a_pyav_loader_takes_a_frame_scaling() -> None:
    scaling = approx.smart_resize_scaling(factor=28, min_pixels=3136, max_pixels=50176)
    assert VideoMediaIO(ImageMediaIO(), video_backend="qwen2_vl").supports_frame_scaling()
    molmo = VideoMediaIO(ImageMediaIO(), video_backend="molmo2")  # a loader of its own
    assert not molmo.supports_frame_scaling()
    with pytest.raises(ValueError, match="PyAV"):
        molmo.with_frame_scaling(scaling)
    with pytest.raises(ValueError, match="interpolation"):
        FrameScaling(lambda w, h: (w, h), key={}, interpolation="NEAREST_ISH")


def test_video_jpeg_frames_stay_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    # A video/jpeg payload is decoded frame by frame by the image decoder: no scaling applies,
    # and its spec (shared with the exact decoder's) says so.
    scaled = video_io(monkeypatch, "video_scale", **SMALL)
    frames = [np.full((48, 64, 3), shade, np.uint8) for shade in (40, 200)]
    payload = scaled.encode_base64(frames)
    decoded, _ = scaled.load_base64("video/jpeg", payload)
    assert np.asarray(decoded).shape == (2, 48, 64, 3)
    exact = video_io(monkeypatch, "", **SMALL)
    assert (
        scaled.load_base64_ref("video/jpeg", payload).key
        == exact.load_base64_ref("video/jpeg", payload).key
    )


def test_a_scaled_decode_of_a_sampled_clip_keeps_the_sampled_frames(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seek-driven sampling (a few frames of many) goes through the same collector.
    data = make_clip(num_frames=60, width=224, height=112, keyframe_interval=10)
    scaling = FrameScaling(lambda w, h: (w // 2, h // 2), key={"test": "half"})
    exact = VideoMediaIO(ImageMediaIO(), num_frames=4, video_backend="pyav")
    scaled = exact.with_frame_scaling(scaling)
    exact_frames, exact_meta = exact.load_bytes(data)
    frames, metadata = scaled.load_bytes(data)
    assert exact.frame_scaling is None  # the copy did not change the original
    assert metadata["frames_indices"] == exact_meta["frames_indices"]
    assert frames.shape == (4, 56, 112, 3) and exact_frames.shape == (4, 112, 224, 3)


@pytest.mark.timeout(120)
def test_scaled_and_exact_decodes_side_by_side_keep_their_own_sizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The scaling travels in a context variable set per decode: threads decoding at once (the
    # media pool) must not see each other's.
    from concurrent.futures import ThreadPoolExecutor

    data = coffee_pan_clip()
    scaled = video_io(monkeypatch, "video_scale", **SMALL)
    exact = video_io(monkeypatch, "", **SMALL)
    decoders = [scaled, exact] * 4
    with ThreadPoolExecutor(max_workers=4) as pool:
        shapes = list(pool.map(lambda d: d.load_bytes(data)[0].shape[1:3], decoders))
    assert shapes == [TARGET[::-1], CLIP_SIZE[::-1]] * 4
