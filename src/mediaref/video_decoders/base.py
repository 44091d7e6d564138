"""``vllm.multimodal.video_decoders.base``'s public path (the code is in
:mod:`mediaref.media.video.decoders.base`)."""

from __future__ import annotations

from mediaref.media.video.decoders.base import (
    PYNVVIDEOCODEC_DEFAULT_HW_DECODERS,
    PYNVVIDEOCODEC_VIDEO_BACKEND,
    VideoSourceMetadata,
    VideoTargetMetadata,
    check_frame_pixel_limit,
)

__all__ = [
    "PYNVVIDEOCODEC_DEFAULT_HW_DECODERS",
    "PYNVVIDEOCODEC_VIDEO_BACKEND",
    "VideoSourceMetadata",
    "VideoTargetMetadata",
    "check_frame_pixel_limit",
]
