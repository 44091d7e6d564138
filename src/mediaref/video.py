"""``vllm.multimodal.video``'s public path: the video loader registry and its loaders.

An alias that holds no code: everything here lives in :mod:`mediaref.media.video` (see
:mod:`mediaref.media.video.loader_registry` for writing a loader). vLLM's
``PyNvVideoCodecVideoBackend`` (NVDEC) is not part of mediaref (docs/compat.md). The codec names
vLLM's module imports from ``vllm.multimodal.video_decoders`` (``VideoSourceMetadata``,
``decode_video``, ...) are re-exported here too, as vLLM's own tests import them from this path.
"""

from __future__ import annotations

from mediaref.media.video import (
    DEFAULT_JPEG_FRAMES_FPS,
    VIDEO_LOADER_REGISTRY,
    ClefOmniVideoBackend,
    DecodedFrames,
    DynamicVideoBackend,
    EmbeddingGemma2VideoBackend,
    Glm5NextVideoBackend,
    GLM46VVideoBackend,
    GLMGAVideoBackend,
    Molmo2VideoBackend,
    NemotronVLVideoBackend,
    OpenCVDynamicOpenPanguVideoBackend,
    PyAVVideoBackend,
    Qwen2VLVideoBackend,
    Qwen3VLVideoBackend,
    VideoBackend,
    VideoFrames,
    VideoLoader,
    VideoLoaderRegistry,
    VideoMetadata,
    get_video_loader_backend_for_processor,
    load_jpeg_frames,
    rescale_video_size,
    resize_video,
    sample_frame_indices,
    sample_frames_from_video,
)
from mediaref.video_decoders import (
    PYNVVIDEOCODEC_VIDEO_BACKEND,
    VideoDecoderBackend,
    VideoSourceMetadata,
    VideoTargetMetadata,
    decode_video,
    resolve_video_backend_kwargs,
)

__all__ = [
    "DEFAULT_JPEG_FRAMES_FPS",
    "PYNVVIDEOCODEC_VIDEO_BACKEND",
    "VIDEO_LOADER_REGISTRY",
    "ClefOmniVideoBackend",
    "DecodedFrames",
    "DynamicVideoBackend",
    "EmbeddingGemma2VideoBackend",
    "GLM46VVideoBackend",
    "GLMGAVideoBackend",
    "Glm5NextVideoBackend",
    "Molmo2VideoBackend",
    "NemotronVLVideoBackend",
    "OpenCVDynamicOpenPanguVideoBackend",
    "PyAVVideoBackend",
    "Qwen2VLVideoBackend",
    "Qwen3VLVideoBackend",
    "VideoBackend",
    "VideoDecoderBackend",
    "VideoFrames",
    "VideoLoader",
    "VideoLoaderRegistry",
    "VideoMetadata",
    "VideoSourceMetadata",
    "VideoTargetMetadata",
    "decode_video",
    "get_video_loader_backend_for_processor",
    "load_jpeg_frames",
    "rescale_video_size",
    "resize_video",
    "resolve_video_backend_kwargs",
    "sample_frame_indices",
    "sample_frames_from_video",
]
