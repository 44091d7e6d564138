"""What every video codec shares: the source and target descriptions, and the per-frame pixel cap.

A loader's sampling rule (``compute_frames_index_to_sample``) sees the video only through a
:class:`VideoSourceMetadata` and the request only through a :class:`VideoTargetMetadata`, so one
rule serves every codec.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

from mediaref.media.video._frame_limits import check_frame_size, max_frame_pixels

PYNVVIDEOCODEC_VIDEO_BACKEND: Final[Literal["pynvvideocodec"]] = "pynvvideocodec"
"""The name of vLLM's NVDEC codec (GPU-only: not part of mediaref, see docs/compat.md)."""

PYNVVIDEOCODEC_DEFAULT_HW_DECODERS: Final = 2
"""vLLM's default ``hw_decoders`` option of that codec, kept so its options resolve alike."""


class VideoTargetMetadata(NamedTuple):
    """The sample a request asks for: a frame count and a rate (-1: no limit), and the longest
    stretch of video (seconds) a duration-aware rule samples at that rate."""

    num_frames: int
    fps: float
    max_duration: float


class VideoSourceMetadata(NamedTuple):
    """The encoded video as its container reports it; ``original_fps`` and ``duration`` are 0
    when unknown."""

    total_frames_num: int
    original_fps: float
    duration: float


def check_frame_pixel_limit(width: int, height: int) -> None:
    """Refuse frames of more than ``VLLM_MAX_IMAGE_PIXELS`` pixels (0 or less: no cap).

    Raises :class:`~mediaref.exceptions.MediaTooLargeError`, a ``ValueError`` as vLLM's is.
    """
    check_frame_size(width, height, limit=max_frame_pixels())


__all__ = [
    "PYNVVIDEOCODEC_DEFAULT_HW_DECODERS",
    "PYNVVIDEOCODEC_VIDEO_BACKEND",
    "VideoSourceMetadata",
    "VideoTargetMetadata",
    "check_frame_pixel_limit",
]
