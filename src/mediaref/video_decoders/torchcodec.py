"""``vllm.multimodal.video_decoders.torchcodec``'s public path (the code is in
:mod:`mediaref.media.video.decoders.torchcodec`; ``torchcodec`` is needed only to decode)."""

from __future__ import annotations

from mediaref.media.video.decoders.torchcodec import (
    TorchCodecVideoBackendMixin,
    decode_torchcodec,
    torchcodec_unavailable_reason,
)
from mediaref.video_decoders.base import (
    VideoSourceMetadata,
    VideoTargetMetadata,
    check_frame_pixel_limit,
)

__all__ = [
    "TorchCodecVideoBackendMixin",
    "VideoSourceMetadata",
    "VideoTargetMetadata",
    "check_frame_pixel_limit",
    "decode_torchcodec",
    "torchcodec_unavailable_reason",
]
