"""``vllm.multimodal.video_decoders``'s public path: the video codecs.

An alias that holds no code: the codecs live in :mod:`mediaref.media.video.decoders`. vLLM's
GPU codecs (``pynvvideocodec``, ``deepstream``) are not part of mediaref (docs/compat.md); their
names and options are recognised, and selecting one raises.
"""

from __future__ import annotations

from mediaref.media.video.decoders import (
    PYNVVIDEOCODEC_DEFAULT_HW_DECODERS,
    PYNVVIDEOCODEC_VIDEO_BACKEND,
    UnsupportedCodecOptionError,
    VideoCodecUnavailableError,
    VideoDecoderBackend,
    VideoSourceMetadata,
    VideoTargetMetadata,
    check_frame_pixel_limit,
    check_video_codec,
    decode_video,
    incompatible_backend_options,
    resolve_video_backend_kwargs,
    video_codec_unavailable_reason,
)

__all__ = [
    "PYNVVIDEOCODEC_DEFAULT_HW_DECODERS",
    "PYNVVIDEOCODEC_VIDEO_BACKEND",
    "UnsupportedCodecOptionError",
    "VideoCodecUnavailableError",
    "VideoDecoderBackend",
    "VideoSourceMetadata",
    "VideoTargetMetadata",
    "check_frame_pixel_limit",
    "check_video_codec",
    "decode_video",
    "incompatible_backend_options",
    "resolve_video_backend_kwargs",
    "video_codec_unavailable_reason",
]
