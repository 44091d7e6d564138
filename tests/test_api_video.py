"""vLLM 0.33.0's video API at mediaref's paths: the loader registry, the per-model sampling rules,
the codecs, VideoMediaIO's kwargs merge and video/jpeg metadata, and the frame helpers.

The sampling rules are checked on hand-computed cases from their models' documented behaviour
(the HF video processors they mirror); end to end, clips paint each frame's index into the frame
(tests/_video_samples.py), so a decode is checked for WHICH frames came back.
"""

from __future__ import annotations

import io
import sys
import types
from typing import Any, ClassVar

import numpy as np
import pybase64
import pytest
import torch
from PIL import Image

from _image_samples import encode
from _video_samples import frame_pattern, make_clip, read_frame_index
from mediaref.exceptions import MediaTooLargeError, VLLMValidationError
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoEmbeddingMediaIO, VideoMediaIO
from mediaref.video import (
    VIDEO_LOADER_REGISTRY,
    ClefOmniVideoBackend,
    DynamicVideoBackend,
    EmbeddingGemma2VideoBackend,
    Glm5NextVideoBackend,
    GLM46VVideoBackend,
    GLMGAVideoBackend,
    Molmo2VideoBackend,
    NemotronVLVideoBackend,
    OpenCVDynamicOpenPanguVideoBackend,
    PyAVVideoBackend,
    Qwen2VLVideoBackend,
    Qwen3VLVideoBackend,
    VideoBackend,
    VideoLoader,
    VideoLoaderRegistry,
    get_video_loader_backend_for_processor,
    rescale_video_size,
    resize_video,
    sample_frames_from_video,
)
from mediaref.video_decoders import (
    UnsupportedCodecOptionError,
    VideoCodecUnavailableError,
    VideoSourceMetadata,
    VideoTargetMetadata,
    check_frame_pixel_limit,
    decode_video,
    incompatible_backend_options,
    resolve_video_backend_kwargs,
)


def src(total: int, fps: float, duration: float | None = None) -> VideoSourceMetadata:
    return VideoSourceMetadata(total, fps, total / fps if duration is None else duration)


def tgt(num_frames: int = -1, fps: float = -1, max_duration: float = 300) -> VideoTargetMetadata:
    return VideoTargetMetadata(num_frames, fps, max_duration)


def painted(frames: Any) -> list[int]:
    return [read_frame_index(np.asarray(frame)) for frame in frames]


def video_io(**kwargs: Any) -> VideoMediaIO:
    return VideoMediaIO(ImageMediaIO(), **kwargs)


# --- the registry ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("processor", "backend"),
    [
        ("Qwen2VLVideoProcessor", "qwen2_vl"),
        ("Qwen3VLVideoProcessor", "qwen3_vl"),
        ("Cosmos3EdgeVideoProcessor", "qwen3_vl"),
        ("Glm4vVideoProcessor", "opencv_dynamic"),
        ("Glm46VVideoProcessor", "glm46v"),
        ("Glm5NextVideoProcessor", "glm5next"),
        ("Glm5nextVideoProcessor", "glm5next"),
        ("GlmgaVideoProcessor", "glmga"),
        ("Molmo2VideoProcessor", "molmo2"),
        ("EmbeddingGemma2VideoProcessor", "embedding_gemma2"),
        ("LlavaNextVideoProcessor", None),
        (None, None),
    ],
)
def test_hf_video_processors_pick_vllms_backends(
    processor: str | None, backend: str | None
) -> None:
    assert get_video_loader_backend_for_processor(processor) == backend
    assert VIDEO_LOADER_REGISTRY.get_backend_for_video_processor(processor) == backend


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("opencv", VideoBackend),
        ("pyav", PyAVVideoBackend),
        ("qwen2_vl", Qwen2VLVideoBackend),
        ("qwen3_vl", Qwen3VLVideoBackend),
        ("opencv_dynamic", DynamicVideoBackend),
        ("glm46v", GLM46VVideoBackend),
        ("glm5next", Glm5NextVideoBackend),
        ("glmga", GLMGAVideoBackend),
        ("molmo2", Molmo2VideoBackend),
        ("embedding_gemma2", EmbeddingGemma2VideoBackend),
        ("nemotron_vl", NemotronVLVideoBackend),
        ("openpangu", OpenCVDynamicOpenPanguVideoBackend),
        ("clef_omni", ClefOmniVideoBackend),
    ],
)
def test_every_vllm_loader_is_registered_under_vllms_name(name: str, cls: type) -> None:
    assert VIDEO_LOADER_REGISTRY.get(name) is cls
    assert isinstance(VIDEO_LOADER_REGISTRY.load(name), cls)  # vLLM builds an instance
    assert issubclass(cls, VideoLoader)


def test_gpu_codecs_are_marked_and_cpu_ones_are_not() -> None:
    for name in ("pynvvideocodec", "deepstream"):
        assert VIDEO_LOADER_REGISTRY.backend_requires_gpu(name)
    for name in ("pyav", "opencv", "qwen2_vl", "torchcodec", "unknown"):
        assert not VIDEO_LOADER_REGISTRY.backend_requires_gpu(name)


def test_register_binds_processors_and_gpu_flags_and_unregister_drops_them() -> None:
    registry = VideoLoaderRegistry()

    @registry.register("mine", video_processor=("AVideoProcessor", "BVideoProcessor"))
    class Mine(VideoBackend):
        pass

    @registry.register("gpu", requires_gpu=True)
    class Gpu(VideoBackend):
        pass

    registry.register_gpu_codec("elsewhere")
    assert registry.get_backend_for_video_processor("BVideoProcessor") == "mine"
    assert registry.backend_requires_gpu("gpu") and registry.backend_requires_gpu("elsewhere")
    assert not registry.backend_requires_gpu("mine")

    registry.unregister("mine")
    assert registry.get_backend_for_video_processor("AVideoProcessor") is None
    assert "mine" not in registry


def test_a_refused_registration_records_nothing() -> None:
    registry = VideoLoaderRegistry()
    registry.register("first", video_processor="XVideoProcessor")(type("First", (), {}))

    with pytest.raises(ValueError, match="already bound"):
        registry.register("second", video_processor="XVideoProcessor")(type("Second", (), {}))
    assert "second" not in registry
    with pytest.raises(TypeError, match="video_processor"):
        registry.register("third", video_processor=("ok", 3))  # type: ignore[arg-type]


def test_the_base_loader_builds_vllms_metadata_and_has_no_rule() -> None:
    metadata = VideoLoader.create_hf_metadata(src(10, 5.0), [0, 4, 9], "pyav")
    assert metadata == {
        "total_num_frames": 10,
        "fps": 5.0,
        "duration": 2.0,
        "video_backend": "pyav",
        "frames_indices": [0, 4, 9],
        "do_sample_frames": False,
    }
    assert VideoLoader.create_hf_metadata(src(2, 1.0), [0, 1], "x")["do_sample_frames"] is True
    with pytest.raises(NotImplementedError, match="sampling rule"):
        VideoLoader.compute_frames_index_to_sample(src(10, 5.0), tgt())


# --- sampling rules, on hand-computed cases ---------------------------------------------------


def test_uniform_rule_takes_the_smaller_of_count_and_rate() -> None:
    rule = VideoBackend.compute_frames_index_to_sample
    assert rule(src(300, 30.0), tgt(num_frames=4)) == [0, 99, 199, 299]
    assert rule(src(300, 30.0), tgt(fps=0.5)) == [0, 74, 149, 224, 299]  # 10 s at 0.5 fps
    assert rule(src(3, 30.0), tgt(num_frames=8)) == [0, 1, 2]
    assert rule(src(300, 30.0), tgt(fps=0.001)) == [0]  # at least one frame


def test_qwen2_vl_samples_by_rate_in_temporal_pairs() -> None:
    rule = Qwen2VLVideoBackend.compute_frames_index_to_sample
    # 4 s at 2 fps: 8 frames, every 15th.
    assert rule(src(120, 30.0), tgt(fps=2)) == list(range(0, 120, 15))
    # 1 s at 2 fps = 2 frames, raised to min_frames=4.
    assert rule(src(30, 30.0), tgt(fps=2)) == [0, 7, 15, 22]
    # An odd count is rounded down to whole temporal patches; max_frames caps it.
    assert len(rule(src(150, 30.0), tgt(fps=2))) == 10
    assert len(rule(src(150, 30.0), tgt(fps=2), max_frames=5)) == 4
    # HF's float32 arange can step onto the end (22 frames of 359 give a 23rd index, 359):
    # that index is clamped to the last frame, as HF's and vLLM's are.
    tail = rule(src(359, 29.97), tgt(fps=2))
    assert len(tail) == 23 and tail[-2:] == [342, 358]
    for total in range(2, 500, 7):
        indices = rule(src(total, 29.97), tgt(fps=2))
        assert 0 <= min(indices) and max(indices) < total
    with pytest.raises(ValueError, match="frame rate"):
        rule(src(30, 0.0, 1.0), tgt(fps=2))
    with pytest.raises(ValueError, match="temporal patch"):
        rule(src(1, 30.0), tgt(fps=2))


def test_qwen3_vl_spreads_frames_and_assumes_24_fps_when_unknown() -> None:
    rule = Qwen3VLVideoBackend.compute_frames_index_to_sample
    assert rule(src(120, 30.0), tgt(fps=2)) == [0, 17, 34, 51, 68, 85, 102, 119]
    # Unknown rate: 48 frames are 2 s at 24 fps, so 4 frames.
    assert rule(src(48, 0.0, 0.0), tgt(fps=2)) == [0, 16, 31, 47]
    assert Qwen3VLVideoBackend._prepare_source(src(48, 0.0, 0.0)).original_fps == 24.0


def test_clef_omni_takes_the_first_frame_at_each_step_and_refuses_long_videos() -> None:
    rule = ClefOmniVideoBackend.compute_frames_index_to_sample
    assert rule(src(31, 30.0), tgt(fps=2)) == [0, 15, 30]
    # 3 * (30 / 10) is 9.000000000000002 in floats: still frame 9.
    assert rule(src(10, 30.0), tgt(fps=10)) == [0, 3, 6, 9]
    assert ClefOmniVideoBackend.MAX_FRAMES == 768
    with pytest.raises(ValueError, match="longer than 384 seconds"):
        rule(src(30 * 400, 30.0), tgt(fps=2))
    with pytest.raises(ValueError, match="unknown frame rate"):
        rule(src(30, 0.0, 1.0), tgt(fps=2))


def test_glm4v_dynamic_rule_steps_by_rate_then_spreads_long_videos() -> None:
    rule = DynamicVideoBackend.compute_frames_index_to_sample
    assert rule(src(120, 30.0), tgt(fps=2, max_duration=300)) == list(range(0, 120, 15))
    # 10 s over a 5 s limit: 10 frames spread over the whole video.
    assert rule(src(300, 30.0), tgt(fps=2, max_duration=5)) == [
        0, 34, 67, 100, 134, 167, 200, 234, 267, 299
    ]  # fmt: skip
    # No duration in the container: GLM's estimate (whole seconds) is used.
    assert DynamicVideoBackend._prepare_source(src(91, 30.0, 0.0)).duration == 4


def test_glm46v_rate_follows_the_duration_and_the_count_is_even() -> None:
    rule = GLM46VVideoBackend.compute_frames_index_to_sample
    # 3 s is under 30 s: 3 fps, two frames a step, 18 frames (the step sum lands past 55/30).
    assert rule(src(90, 30.0), tgt()) == [*range(0, 55, 5), 56, *range(60, 90, 5)]
    indices = rule(src(30 * 100, 30.0), tgt())  # 100 s: 1 fps, 200 frames
    assert len(indices) == 200 and len(indices) % 2 == 0
    assert len(rule(src(30 * 2000, 30.0), tgt())) == 640  # capped


def test_glm5next_walks_at_two_frames_a_step_and_spreads_short_clips() -> None:
    rule = Glm5NextVideoBackend.compute_frames_index_to_sample
    # 3 s at 2 fps: 6 frames; the walk finds 12 candidates, so 6 are spread over the video.
    assert rule(src(90, 30.0), tgt()) == [0, 17, 35, 53, 71, 89]
    # 4 frames over 4 s want 8: evenly spaced timestamps, repeats dropped.
    assert rule(src(4, 1.0), tgt()) == [0, 1, 2, 3]
    assert len(rule(src(9000, 30.0), tgt(), max_frames=10)) == 10


def test_glmga_walks_until_the_last_step_without_pairing() -> None:
    rule = GLMGAVideoBackend.compute_frames_index_to_sample
    # 3 s at 2 fps: 6 frames; the walk stops at 2.5 s with 5, so 6 are spread over them.
    assert rule(src(90, 30.0), tgt(fps=2)) == [0, 12, 24, 36, 48, 60]
    with pytest.raises(ValueError, match="frame rate"):
        rule(src(90, 0.0, 3.0), tgt(fps=2))


def test_molmo2_candidate_rates_divide_the_video_rate() -> None:
    rates = Molmo2VideoBackend.get_candidate_target_fps
    assert rates(6, 2) == [2.0, 6.0]
    assert rates(5, 1) == [1.0, 5.0]
    assert rates(2, 2) == [2.0]
    assert rates(30, 2) == [2.0, 6.0]  # 10 and 30 are over max_fps=8
    with pytest.raises(ValueError, match="must divide"):
        rates(5, 2)
    with pytest.raises(ValueError, match="positive"):
        rates(0, 2)


def test_molmo2_modes() -> None:
    rule = Molmo2VideoBackend.compute_frames_index_to_sample
    assert rule(src(5, 30.0), tgt(num_frames=4)) == [0, 1, 2, 3, 4]  # no mode: every frame
    assert rule(src(120, 30.0), tgt(num_frames=4), frame_sample_mode="uniform_last_frame") == [
        0, 39, 79, 119
    ]  # fmt: skip
    # Short enough for max_fps=2 within 9 frames: every 15th frame, and the last.
    assert rule(
        src(120, 30.0), tgt(num_frames=9), frame_sample_mode="uniform_last_frame", max_fps=2
    ) == [0, 15, 30, 45, 60, 75, 90, 105, 119]
    # fps: 2 fps spans 4 s in 8 frames; 6 fps would need 24.
    assert rule(src(120, 30.0), tgt(num_frames=8, fps=2), frame_sample_mode="fps") == list(
        range(0, 120, 15)
    )
    with pytest.raises(NotImplementedError, match="frame_sample_mode"):
        rule(src(120, 30.0), tgt(num_frames=8), frame_sample_mode="random")
    # 4 frames at 2 fps cover 1.5 s, less than 3 s: spread evenly instead.
    np.testing.assert_allclose(
        Molmo2VideoBackend.sample_times(3.0, 4, "uniform_last_frame", 2), [0, 1, 2, 3]
    )
    np.testing.assert_allclose(
        Molmo2VideoBackend.sample_times(1.0, 5, "uniform_last_frame", 4), [0, 0.25, 0.5, 0.75, 1]
    )
    np.testing.assert_allclose(
        Molmo2VideoBackend.sample_times(1.5, 8, "fps", None, [2.0, 4.0]),
        [0, 0.25, 0.5, 0.75, 1, 1.25],
    )


def test_embedding_gemma2_rate_cap_and_overflow_strategies() -> None:
    rule = EmbeddingGemma2VideoBackend.compute_frames_index_to_sample
    processor = types.SimpleNamespace(fps=2.0, max_frames=8)
    video = src(300, 30.0)  # 10 s: 20 steps of 0.5 s, 15 frames apart
    assert rule(video, tgt(), video_processor=processor) == [0, 30, 75, 120, 150, 195, 240, 285]
    assert rule(video, tgt(), video_processor=processor, overflow_strategy="truncate") == list(
        range(0, 120, 15)
    )
    assert rule(video, tgt(), video_processor=processor, overflow_strategy=None) == list(
        range(0, 300, 15)
    )
    # Without a rate the frames themselves are sampled.
    assert rule(src(10, 0.0, 0.0), tgt(), video_processor=processor) == [0, 1, 2, 3, 5, 6, 7, 9]
    for bad in ({"max_frames": 0}, {"max_frames": 200}, {"overflow_strategy": "drop"}):
        with pytest.raises(ValueError):
            rule(video, tgt(), video_processor=processor, **bad)
    with pytest.raises(ValueError, match="exceeds"):
        rule(video, tgt(fps=61), video_processor=processor)


def test_embedding_gemma2_defaults_come_from_the_hf_processor() -> None:
    # transformers' EmbeddingGemma2VideoProcessor samples 1 fps, at most 32 frames.
    assert EmbeddingGemma2VideoBackend._get_processor_defaults() == (1.0, 32)
    frames, metadata = EmbeddingGemma2VideoBackend.load_bytes(make_clip(num_frames=120))
    assert painted(frames) == [0, 30, 60, 90] == metadata["frames_indices"]


def test_openpangu_spreads_timestamps_at_most_at_the_rate() -> None:
    rule = OpenCVDynamicOpenPanguVideoBackend.compute_frames_index_to_sample
    assert rule(src(300, 30.0), tgt(num_frames=4, fps=2)) == [0, 100, 199, 299]
    assert rule(src(300, 30.0), tgt(num_frames=4, fps=-1)) == [0, 100, 199, 299]
    # 30 frames asked, but 2 fps over 9.97 s gives 20: one every 0.5 s.
    assert rule(src(300, 30.0), tgt(num_frames=30, fps=2)) == list(range(0, 300, 15))[:20]
    with pytest.raises(ValueError, match="fps"):
        rule(src(300, 30.0), tgt(num_frames=4, fps=0))


# --- end to end on PyAV (mediaref's default codec) ------------------------------------------


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        ("qwen2_vl", {}, list(range(0, 120, 15))),
        ("qwen3_vl", {}, [0, 17, 34, 51, 68, 85, 102, 119]),
        ("opencv_dynamic", {}, list(range(0, 120, 15))),
        ("glm5next", {}, [0, 17, 34, 51, 68, 85, 102, 119]),
        ("molmo2", {"frame_sample_mode": "fps"}, list(range(0, 120, 15))),
        ("openpangu", {}, list(range(0, 120, 15))),
    ],
)
def test_model_loaders_decode_their_frames_with_pyav(
    name: str, options: dict[str, Any], expected: list[int]
) -> None:
    frames, metadata = video_io(num_frames=8, video_backend=name, **options).load_bytes(
        make_clip(num_frames=120)
    )

    assert painted(frames) == metadata["frames_indices"] == expected
    assert metadata["video_backend"].startswith("pyav")
    assert metadata["total_num_frames"] == 120 and metadata["fps"] == 30.0


def test_dynamic_loaders_name_their_sampling_in_the_metadata() -> None:
    data = make_clip(num_frames=60)
    assert DynamicVideoBackend.load_bytes(data)[1]["video_backend"] == "pyav_dynamic"
    assert OpenCVDynamicOpenPanguVideoBackend.load_bytes(data, 4)[1]["video_backend"] == (
        "pyav_dynamic"
    )


def test_pairing_loaders_repeat_the_last_frame() -> None:
    data = make_clip(num_frames=31)  # ClefOmni at 2 fps: frames 0, 15, 30
    frames, metadata = ClefOmniVideoBackend.load_bytes(data)
    assert painted(frames) == [0, 15, 30, 30] == metadata["frames_indices"]

    class OddGLMGA(GLMGAVideoBackend):
        @classmethod
        def compute_frames_index_to_sample(
            cls, source: Any, target: Any, **kwargs: Any
        ) -> list[int]:
            return [0, 5, 9]

    frames, _ = OddGLMGA.load_bytes(make_clip(num_frames=10))
    assert painted(frames) == [0, 5, 9, 9]


def test_embedding_gemma2_returns_a_frame_as_often_as_the_rule_names_it() -> None:
    data = make_clip(num_frames=10, fps=10)  # 1 s; 60 fps asks for 6 steps per frame
    processor = types.SimpleNamespace(fps=60.0, max_frames=128)

    frames, metadata = EmbeddingGemma2VideoBackend.load_bytes(
        data, video_processor=processor, overflow_strategy=None
    )

    assert len(frames) == 60 and painted(frames) == metadata["frames_indices"]
    assert sorted(set(metadata["frames_indices"])) == list(range(10))
    assert metadata["do_sample_frames"] is False


def test_nemotron_keeps_the_container_in_its_metadata() -> None:
    data = make_clip()
    _, metadata = NemotronVLVideoBackend.load_bytes(data, num_frames=2)
    assert metadata["original_video_bytes"] is data


def test_vllm_keyword_arguments_reach_the_rule() -> None:
    frames, metadata = Qwen2VLVideoBackend.load_bytes(make_clip(num_frames=120), max_frames=4)
    assert len(frames) == 4 == len(metadata["frames_indices"])


# --- codecs ----------------------------------------------------------------------------------


def test_codec_options_are_split_from_the_rules_and_checked() -> None:
    sampling, codec = resolve_video_backend_kwargs(
        "torchcodec", {"seek_mode": "approximate", "x": 1}
    )
    assert sampling == {"x": 1}
    assert codec == {"num_ffmpeg_threads": 0, "seek_mode": "approximate", "device": "cpu"}
    assert resolve_video_backend_kwargs("pyav", {"max_frames": 3}) == ({"max_frames": 3}, {})
    with pytest.raises(ValueError, match="seek_mode is not supported by the 'opencv' backend"):
        resolve_video_backend_kwargs("opencv", {"seek_mode": "exact"})
    with pytest.raises(ValueError, match="Unknown video codec backend 'vlc'"):
        resolve_video_backend_kwargs("vlc", {})
    assert incompatible_backend_options("torchcodec", "opencv") == {
        "num_ffmpeg_threads",
        "seek_mode",
        "device",
    }
    assert incompatible_backend_options(None, "opencv") == set()


def test_frame_recovery_is_refused_where_vllm_refuses_it() -> None:
    with pytest.raises(UnsupportedCodecOptionError, match="frame_recovery") as caught:
        decode_video("torchcodec", VideoBackend, b"", tgt(), {}, {}, frame_recovery=True)
    assert isinstance(caught.value, AssertionError) and isinstance(caught.value, ValueError)
    with pytest.raises(ValueError, match="frame_recovery"):
        video_io(backend="torchcodec", frame_recovery=True)


@pytest.mark.parametrize("codec", ["pynvvideocodec", "deepstream"])
def test_gpu_codecs_are_refused_when_the_decoder_is_built(codec: str) -> None:
    with pytest.raises(VideoCodecUnavailableError, match="GPU"):
        video_io(backend=codec)
    with pytest.raises(VideoCodecUnavailableError, match="GPU"):
        decode_video(codec, VideoBackend, b"", tgt(), {}, {}, frame_recovery=False)


def test_an_optional_codec_that_is_not_installed_fails_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "cv2", None)  # import cv2 now raises ImportError
    with pytest.raises(VideoCodecUnavailableError, match="opencv-python") as caught:
        video_io(video_backend="opencv")
    assert isinstance(caught.value, ImportError)
    with pytest.raises(VideoCodecUnavailableError):
        video_io(backend="opencv")
    assert video_io().video_backend == "pyav"  # the default needs nothing optional


def test_check_frame_pixel_limit_reads_vllms_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    check_frame_pixel_limit(64, 48)
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "100")
    with pytest.raises(MediaTooLargeError, match="VLLM_MAX_IMAGE_PIXELS"):
        check_frame_pixel_limit(64, 48)
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "0")
    check_frame_pixel_limit(10**5, 10**5)


def test_model_options_are_vetted_when_the_decoder_is_built() -> None:
    video_io(video_backend="qwen2_vl", min_frames=2, max_frames=16, temporal_patch_size=2)
    with pytest.raises(TypeError, match=r"'qwen2_vl'.*\['max_frame'\]"):
        video_io(video_backend="qwen2_vl", max_frame=16)
    with pytest.raises(NotImplementedError, match="frame_sample_mode"):
        video_io(video_backend="molmo2", frame_sample_mode="random")

    class AnyOption(VideoBackend):  # declares no sampling_options: takes any, as vLLM's
        pass

    VIDEO_LOADER_REGISTRY.register("test-any-option")(AnyOption)
    try:
        video_io(video_backend="test-any-option", backend="pyav", whatever=1)
    finally:
        VIDEO_LOADER_REGISTRY.unregister("test-any-option")


def test_sampling_rules_are_keyed_apart() -> None:
    data = make_clip()
    keys = {video_io(video_backend=name).load_bytes_ref(data).key for name in ("pyav", "qwen2_vl")}

    class Subclass(Qwen2VLVideoBackend):  # inherits no version tag: keyed by its own name
        pass

    VIDEO_LOADER_REGISTRY.register("test-subclass")(Subclass)
    try:
        keys.add(video_io(video_backend="test-subclass").load_bytes_ref(data).key)
    finally:
        VIDEO_LOADER_REGISTRY.unregister("test-subclass")
    assert len(keys) == 3


# --- torchcodec, through a stand-in package -------------------------------------------------


class _FakeTorchCodecDecoder:
    instances: ClassVar[list[_FakeTorchCodecDecoder]] = []

    def __init__(self, data: bytes, **options: Any) -> None:
        self.options = options
        self.frames = np.stack([frame_pattern(i, 64, 48) for i in range(20)])
        self.metadata = types.SimpleNamespace(
            num_frames=20, average_fps=10.0, duration_seconds=2.0, width=64, height=48
        )
        self.asked: list[int] = []
        _FakeTorchCodecDecoder.instances.append(self)

    def get_frames_at(self, indices: list[int]) -> Any:
        self.asked = list(indices)
        return types.SimpleNamespace(data=torch.from_numpy(self.frames[indices]))


@pytest.fixture
def fake_torchcodec(monkeypatch: pytest.MonkeyPatch) -> type[_FakeTorchCodecDecoder]:
    package = types.ModuleType("torchcodec")
    decoders = types.ModuleType("torchcodec.decoders")
    decoders.VideoDecoder = _FakeTorchCodecDecoder  # type: ignore[attr-defined]
    package.decoders = decoders  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchcodec", package)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", decoders)
    _FakeTorchCodecDecoder.instances.clear()
    return _FakeTorchCodecDecoder


def test_torchcodec_codec_reads_the_sampled_frames_in_one_call(
    fake_torchcodec: type[_FakeTorchCodecDecoder],
) -> None:
    decoder = video_io(num_frames=4, backend="torchcodec", seek_mode="approximate")

    frames, metadata = decoder.load_bytes(make_clip(num_frames=20, fps=10))

    (made,) = fake_torchcodec.instances
    assert made.options == {
        "dimension_order": "NHWC",
        "num_ffmpeg_threads": 0,
        "seek_mode": "approximate",
        "device": "cpu",
    }
    assert made.asked == [0, 6, 12, 19] == metadata["frames_indices"]
    assert isinstance(frames, np.ndarray) and painted(frames) == [0, 6, 12, 19]
    assert metadata["video_backend"] == "torchcodec" and metadata["total_num_frames"] == 20


def test_torchcodec_refuses_devices_it_cannot_use(
    fake_torchcodec: type[_FakeTorchCodecDecoder],
) -> None:
    from mediaref.video_decoders.torchcodec import TorchCodecVideoBackendMixin as Mixin

    with pytest.raises(ValueError, match="only supports 'cpu' and 'cuda'"):
        Mixin.make_torchcodec_decoder(b"", device="meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA-capable"):
            Mixin.make_torchcodec_decoder(b"", device="cuda")
    metadata = types.SimpleNamespace(
        num_frames=None, average_fps=25.0, duration_seconds=2.0, width=1, height=1
    )
    source = Mixin.get_torchcodec_metadata(types.SimpleNamespace(metadata=metadata))
    assert source == VideoSourceMetadata(50, 25.0, 2.0)  # a missing count from the duration


# --- VideoMediaIO: vLLM's kwargs merge and video/jpeg metadata --------------------------------


@pytest.mark.parametrize(
    ("defaults", "runtime", "merged"),
    [
        ({"num_frames": 32, "fps": 2}, {"num_frames": 8}, {"num_frames": 8}),
        ({"num_frames": 32, "fps": 2}, {"fps": 1}, {"fps": 1}),
        ({"num_frames": 32, "fps": 2}, {"fps": 1, "num_frames": 4}, {"fps": 1, "num_frames": 4}),
        ({"num_frames": 32}, None, {"num_frames": 32}),
        # Startup-only options and unconfigured GPU backends are dropped from requests.
        ({"device": "cpu"}, {"device": "cuda", "hw_decoders": 9}, {"device": "cpu"}),
        ({}, {"video_backend": "pynvvideocodec"}, {}),
        ({}, {"backend": "deepstream"}, {}),
        ({"backend": "deepstream"}, {"backend": "deepstream"}, {"backend": "deepstream"}),
        # Another codec drops the defaults only the previous one takes.
        (
            {"backend": "torchcodec", "seek_mode": "approximate", "max_frames": 9},
            {"backend": "opencv"},
            {"backend": "opencv", "max_frames": 9},
        ),
    ],
)
def test_merge_kwargs_follows_vllm(
    defaults: dict[str, Any], runtime: dict[str, Any] | None, merged: dict[str, Any]
) -> None:
    assert VideoMediaIO.merge_kwargs(defaults, runtime) == merged


def _jpeg_text(count: int) -> str:
    frame = encode(Image.fromarray(frame_pattern(1, 64, 48)), "JPEG", quality=95)
    return ",".join([pybase64.b64encode(frame).decode("ascii")] * count)


def test_jpeg_sequences_report_the_clients_sampling() -> None:
    decoder = video_io(
        num_frames=-1,
        fps=2,
        frames_indices=[0, 10, 20],
        total_num_frames=30,
        do_sample_frames=True,
    )

    _, metadata = decoder.load_base64("video/jpeg", _jpeg_text(3))

    assert metadata["frames_indices"] == [0, 10, 20]
    assert metadata["total_num_frames"] == 30 and metadata["duration"] == 15.0
    assert metadata["do_sample_frames"] is True and metadata["fps"] == 2.0
    _, timed = video_io(num_frames=-1, duration=4.5).load_base64("video/jpeg", _jpeg_text(2))
    assert timed["duration"] == 4.5
    # They shape the metadata, so they are in the ref's key; a container decode ignores them.
    ref_keys = {
        video_io(num_frames=-1, **options).load_base64_ref("video/jpeg", _jpeg_text(3)).key
        for options in ({}, {"total_num_frames": 30}, {"total_num_frames": 31})
    }
    assert len(ref_keys) == 3
    assert video_io(total_num_frames=30).load_bytes(make_clip())[1]["total_num_frames"] == 30


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"frames_indices": [0, "1"]}, "frames_indices must be a list of integers"),
        ({"total_num_frames": 0}, "total_num_frames must be a positive integer"),
        ({"duration": -1}, "duration must be a non-negative number"),
        ({"do_sample_frames": "yes"}, "do_sample_frames must be a boolean"),
    ],
)
def test_jpeg_metadata_options_are_type_checked_at_construction(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        video_io(**options)


def test_jpeg_metadata_must_agree_with_the_frames_sent() -> None:
    with pytest.raises(ValueError, match=r"frames_indices length \(2\) must match .* \(3\)"):
        video_io(num_frames=-1, frames_indices=[0, 1]).load_base64("video/jpeg", _jpeg_text(3))
    with pytest.raises(ValueError, match=r"total_num_frames \(2\) must be >= .* \(3\)"):
        video_io(num_frames=-1, total_num_frames=2).load_base64("video/jpeg", _jpeg_text(3))


def test_a_loaders_default_rate_applies_when_no_fps_is_given() -> None:
    # Qwen2-VL's default is 2 fps: 4 s give 8 frames. A given fps replaces it.
    data = make_clip(num_frames=120)
    assert len(video_io(video_backend="qwen2_vl").load_bytes(data)[0]) == 8
    assert len(video_io(video_backend="qwen2_vl", fps=1).load_bytes(data)[0]) == 4


# --- embeddings ------------------------------------------------------------------------------


def test_video_embeddings_load_from_numpy_and_torch_and_name_their_field() -> None:
    embeddings = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    loader = VideoEmbeddingMediaIO()
    buffer = io.BytesIO()
    np.save(buffer, embeddings.numpy())

    assert torch.equal(loader.load_bytes(buffer.getvalue()), embeddings)
    assert torch.equal(loader.load_base64("", loader.encode_base64(embeddings)), embeddings)
    assert loader.get_decode_spec().settings["modality"] == "video"
    with pytest.raises(VLLMValidationError, match="video_embeds") as caught:
        loader.load_bytes(b"not a tensor")
    assert caught.value.parameter == "video_embeds"


# --- frame helpers ---------------------------------------------------------------------------


def test_resize_and_rescale_keep_frames_and_channels() -> None:
    frames = np.full((3, 8, 12, 3), 77, dtype=np.uint8)
    frames[:, :, 6:] = 200

    resized = resize_video(frames, (4, 6))

    assert resized.shape == (3, 4, 6, 3) and resized.dtype == np.uint8
    assert (resized[:, :, :2] == 77).all() and (resized[:, :, 4:] == 200).all()
    assert rescale_video_size(frames, 0.5).shape == (3, 4, 6, 3)
    assert rescale_video_size(frames, 1.5).shape == (3, 12, 18, 3)


def test_sample_frames_from_video_spreads_over_the_frames() -> None:
    frames = np.arange(10).reshape(10, 1, 1, 1)
    assert sample_frames_from_video(frames, 4).ravel().tolist() == [0, 3, 6, 9]
    assert sample_frames_from_video(frames, -1) is frames
