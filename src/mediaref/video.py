"""``vllm.multimodal.video``'s public path: the video loader registry and its backends.

An alias that holds no code: everything here lives in :mod:`mediaref.media.video` (see
:mod:`mediaref.media.video.loader_registry` for writing a backend).
"""

from __future__ import annotations

from mediaref.media.video import (
    DEFAULT_JPEG_FRAMES_FPS,
    VIDEO_LOADER_REGISTRY,
    PyAVVideoBackend,
    VideoFrames,
    VideoLoader,
    VideoLoaderRegistry,
    VideoMetadata,
    load_jpeg_frames,
    sample_frame_indices,
)

__all__ = [
    "DEFAULT_JPEG_FRAMES_FPS",
    "VIDEO_LOADER_REGISTRY",
    "PyAVVideoBackend",
    "VideoFrames",
    "VideoLoader",
    "VideoLoaderRegistry",
    "VideoMetadata",
    "load_jpeg_frames",
    "sample_frame_indices",
]
