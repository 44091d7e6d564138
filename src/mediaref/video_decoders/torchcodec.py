"""``vllm.multimodal.video_decoders.torchcodec``'s public path (the code is in
:mod:`mediaref.media.video.decoders.torchcodec`; ``torchcodec`` is needed only to decode)."""

from __future__ import annotations

from mediaref.media.video.decoders.torchcodec import (
    TorchCodecVideoBackendMixin,
    decode_torchcodec,
    torchcodec_unavailable_reason,
)

__all__ = ["TorchCodecVideoBackendMixin", "decode_torchcodec", "torchcodec_unavailable_reason"]
