"""Rate-driven loaders of the Qwen-VL line, and Clef-Omni's: frames per second of video, not a count.

Each picks the frames its model's HF video processor would pick from the whole video, so a
processor told ``do_sample_frames=False`` sees the same frames it would have sampled itself;
``num_frames`` is not used by these rules.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from mediaref.media.video._backend import VideoBackend
from mediaref.media.video.decoders import VideoDecoderBackend
from mediaref.media.video.decoders.base import VideoSourceMetadata, VideoTargetMetadata
from mediaref.media.video.loader_registry import VIDEO_LOADER_REGISTRY, DecodedFrames, VideoMetadata

# Qwen-VL processors: at most this many frames, sampled at most this fast.
_QWEN_MAX_FRAMES = 768
_QWEN_MAX_FPS = 30
_QWEN_MIN_FRAMES = 4
# Qwen3-VL's processor assumes this rate for a video that does not declare one.
_QWEN3_ASSUMED_FPS = 24.0


@VIDEO_LOADER_REGISTRY.register("qwen2_vl", video_processor="Qwen2VLVideoProcessor")
class Qwen2VLVideoBackend(VideoBackend):
    """Qwen2-VL and Qwen2.5-VL (``Qwen2VLVideoProcessor.sample_frames``, fps mode).

    ``duration * fps`` frames (fps at most 30), clamped to ``[min_frames, max_frames]`` (4 and at
    most 768) and to the video, then rounded down to a multiple of ``temporal_patch_size`` (2).
    The indices are HF's float32 ``arange(0, total, total / n)``, truncated, so they match it
    frame for frame; a tail index that float32 rounds past the end is clamped to the last frame.
    ValueError for a video of unknown rate, or one too short for a single temporal patch.
    """

    decoder_version: ClassVar[str] = "qwen2_vl/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset(
        {"temporal_patch_size", "min_frames", "max_frames"}
    )
    default_fps: ClassVar[float] = 2
    default_backend: ClassVar[VideoDecoderBackend] = "pyav"

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        import torch

        total = source.total_frames_num
        if source.original_fps <= 0:
            raise ValueError(
                "Qwen2-VL video sampling needs the video's frame rate, and the container "
                "declares none (variable or unknown frame rate)"
            )
        patch = int(kwargs.get("temporal_patch_size", 2))
        min_frames = kwargs.get("min_frames", _QWEN_MIN_FRAMES)
        max_frames = min(kwargs.get("max_frames", _QWEN_MAX_FRAMES), _QWEN_MAX_FRAMES)
        ceiling = (min(max_frames, total) // patch) * patch
        wanted = total / source.original_fps * min(target.fps, _QWEN_MAX_FPS)
        count = math.floor(min(max(wanted, min_frames), ceiling, total) / patch) * patch
        if count <= 0:
            raise ValueError(
                f"the video has {total} frame(s), fewer than one temporal patch of {patch}"
            )
        indices = torch.arange(0, total, total / count).int().clamp(max=total - 1)
        result: list[int] = indices.tolist()
        return result


@VIDEO_LOADER_REGISTRY.register(
    "qwen3_vl", video_processor=("Qwen3VLVideoProcessor", "Cosmos3EdgeVideoProcessor")
)
class Qwen3VLVideoBackend(VideoBackend):
    """Qwen3-VL (``Qwen3VLVideoProcessor.sample_frames``): ``duration * fps`` frames (fps at
    most 30), clamped to ``[min_frames, max_frames]`` (4 and at most 768) and to the video,
    spread evenly with rounding. A video of unknown rate is taken as 24 fps, as HF does, and
    the metadata says so (its frame timestamps depend on it)."""

    decoder_version: ClassVar[str] = "qwen3_vl/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset({"min_frames", "max_frames"})
    default_fps: ClassVar[float] = 2
    default_backend: ClassVar[VideoDecoderBackend] = "pyav"
    _MAX_FRAMES: ClassVar[int] = _QWEN_MAX_FRAMES
    _MAX_FPS: ClassVar[int] = _QWEN_MAX_FPS

    @classmethod
    def _prepare_source(cls, source: VideoSourceMetadata) -> VideoSourceMetadata:
        if source.original_fps > 0:
            return source
        return source._replace(original_fps=_QWEN3_ASSUMED_FPS)

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        source = cls._prepare_source(source)
        total = source.total_frames_num
        min_frames = kwargs.get("min_frames", _QWEN_MIN_FRAMES)
        max_frames = min(kwargs.get("max_frames", cls._MAX_FRAMES), cls._MAX_FRAMES)
        count = int(total / source.original_fps * min(target.fps, cls._MAX_FPS))
        count = min(max(count, min_frames), max_frames, total)
        indices: list[int] = np.linspace(0, total - 1, count).round().astype(int).tolist()
        return indices


@VIDEO_LOADER_REGISTRY.register("clef_omni")
class ClefOmniVideoBackend(VideoBackend):
    """Clef-Omni: the first frame at or after each ``1/fps`` boundary (frame ``i`` is at
    ``i / original_fps`` seconds), at most :attr:`MAX_FRAMES` of them, and an even count (the
    last frame repeated). ValueError for a video of unknown rate, one longer than
    ``MAX_FRAMES / fps`` seconds, or one without frames."""

    decoder_version: ClassVar[str] = "clef_omni/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset()
    default_fps: ClassVar[float] = 2
    default_backend: ClassVar[VideoDecoderBackend] = "pyav"
    MAX_FRAMES = 768

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        if source.original_fps <= 0:
            raise ValueError("video has an unknown frame rate")
        if target.fps <= 0:
            raise ValueError(f"Clef-Omni video sampling needs a positive fps, got {target.fps}")
        frames_per_step = source.original_fps / target.fps
        indices: list[int] = []
        for step in range(cls.MAX_FRAMES + 1):
            # The tolerance keeps a boundary that float arithmetic lands a hair past a frame
            # (3 * (30 / 10) = 9.000000000000002) on that frame.
            index = math.ceil(step * frames_per_step - 1e-6)
            if index >= source.total_frames_num:
                break
            indices.append(index)
        else:
            raise ValueError(f"video is longer than {cls.MAX_FRAMES / target.fps:.0f} seconds")
        if not indices:
            raise ValueError("video has no decodable frames")
        return indices

    @classmethod
    def _finish(
        cls, data: bytes, frames: DecodedFrames, metadata: VideoMetadata
    ) -> tuple[DecodedFrames, VideoMetadata]:
        if len(frames) % 2:
            frames = repeat_last_frame(frames)
            metadata["frames_indices"] = [
                *metadata["frames_indices"],
                metadata["frames_indices"][-1],
            ]
        return frames, metadata


def repeat_last_frame(frames: Any) -> Any:
    """``frames`` with its last frame once more: a host array or a device tensor."""
    if isinstance(frames, np.ndarray):
        return np.concatenate([frames, frames[-1:]])
    import torch

    return torch.cat([frames, frames[-1:]])


__all__ = [
    "ClefOmniVideoBackend",
    "Qwen2VLVideoBackend",
    "Qwen3VLVideoBackend",
    "repeat_last_frame",
]
