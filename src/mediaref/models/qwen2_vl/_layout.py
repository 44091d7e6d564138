"""Qwen2-VL's image grids from the items' headers, for a render that needs no pixel.

An image's place in the prompt is ``grid.prod() // merge_size**2`` tokens, and its grid follows
from its size alone (``smart_resize``): the size its decode will have, which a JPEG's header
gives (its EXIF orientation applied, :func:`~mediaref.media.image.read_jpeg_upright_size`). Only
items and settings whose grid is certainly the full render's are taken: the processor must be one
the fused exact path takes (transformers' own, ``do_resize`` on, honoured kwargs only), and each
image a decoded ``PIL.Image`` or a ref to a JPEG decoded by the plain Pillow decoder. Anything
else returns None, and the caller renders in full (:mod:`mediaref.processing.layout`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from PIL import Image

from mediaref.media.base import MediaRef
from mediaref.media.image import read_jpeg_upright_size
from mediaref.models.qwen2_vl._fused_settings import image_settings, image_target, target_size

__all__ = ["image_grids_from_headers"]

_PLAIN_IMAGE_DECODE = frozenset(
    {"modality", "decoder", "image_mode", "rgba_background_color", "exif_transpose", "frame"}
)
"""The settings of :class:`~mediaref.media.image.ImageMediaIO`'s decode with no extra kwargs:
a ref decoded any other way (a draft scale, a custom decoder) may come out another size."""


def _plain_jpeg_size(ref: MediaRef[Any]) -> tuple[int, int] | None:
    settings = ref.spec.settings
    if set(settings) != _PLAIN_IMAGE_DECODE or settings.get("decoder") != "pillow":
        return None
    size = read_jpeg_upright_size(ref.data)
    return None if size is None else (size[1], size[0])


def image_grids_from_headers(
    image_processor: Any,
    kwargs: Mapping[str, object],
    dtype: torch.dtype | None,
    items: Sequence[object],
) -> torch.Tensor | None:
    """Each image's ``(t, h, w)`` grid as the full render computes it, from headers alone; None
    when any item or setting might give another grid."""
    settings = image_settings(image_processor, kwargs, dtype)
    if settings is None or not items:
        return None
    grids = []
    for item in items:
        if isinstance(item, MediaRef) and item.is_decoded:
            item = item.decode()  # memoized: its size is at hand
        if isinstance(item, Image.Image):
            target = image_target(item, settings)
        elif isinstance(item, MediaRef) and not item.is_released:
            size = _plain_jpeg_size(item)
            target = None if size is None else target_size(*size, settings)
        else:
            return None
        if target is None:
            return None
        grids.append((1, target[0] // settings.patch_size, target[1] // settings.patch_size))
    return torch.tensor(grids, dtype=torch.int64)
