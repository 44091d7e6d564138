"""EmbeddingGemma2's and openPangu's loaders: timestamp-driven sampling of their HF processors."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from mediaref.media.video._backend import (
    VideoBackend,
    check_codec_options,
    decode_sample,
    sample_metadata,
)
from mediaref.media.video.decoders import VideoDecoderBackend
from mediaref.media.video.decoders.base import VideoSourceMetadata, VideoTargetMetadata
from mediaref.media.video.loader_registry import (
    VIDEO_LOADER_REGISTRY,
    DecodedFrames,
    VideoLoader,
    VideoMetadata,
)

# EmbeddingGemma2VideoProcessor's defaults, when neither a processor nor transformers has them.
_GEMMA_DEFAULT_FPS = 1.0
_GEMMA_DEFAULT_MAX_FRAMES = 32
_OVERFLOW_STRATEGIES = ("truncate", "uniform")


@functools.cache
def _transformers_gemma_defaults() -> tuple[float, int] | None:
    # Built once: the processor's defaults do not change within a process.
    try:
        module = importlib.import_module("transformers.models.embedding_gemma2")
        processor = module.EmbeddingGemma2VideoProcessor()
    except Exception:  # absent from this transformers, or it fails to build: use the defaults
        return None
    return (
        float(getattr(processor, "fps", _GEMMA_DEFAULT_FPS)),
        int(getattr(processor, "max_frames", _GEMMA_DEFAULT_MAX_FRAMES)),
    )


@VIDEO_LOADER_REGISTRY.register("embedding_gemma2", video_processor="EmbeddingGemma2VideoProcessor")
class EmbeddingGemma2VideoBackend(VideoBackend):
    """EmbeddingGemma2 (``EmbeddingGemma2VideoProcessor``): a frame every ``1/fps`` seconds (fps
    at most 60), at most ``max_frames`` (at most 128) of them; too many are cut to the first
    ``max_frames`` (``overflow_strategy="truncate"``) or spread over the whole sample
    (``"uniform"``, the default; None keeps them all). Without a known rate and duration, the
    frames themselves are sampled that way. ``num_frames`` is ignored; ``fps`` and
    ``max_frames`` default to the processor's (a ``video_processor`` or ``processor`` option,
    else transformers', else 1 fps and 32 frames). A frame picked twice comes back twice; the
    metadata says the frames are sampled (``do_sample_frames`` False)."""

    decoder_version: ClassVar[str] = "embedding_gemma2/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset(
        {"max_frames", "overflow_strategy", "video_processor", "processor"}
    )
    default_backend: ClassVar[VideoDecoderBackend] = "pyav"
    PROCESSOR_NAMES = ("EmbeddingGemma2Processor", "EmbeddingGemma2VideoProcessor")
    _MAX_ALLOWED_FRAMES: ClassVar[int] = 128
    _MAX_ALLOWED_FPS: ClassVar[float] = 60.0

    @classmethod
    def _get_processor_defaults(cls, **kwargs: Any) -> tuple[float, int]:
        processor = kwargs.get("video_processor") or kwargs.get("processor")
        if processor is not None:
            video_processor = getattr(processor, "video_processor", processor)
            fps = getattr(video_processor, "fps", None)
            max_frames = getattr(video_processor, "max_frames", None)
            if fps is not None and max_frames is not None:
                return float(fps), int(max_frames)
        return _transformers_gemma_defaults() or (_GEMMA_DEFAULT_FPS, _GEMMA_DEFAULT_MAX_FRAMES)

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        default_fps, default_max_frames = cls._get_processor_defaults(**kwargs)
        fps = kwargs.get("fps")
        if fps is None:
            fps = target.fps if target.fps > 0 else default_fps
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        if fps > cls._MAX_ALLOWED_FPS:
            raise ValueError(f"fps {fps} exceeds maximum allowed {cls._MAX_ALLOWED_FPS}")
        max_frames = kwargs.get("max_frames", default_max_frames)
        if max_frames is not None:
            if max_frames <= 0:
                raise ValueError(f"max_frames must be positive, got {max_frames}")
            if max_frames > cls._MAX_ALLOWED_FRAMES:
                raise ValueError(
                    f"max_frames {max_frames} exceeds maximum allowed {cls._MAX_ALLOWED_FRAMES}"
                )
        strategy = kwargs.get("overflow_strategy", "uniform")
        if strategy is not None:
            if max_frames is None:
                raise ValueError(
                    f"You must pass max_frames when requesting an overflow_strategy={strategy}!"
                )
            if strategy not in _OVERFLOW_STRATEGIES:
                raise ValueError(
                    f"You passed overflow_strategy={strategy} but expected one of "
                    f"{list(_OVERFLOW_STRATEGIES)}"
                )
        total = source.total_frames_num
        timed = source.original_fps > 0 and source.duration > 0
        # Positions in the sample: frames when untimed, steps of 1/fps seconds when timed.
        count = max(1, int(source.duration * fps)) if timed else total
        if strategy is None or count <= max_frames:
            positions = np.arange(count)
        elif strategy == "truncate":
            positions = np.arange(max_frames)
        else:
            positions = np.linspace(0, count - 1, max_frames, dtype=int)
        if not timed:
            untimed: list[int] = positions.astype(int).tolist()
            return untimed
        step = source.original_fps / fps
        indices: list[int] = np.minimum(total - 1, (positions * step).astype(int)).tolist()
        return indices

    @classmethod
    def load_bytes(
        cls,
        data: bytes,
        num_frames: int = -1,
        fps: float | None = None,
        max_duration: float = 300,
        frame_recovery: bool = False,
        *,
        backend: VideoDecoderBackend | None = None,
        **kwargs: Any,
    ) -> tuple[DecodedFrames, VideoMetadata]:
        rate, codec = cls._defaults(fps, backend)
        options = {k: v for k, v in kwargs.items() if k != "num_frames"}
        sample = cls._decode_sample(
            data, -1, rate, max_duration, frame_recovery, backend=codec, options=options
        )
        frames, metadata = sample.frames, cls._metadata(sample, codec)
        # A codec reads each frame once; the processor's sample may name a frame twice.
        if sample.frame_idx != sample.valid:
            position = {index: i for i, index in enumerate(sample.valid)}
            if all(index in position for index in sample.frame_idx):
                picks = [position[index] for index in sample.frame_idx]
                frames = frames[picks] if isinstance(frames, np.ndarray) else _take(frames, picks)
                metadata["frames_indices"] = list(sample.frame_idx)
        return frames, metadata

    @classmethod
    def create_hf_metadata(
        cls, source: VideoSourceMetadata, valid_frame_indices: list[int], video_backend: str
    ) -> VideoMetadata:
        metadata = super().create_hf_metadata(
            source=source, valid_frame_indices=valid_frame_indices, video_backend=video_backend
        )
        metadata["do_sample_frames"] = False
        return metadata


def _take(frames: Any, picks: list[int]) -> Any:
    import torch

    return frames[torch.tensor(picks, device=frames.device)]


@VIDEO_LOADER_REGISTRY.register("openpangu")
class OpenCVDynamicOpenPanguVideoBackend(VideoLoader):
    """openPangu: ``num_frames`` timestamps spread evenly from the first frame to the last, each
    rounded to the nearest frame; with ``fps`` (2 by default; -1: no limit), no more frames than
    that rate gives over the video, spread over the span they cover. ValueError for an fps
    that is neither -1 nor positive. The metadata names the codec with ``_dynamic`` appended.
    The codec is the ``backend`` option (``pyav`` by default)."""

    decoder_version: ClassVar[str] = "openpangu/1"
    sampling_options: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        total, video_fps = source.total_frames_num, source.original_fps
        num_frames, fps = target.num_frames, target.fps
        # Seconds from the first frame to the last (the last frame's timestamp).
        span = (total - 1) / video_fps if total >= 1 and video_fps > 0 else 0
        if fps > 0:
            at_rate = int(span * fps) + 1
            if num_frames >= at_rate:
                num_frames = at_rate
                span = min(span, (num_frames - 1) / fps)
        elif fps != -1:
            raise ValueError(f"requires dataset fps is -1 or greater than 0 but got {fps}")
        if num_frames < 0:
            raise ValueError(f"openPangu video sampling needs num_frames >= 0, got {num_frames}")
        timestamps = np.linspace(0, span, num_frames, dtype=float)
        return [min(total - 1, round(float(t) * video_fps)) for t in timestamps]

    @classmethod
    def load_bytes(
        cls,
        data: bytes,
        num_frames: int = -1,
        fps: float = 2,
        max_duration: float = 300,
        frame_recovery: bool = False,
        *,
        backend: VideoDecoderBackend = "pyav",
        **kwargs: Any,
    ) -> tuple[DecodedFrames, VideoMetadata]:
        target = VideoTargetMetadata(num_frames=num_frames, fps=fps, max_duration=max_duration)
        sample = decode_sample(
            cls, data, target, {}, backend=backend, frame_recovery=frame_recovery
        )
        return sample.frames, sample_metadata(cls, sample, f"{backend}_dynamic")

    @classmethod
    def check_options(cls, options: Mapping[str, Any], *, name: str | None = None) -> None:
        check_codec_options(cls, options, cls.sampling_options, name=name or cls.__qualname__)


__all__ = ["EmbeddingGemma2VideoBackend", "OpenCVDynamicOpenPanguVideoBackend"]
