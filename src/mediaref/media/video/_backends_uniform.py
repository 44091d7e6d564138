"""Loaders that sample uniformly: mediaref's default (``pyav``) and Nemotron-VL's."""

from __future__ import annotations

from typing import Any, ClassVar

from mediaref.media.video._backend import VideoBackend
from mediaref.media.video._sampling import ALL_FRAMES, validate_fps, validate_num_frames
from mediaref.media.video.decoders import VideoDecoderBackend
from mediaref.media.video.loader_registry import VIDEO_LOADER_REGISTRY, DecodedFrames, VideoMetadata


@VIDEO_LOADER_REGISTRY.register("pyav")
class PyAVVideoBackend(VideoBackend):
    """Uniform sampling decoded with PyAV: mediaref's default ``VLLM_VIDEO_LOADER_BACKEND``.

    Sampling indexes the stream's packets first (exact frame count, no decode), then decodes
    only from the keyframe before each wanted frame when the gap is long; returning every frame
    decodes the stream once. The metadata adds what the decode saw and did to vLLM's keys
    (:mod:`mediaref.media.video.decoders.pyav`); only the HF ``VideoMetadata`` fields may be
    passed on to an HF processor. ``num_frames`` must be -1 or positive and ``fps`` a number
    (None or negative: no rate cap).
    """

    decoder_version: ClassVar[str] = "pyav/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset()

    @classmethod
    def load_bytes(
        cls,
        data: bytes,
        num_frames: int = ALL_FRAMES,
        fps: float | None = -1,
        max_duration: float = 300,
        frame_recovery: bool = False,
        *,
        backend: VideoDecoderBackend = "pyav",
        **kwargs: Any,
    ) -> tuple[DecodedFrames, VideoMetadata]:
        num_frames = validate_num_frames(num_frames)
        rate = validate_fps(fps)
        return super().load_bytes(
            data,
            num_frames,
            -1 if rate is None else rate,
            max_duration,
            frame_recovery,
            backend=backend,
            **kwargs,
        )


@VIDEO_LOADER_REGISTRY.register("nemotron_vl")
class NemotronVLVideoBackend(VideoBackend):
    """Uniform sampling whose metadata also carries the encoded video (``original_video_bytes``):
    Nemotron-VL's processor reads the container again."""

    decoder_version: ClassVar[str] = "nemotron_vl/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset()

    @classmethod
    def load_bytes(
        cls,
        data: bytes,
        num_frames: int = -1,
        fps: float = -1,
        max_duration: float = 300,
        frame_recovery: bool = False,
        *,
        backend: VideoDecoderBackend = "pyav",
        **kwargs: Any,
    ) -> tuple[DecodedFrames, VideoMetadata]:
        frames, metadata = super().load_bytes(
            data, num_frames, fps, max_duration, frame_recovery, backend=backend, **kwargs
        )
        return frames, {**metadata, "original_video_bytes": data}


__all__ = ["NemotronVLVideoBackend", "PyAVVideoBackend"]
