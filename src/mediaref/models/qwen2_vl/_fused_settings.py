"""Which Qwen2-VL items the fused exact path takes, and the target size it resizes them to.

For an item it takes, the fused path's output (``pixel_values`` / ``image_grid_thw``,
``pixel_values_videos`` / ``video_grid_thw``) is bit-identical to what transformers' default
Qwen2-VL processors (the torchvision ones) give for the same decoded item
(:mod:`mediaref.models.qwen2_vl._fused` computes it). Whether an item can take it is decided
here, before any pixel work (:func:`image_settings`, :func:`video_settings`, :func:`image_target`,
:func:`video_target`); an item that cannot takes the HF path. Those are:

- a processor that is not transformers' own torchvision ``Qwen2VLImageProcessor`` /
  ``Qwen2VLVideoProcessor`` (the PIL "slow" ones, subclasses), or configured off the path:
  ``do_resize`` or ``do_convert_rgb`` off, a resample other than bicubic, rescale without
  normalize (or the reverse), ``cap_pixels_per_frame`` on (videos);
- any processor kwarg beyond the rescale/normalize flags, ``min_pixels`` / ``max_pixels`` and
  ``do_sample_frames`` (``size``, ``device``, ...);
- an image that is not a ``PIL.Image``, a video that is not a ``(T, H, W, 3)`` uint8 array;
- an item ``smart_resize`` refuses (aspect ratio over 200): HF raises its own error for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

__all__ = [
    "DRAFT_SOURCE_SIZE",
    "FusedVisionSettings",
    "image_settings",
    "image_target",
    "smart_resize",
    "target_size",
    "video_settings",
    "video_target",
]

# Processor kwargs the fused path honours (through the settings); any other sends items to HF.
_HONOURED_KWARGS = frozenset(
    {"do_rescale", "do_normalize", "do_sample_frames", "return_tensors", "min_pixels", "max_pixels"}
)
_BICUBIC = 3  # PIL's BICUBIC, which HF maps to torchvision's bicubic
_MAX_ASPECT_RATIO = 200
DRAFT_SOURCE_SIZE = "mediaref_draft_source_size"
"""``Image.info`` key of an image decoded at a reduced JPEG scale (the opt-in ``jpeg_draft``
mode): its full ``(width, height)``, from which its target size is taken, so a drafted image
gets the grid of the image it stands for."""


@dataclass(frozen=True)
class FusedVisionSettings:
    """What the fused path needs of one HF image or video processor, as resolved for a call."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int
    mean: tuple[float, ...] | None
    """Per-channel fp32 ``mean / rescale_factor``; None: uint8 rows (rescale/normalize off)."""
    std: tuple[float, ...] | None
    dtype: torch.dtype | None
    """The model dtype floating outputs are cast to (as the HF call's outputs are); None: fp32."""

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Qwen2-VL's target size: both sides multiples of ``factor``, the area within
    ``[min_pixels, max_pixels]``, the aspect ratio kept as closely as possible (HF's rule,
    float for float); ``ValueError`` when the aspect ratio exceeds 200."""
    if max(height, width) / min(height, width) > _MAX_ASPECT_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {_MAX_ASPECT_RATIO}, "
            f"got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _settings(
    processor: Any, kwargs: Mapping[str, object], dtype: torch.dtype | None
) -> FusedVisionSettings | None:
    if set(kwargs) - _HONOURED_KWARGS:
        return None
    if not (processor.do_resize and processor.do_convert_rgb) or processor.resample != _BICUBIC:
        return None
    do_rescale = bool(kwargs.get("do_rescale", processor.do_rescale))
    do_normalize = bool(kwargs.get("do_normalize", processor.do_normalize))
    if do_rescale != do_normalize:
        return None
    mean = std = None
    if do_normalize:
        # HF folds the rescale into the normalize: fp32 tensors of mean and std times 1/factor.
        scale = 1.0 / processor.rescale_factor
        mean = tuple((torch.tensor(processor.image_mean) * scale).tolist())
        std = tuple((torch.tensor(processor.image_std) * scale).tolist())
    size = processor.size
    # As HF's call does: min_pixels / max_pixels override the size's edges.
    min_pixels = kwargs.get("min_pixels")
    max_pixels = kwargs.get("max_pixels")
    shortest = size.shortest_edge if min_pixels is None else min_pixels
    longest = size.longest_edge if max_pixels is None else max_pixels
    if not (isinstance(shortest, int) and isinstance(longest, int) and shortest and longest):
        return None
    return FusedVisionSettings(
        patch_size=int(processor.patch_size),
        merge_size=int(processor.merge_size),
        temporal_patch_size=int(processor.temporal_patch_size),
        min_pixels=shortest,
        max_pixels=longest,
        mean=mean,
        std=std,
        dtype=dtype,
    )


def image_settings(
    image_processor: Any, kwargs: Mapping[str, object], dtype: torch.dtype | None = None
) -> FusedVisionSettings | None:
    """The fused settings of ``image_processor`` called with ``kwargs``; None: the HF path."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    if type(image_processor) is not Qwen2VLImageProcessor:
        return None
    return _settings(image_processor, kwargs, dtype)


def video_settings(
    video_processor: Any, kwargs: Mapping[str, object], dtype: torch.dtype | None = None
) -> FusedVisionSettings | None:
    """The fused settings of ``video_processor`` called with ``kwargs``; None: the HF path."""
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    if type(video_processor) is not Qwen2VLVideoProcessor:
        return None
    if getattr(video_processor, "cap_pixels_per_frame", False):
        return None
    if kwargs.get("do_sample_frames", video_processor.do_sample_frames):
        return None
    return _settings(video_processor, kwargs, dtype)


def target_size(height: int, width: int, settings: FusedVisionSettings) -> tuple[int, int] | None:
    """The resized ``(height, width)`` of an item of that size; None: HF raises its own error."""
    if height < 1 or width < 1:
        return None
    try:
        return smart_resize(
            height, width, settings.factor, settings.min_pixels, settings.max_pixels
        )
    except ValueError:
        return None  # HF raises its own error for it


def image_target(image: object, settings: FusedVisionSettings) -> tuple[int, int] | None:
    """The resized ``(height, width)`` of ``image``; None when it must take the HF path."""
    if not isinstance(image, Image.Image):
        return None
    source = image.info.get(DRAFT_SOURCE_SIZE)
    if source is not None:
        return target_size(int(source[1]), int(source[0]), settings)
    return target_size(image.height, image.width, settings)


def video_target(frames: object, settings: FusedVisionSettings) -> tuple[int, int] | None:
    """The resized ``(height, width)`` of a video's frames; None when they take the HF path."""
    if not (
        isinstance(frames, np.ndarray)
        and frames.dtype == np.uint8
        and frames.ndim == 4
        and frames.shape[0] > 0
        and frames.shape[-1] == 3
    ):
        return None
    return target_size(int(frames.shape[1]), int(frames.shape[2]), settings)
