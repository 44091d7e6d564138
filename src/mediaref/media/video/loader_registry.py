"""The video loader registry: backend name -> loader class.

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

from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from mediaref.media.extensions import ExtensionManager

VideoFrames = npt.NDArray[np.uint8]
"""Decoded frames: uint8 RGB, shape (num_frames, height, width, 3)."""

VideoMetadata = dict[str, Any]
"""vLLM's keys: total_num_frames, fps, duration, video_backend, frames_indices, do_sample_frames."""


class VideoLoader(Protocol):
    """What a registered backend provides: one call from encoded bytes to frames and metadata.

    ``load_bytes`` is a classmethod or staticmethod. Options beyond ``num_frames`` and ``fps`` are
    further keyword arguments with defaults; :class:`~mediaref.media.video.VideoMediaIO` checks
    the options it is given against the signature, so a misspelled option fails at construction
    (a loader taking ``**kwargs`` vets its options itself).
    ``decoder_version`` names the backend's algorithm: bump it when the same settings start
    returning different frames, so cache keys made before the change stop matching.
    """

    decoder_version: ClassVar[str]

    @classmethod
    def load_bytes(
        cls, data: bytes, num_frames: int = -1, fps: float | None = None
    ) -> tuple[VideoFrames, VideoMetadata]: ...


class VideoLoaderRegistry(ExtensionManager[VideoLoader]):
    """Backend name -> loader class (vLLM's ``VideoLoaderRegistry``).

    ``load(name)`` builds the backend as vLLM's does; loaders' ``load_bytes`` is a classmethod, so
    :meth:`get`'s class serves the same calls.
    """

    def __init__(self) -> None:
        super().__init__("video loader backend")


VIDEO_LOADER_REGISTRY = VideoLoaderRegistry()
