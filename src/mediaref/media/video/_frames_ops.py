"""Operations on decoded frames (T, H, W, C): resizing and picking a subset."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import numpy.typing as npt


def _cv2_or_none() -> Any:
    # OpenCV is optional (not a dependency): its resize is vLLM's, so it is used when present.
    try:
        return importlib.import_module("cv2")
    except ImportError:
        return None


def resize_video(frames: npt.NDArray[Any], size: tuple[int, int]) -> npt.NDArray[Any]:
    """``frames`` resized to ``size`` = (height, width) with bilinear interpolation.

    With OpenCV installed this is vLLM's ``cv2.resize`` (``INTER_LINEAR``); without it, torch's
    bilinear interpolation over the same pixel-centre grid, rounded back to the input's dtype
    (integer results may differ from OpenCV's fixed-point arithmetic by one level).
    """
    count, _, _, channels = frames.shape
    height, width = size
    cv2 = _cv2_or_none()
    if cv2 is not None:
        resized = np.empty((count, height, width, channels), dtype=frames.dtype)
        for i, frame in enumerate(frames):
            resized[i] = np.asarray(cv2.resize(frame, (width, height))).reshape(
                height, width, channels
            )
        return resized
    return _resize_with_torch(frames, height, width)


def _resize_with_torch(frames: npt.NDArray[Any], height: int, width: int) -> npt.NDArray[Any]:
    import torch

    source = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2)
    scaled = torch.nn.functional.interpolate(
        source.to(torch.float32), size=(height, width), mode="bilinear", align_corners=False
    )
    result = scaled.permute(0, 2, 3, 1)
    if np.issubdtype(frames.dtype, np.integer):
        limits = np.iinfo(frames.dtype)
        result = result.round().clamp(float(limits.min), float(limits.max))
    resized: npt.NDArray[Any] = result.numpy().astype(frames.dtype)
    return resized


def rescale_video_size(frames: npt.NDArray[Any], size_factor: float) -> npt.NDArray[Any]:
    """``frames`` scaled by ``size_factor`` in both dimensions (sizes truncated to ints)."""
    _, height, width, _ = frames.shape
    return resize_video(frames, (int(height * size_factor), int(width * size_factor)))


def sample_frames_from_video(frames: npt.NDArray[Any], num_frames: int) -> npt.NDArray[Any]:
    """``num_frames`` frames spread evenly from the first to the last (-1: all of them)."""
    if num_frames == -1:
        return frames
    picks = np.linspace(0, frames.shape[0] - 1, num_frames, dtype=int)
    return frames[picks, ...]


__all__ = ["rescale_video_size", "resize_video", "sample_frames_from_video"]
