"""``vllm.multimodal.video_decoders.opencv``'s public path (the code is in
:mod:`mediaref.media.video.decoders.opencv`; ``cv2`` is needed only to decode)."""

from __future__ import annotations

from mediaref.media.video.decoders.opencv import (
    OpenCVVideoBackendMixin,
    decode_opencv,
    opencv_unavailable_reason,
    read_frames_seeking,
)
from mediaref.video_decoders.base import (
    VideoSourceMetadata,
    VideoTargetMetadata,
    check_frame_pixel_limit,
)

__all__ = [
    "OpenCVVideoBackendMixin",
    "VideoSourceMetadata",
    "VideoTargetMetadata",
    "check_frame_pixel_limit",
    "decode_opencv",
    "opencv_unavailable_reason",
    "read_frames_seeking",
]
