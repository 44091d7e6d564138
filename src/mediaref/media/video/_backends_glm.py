"""Loaders of the GLM-V line: duration-aware sampling, each as its model's HF video processor does.

Most of them share one shape (GLM's training-time sampler): walk the frames in order, taking the
first frame at or after each time step; if that gives fewer frames than the target count, spread
the target count evenly between the first and last pick; if more, spread it over the whole
video; drop repeats, keeping order; some then repeat the last frame to pair frames into temporal
patches. What differs is the step, the target count and where the walk stops.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from mediaref.media.video._backend import VideoBackend
from mediaref.media.video._backends_qwen import repeat_last_frame
from mediaref.media.video.decoders import VideoDecoderBackend
from mediaref.media.video.decoders.base import VideoSourceMetadata, VideoTargetMetadata
from mediaref.media.video.loader_registry import (
    VIDEO_LOADER_REGISTRY,
    DecodedFrames,
    VideoFrames,
    VideoMetadata,
)


def estimated_duration(total_frames: int, fps: float) -> float:
    """GLM's duration for a container that reports none: whole seconds, counting the last frame's."""
    return round((total_frames - 1) / fps) + 1 if fps > 0 else 0


def _with_estimated_duration(source: VideoSourceMetadata) -> VideoSourceMetadata:
    if source.duration:
        return source
    return source._replace(
        duration=estimated_duration(source.total_frames_num, source.original_fps)
    )


def _walk(total: int, seconds_per_frame: float, step: float, stop_at: float) -> list[int]:
    """The first frame at or after each multiple of ``step`` seconds, until the next multiple
    reaches ``stop_at``."""
    picks: list[int] = []
    next_time = 0.0
    for index in range(total):
        if index * seconds_per_frame >= next_time:
            next_time += step
            picks.append(index)
            if next_time >= stop_at:
                break
    return picks


def _floor_spread(total: int, count: int) -> list[int]:
    """``count`` indices at evenly spaced timestamps of a clip of ``total`` frames (repeating)."""
    return [math.floor(i * total / count) for i in range(count)]


def _fit(picks: list[int], total: int, count: int, *, pair: bool) -> list[int]:
    """``picks`` brought to ``count`` frames, repeats dropped (order kept); with ``pair``, the
    last frame repeated to make the count even."""
    if len(picks) < count:
        start, end = (picks[0], picks[-1]) if picks else (0, max(total - 1, 0))
        picks = np.linspace(start, end, count, dtype=int).tolist()
    elif len(picks) > count:
        picks = np.linspace(0, total - 1, count, dtype=int).tolist()
    distinct = [int(i) for i in dict.fromkeys(picks)]
    if pair and len(distinct) % 2:
        distinct.append(distinct[-1])
    return distinct


@VIDEO_LOADER_REGISTRY.register("opencv_dynamic", video_processor="Glm4vVideoProcessor")
class DynamicVideoBackend(VideoBackend):
    """GLM-4.1V (``Glm4vVideoProcessor``): a frame every ``1/fps`` seconds (the first at or after
    each step) while the video lasts at most ``max_duration`` seconds; a longer one gets
    ``max_duration * fps`` frames spread over its whole length. A container without a duration
    gets GLM's estimate. The metadata names the codec with ``_dynamic`` appended."""

    decoder_version: ClassVar[str] = "glm4v_dynamic/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset()
    _sampling_suffix: ClassVar[str] = "_dynamic"
    default_fps: ClassVar[float] = 2
    default_backend: ClassVar[VideoDecoderBackend] = "pyav"

    @classmethod
    def _prepare_source(cls, source: VideoSourceMetadata) -> VideoSourceMetadata:
        return _with_estimated_duration(source)

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        fps, video_fps = target.fps, source.original_fps
        if fps <= 0:
            raise ValueError(f"dynamic video sampling needs a positive fps, got {fps}")
        last = source.total_frames_num - 1
        if source.duration <= target.max_duration:
            count = math.floor(source.duration * fps)
            return sorted({min(last, math.ceil(i * video_fps / fps)) for i in range(count)})
        count = int(target.max_duration * fps)
        if count >= source.total_frames_num:
            return list(range(source.total_frames_num))
        times = np.linspace(0, source.duration, count, endpoint=True)
        return sorted({min(last, math.ceil(float(t) * video_fps)) for t in times})


@VIDEO_LOADER_REGISTRY.register("glm46v", video_processor="Glm46VVideoProcessor")
class GLM46VVideoBackend(VideoBackend):
    """GLM-4.6V (``Glm46VVideoProcessor``): the rate follows the duration (3 fps up to 30 s,
    1 fps up to 300 s, 0.5 fps beyond; the duration counted up to 2,400 s), times
    ``temporal_patch_size`` (2) frames per step, at most 640 frames, an even count."""

    decoder_version: ClassVar[str] = "glm46v/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset({"temporal_patch_size"})
    default_backend: ClassVar[VideoDecoderBackend] = "pyav"
    _DYNAMIC_FPS_THRESHOLDS: ClassVar[dict[int, float]] = {30: 3.0, 300: 1.0, 2400: 0.5}
    _MAX_FRAME_COUNT_DYNAMIC: ClassVar[int] = 640
    _MAX_DURATION: ClassVar[int] = 2400

    @classmethod
    def _rate_for(cls, duration: float) -> float:
        for limit, rate in cls._DYNAMIC_FPS_THRESHOLDS.items():
            if duration <= limit:
                return rate
        return cls._DYNAMIC_FPS_THRESHOLDS[max(cls._DYNAMIC_FPS_THRESHOLDS)]

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        total, video_fps = source.total_frames_num, source.original_fps
        patch = kwargs.get("temporal_patch_size", 2)
        duration = source.duration or estimated_duration(total, video_fps)
        counted = min(duration, cls._MAX_DURATION)
        rate = cls._rate_for(counted)
        count = min(int(counted * rate * patch), cls._MAX_FRAME_COUNT_DYNAMIC)
        if total < count:
            picks = np.linspace(0, total - 1, count, dtype=int).tolist()
        else:
            seconds_per_frame = 1 / video_fps if video_fps > 0 else 0
            picks = _walk(total, seconds_per_frame, 1 / (patch * rate), int(duration))
        return _fit(picks, total, count, pair=True)


@VIDEO_LOADER_REGISTRY.register(
    "glm5next", video_processor=("Glm5NextVideoProcessor", "Glm5nextVideoProcessor")
)
class Glm5NextVideoBackend(VideoBackend):
    """GLM-5.3-Flash: ``duration * fps`` frames (``fps``, the "fps interval", 2 by default; at
    most ``max_frames``, 2,048 by default), walked at ``temporal_patch_size`` (2) frames per
    step, an even count. A clip with fewer frames than that is spread at evenly spaced
    timestamps. Its OpenCV read seeks only across gaps of more than 64 frames."""

    decoder_version: ClassVar[str] = "glm5next/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset(
        {"max_frames", "temporal_patch_size"}
    )
    default_backend: ClassVar[VideoDecoderBackend] = "pyav"
    _SEEK_GAP_THRESHOLD: ClassVar[int] = 64
    _DEFAULT_FPS: ClassVar[float] = 2.0
    _DEFAULT_MAX_FRAMES: ClassVar[int] = 2048

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        total, video_fps = source.total_frames_num, source.original_fps
        rate = target.fps if target.fps > 0 else cls._DEFAULT_FPS
        max_frames = kwargs.get("max_frames")
        cap = cls._DEFAULT_MAX_FRAMES if max_frames is None else int(max_frames)
        patch = kwargs.get("temporal_patch_size", 2)
        duration = source.duration or estimated_duration(total, video_fps)
        count = min(int(duration * rate), cap)
        if total < count:
            picks = _floor_spread(total, count)
        else:
            seconds_per_frame = 1 / video_fps if video_fps > 0 else 0
            picks = _walk(total, seconds_per_frame, 1 / (patch * rate), int(duration))
        return _fit(picks, total, count, pair=True)

    @classmethod
    def read_frames(
        cls,
        cap: Any,
        frame_idx: list[int],
        total_frames_num: int,
        *,
        frame_recovery: bool = False,
    ) -> tuple[VideoFrames, list[int]]:
        """OpenCV read of the wanted frames (each once, ascending): frames across a gap of at
        most 64 are skipped by grabbing, longer gaps by seeking. ``frame_recovery`` reads
        forward instead, as the base read does."""
        if frame_recovery:
            return super().read_frames(
                cap, frame_idx, total_frames_num, frame_recovery=frame_recovery
            )
        from mediaref.media.video.decoders.opencv import cv2_module, read_frames_seeking

        return read_frames_seeking(
            cv2_module(), cap, sorted(set(frame_idx)), max_gap=cls._SEEK_GAP_THRESHOLD
        )


@VIDEO_LOADER_REGISTRY.register("glmga", video_processor="GlmgaVideoProcessor")
class GLMGAVideoBackend(VideoBackend):
    """GLM-GA (``GlmgaVideoProcessor``): ``duration * fps`` frames (fps at most 30, 2 by
    default; at most ``max_frames``, 640), walked one step per frame until the last step, and
    the decoded frames padded to an even count. A container without a duration gets GLM's
    estimate; ValueError for a video of unknown rate."""

    decoder_version: ClassVar[str] = "glmga/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset({"max_frames"})
    default_fps: ClassVar[float] = 2
    default_backend: ClassVar[VideoDecoderBackend] = "pyav"
    _MAX_FRAMES: ClassVar[int] = 640
    _MAX_FPS: ClassVar[int] = 30

    @classmethod
    def _prepare_source(cls, source: VideoSourceMetadata) -> VideoSourceMetadata:
        return _with_estimated_duration(source)

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        total, video_fps = source.total_frames_num, source.original_fps
        if video_fps <= 0:
            raise ValueError("GLM-GA video sampling needs the video's frame rate")
        rate = min(target.fps, cls._MAX_FPS)
        if rate <= 0:
            raise ValueError(f"GLM-GA video sampling needs a positive fps, got {target.fps}")
        max_frames = min(kwargs.get("max_frames", cls._MAX_FRAMES), cls._MAX_FRAMES)
        duration = source.duration or estimated_duration(total, video_fps)
        count = min(int(duration * rate), max_frames, total)
        step = 1 / rate
        if total < count:
            picks = _floor_spread(total, count)
        else:
            picks = _walk(total, 1 / video_fps, step, duration - step)
        return _fit(picks, total, count, pair=False)

    @classmethod
    def _finish(
        cls, data: bytes, frames: DecodedFrames, metadata: VideoMetadata
    ) -> tuple[DecodedFrames, VideoMetadata]:
        # HF pairs frames into temporal patches: an odd count gets its last frame again.
        if frames.shape[0] % 2:
            frames = repeat_last_frame(frames)
        return frames, metadata


__all__ = [
    "DynamicVideoBackend",
    "GLM46VVideoBackend",
    "GLMGAVideoBackend",
    "Glm5NextVideoBackend",
    "estimated_duration",
]
