"""Video loader backends, chosen by name from :data:`VIDEO_LOADER_REGISTRY`.

A backend turns an encoded container into ``(frames, metadata)``: frames a uint8 RGB array of
shape (T, H, W, 3), metadata a dict with vLLM's keys (``total_num_frames``, ``fps``,
``duration``, ``video_backend``, ``frames_indices``, ``do_sample_frames``). PyAV ("pyav") is the
default, selected by ``VLLM_VIDEO_LOADER_BACKEND``; register another with::

    @VIDEO_LOADER_REGISTRY.register("mine")
    class MyLoader:
        decoder_version = "mine/1"

        @classmethod
        def load_bytes(cls, data, num_frames=-1, fps=None, *, my_option=0): ...
"""

from __future__ import annotations

from mediaref.video._jpeg_frames import DEFAULT_JPEG_FRAMES_FPS, load_jpeg_frames
from mediaref.video._pyav import PyAVVideoBackend
from mediaref.video._registry import (
    VIDEO_LOADER_REGISTRY,
    VideoFrames,
    VideoLoader,
    VideoLoaderRegistry,
    VideoMetadata,
)
from mediaref.video._sampling import sample_frame_indices

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
