"""Qwen2-VL's opt-in approximate modes: speed over bit parity, never the default.

``MEDIAREF_QWEN2_VL_APPROX`` (read when a decoder is built) lists the modes, comma-separated:

- ``jpeg_draft``: a JPEG whose Qwen2-VL target size is at most half its own on both sides is
  decoded by libjpeg's DCT-domain downscaling (Pillow's ``Image.draft``: 1/2, 1/4 or 1/8, the
  smallest scale still at least the target), then resized to the target as the exact path
  resizes. The grid (hence the token count) is the one the full-size image gives: the drafted
  image carries its source size (``info[DRAFT_SOURCE_SIZE]``) and the fused path sizes the target
  from it. The mode is part of the decoder's spec, so drafted images never share a cache entry
  with exact ones. An item that falls to the HF path is sized from the drafted image.
- ``video_scale``: a video's sampled frames are decoded straight to their Qwen2-VL target size
  by FFmpeg's scaler (the PyAV codec's frame collector through a
  :class:`~mediaref.media.video.FrameScaling`: the same demuxer allow-list, pixel
  cap and decoded-bytes budget, charged for the target frames), so the fused path finds them at
  their target and skips its resize. The target is ``smart_resize`` of the source size, and
  only one that ``smart_resize`` maps to itself is used (otherwise frames keep their size and
  are resized exactly), so the grid is the exact path's. The scaling (with its sizing, kernel
  and method) is in the decoder's spec. Videos whose loader does not decode with PyAV, and
  ``video/jpeg`` frame lists, stay exact. The target is sized with the deployment's
  ``min_pixels`` / ``max_pixels``: a request that overrides them gets the grid of the scaled
  frames, not of the source.

``docs/performance.md`` reports each mode's deviation from the exact path on real media.
"""

from __future__ import annotations

from typing import Any

from PIL import Image

from mediaref import envs
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import FrameScaling
from mediaref.models.qwen2_vl._fused_settings import DRAFT_SOURCE_SIZE, smart_resize

__all__ = [
    "APPROX_MODES",
    "DRAFT_SOURCE_SIZE",
    "JPEG_DRAFT",
    "VIDEO_SCALE",
    "DraftingImageMediaIO",
    "approx_modes",
    "smart_resize_scaling",
]

JPEG_DRAFT = "jpeg_draft"
VIDEO_SCALE = "video_scale"
APPROX_MODES = frozenset({JPEG_DRAFT, VIDEO_SCALE})
_EXIF_ORIENTATION = 0x0112
_TRANSPOSING = frozenset({5, 6, 7, 8})  # orientations that swap width and height


def approx_modes() -> frozenset[str]:
    """The modes ``MEDIAREF_QWEN2_VL_APPROX`` turns on; ``ValueError`` for an unknown one."""
    modes = frozenset(m.strip() for m in str(envs.MEDIAREF_QWEN2_VL_APPROX).split(",") if m.strip())
    unknown = modes - APPROX_MODES
    if unknown:
        raise ValueError(
            f"MEDIAREF_QWEN2_VL_APPROX: unknown mode(s) {sorted(unknown)}; "
            f"the modes are {sorted(APPROX_MODES)}"
        )
    return modes


def smart_resize_scaling(*, factor: int, min_pixels: int, max_pixels: int) -> FrameScaling:
    """The ``video_scale`` frame scaling: frames to their ``smart_resize`` target.

    A target is used only when ``smart_resize`` maps it to itself, so the fused path (which sizes
    the frames it is given) finds them at their target and gives the source's grid. Extreme
    aspect ratios, where its floor or ceil against the pixel bounds is not a fixed point, and
    sizes it refuses (aspect ratio over 200) keep the source size: the exact path resizes those,
    or raises its own error.
    """
    sizing = {"factor": factor, "min_pixels": min_pixels, "max_pixels": max_pixels}

    def target(width: int, height: int) -> tuple[int, int] | None:
        try:
            target_h, target_w = smart_resize(height, width, **sizing)
        except ValueError:
            return None
        if smart_resize(target_h, target_w, **sizing) != (target_h, target_w):
            return None
        return target_w, target_h

    return FrameScaling(target, key={"qwen2_vl_smart_resize": sizing})


class DraftingImageMediaIO(ImageMediaIO):
    """:class:`ImageMediaIO` that decodes a large JPEG at a DCT scale (``jpeg_draft`` above).

    ``factor``, ``min_pixels`` and ``max_pixels`` are the processor's ``smart_resize`` settings;
    they are in the spec (as ``kwargs``), so each sizing keys its own cache entries.
    """

    def __init__(
        self, *args: Any, factor: int, min_pixels: int, max_pixels: int, **kwargs: Any
    ) -> None:
        self.draft_sizing = {"factor": factor, "min_pixels": min_pixels, "max_pixels": max_pixels}
        super().__init__(*args, qwen2_vl_jpeg_draft=self.draft_sizing, **kwargs)

    def _draft_target(self, image: Image.Image) -> tuple[int, int] | None:
        """The ``(width, height)`` to draft ``image`` to; None: decode it whole."""
        if image.format != "JPEG":
            return None
        width, height = image.size
        try:
            # smart_resize treats both sides alike, so the stored orientation sizes it as well as
            # the upright one would (swapped).
            target_h, target_w = smart_resize(height, width, **self.draft_sizing)
        except ValueError:
            return None
        if 2 * target_w > width or 2 * target_h > height:
            return None
        return target_w, target_h

    def _decode_header(self, header: Any, data: bytes, *, charged: bool) -> Image.Image:
        stored = header.image.size
        target = self._draft_target(header.image)
        transposed = False
        if target is not None:
            transposed = header.image.getexif().get(_EXIF_ORIENTATION) in _TRANSPOSING
            header.image.draft(None, target)  # before the load; the budget charges what is left
        decoded = super()._decode_header(header, data, charged=charged)
        if target is not None and header.image.size != stored:
            decoded.info[DRAFT_SOURCE_SIZE] = stored[::-1] if transposed else stored
        return decoded
