"""Image helpers at vLLM's public path ``vllm.multimodal.image``, and the ones the decoder uses.

One implementation each: :class:`~mediaref.media.image.ImageMediaIO` decodes with these very
functions (mode conversion, EXIF orientation), so what a caller gets from them is what a decode
gives.

Two deliberate differences from vLLM, both about what untrusted bytes may do:

- :data:`ALLOWED_IMAGE_FORMATS` holds the five formats mediaref decodes (JPEG, PNG, GIF, WebP,
  BMP), not vLLM's 37: the others either decode an embedded image while opening (ICO, ICNS, DCX),
  unpack whole tag arrays while opening (TIFF), run external programs (EPS) or hand the bytes to
  codecs whose allocations the header does not bound (AVIF, JPEG 2000); see
  ``docs/security.md``. :func:`open_image` therefore refuses a TIFF that vLLM's opens.
- :func:`convert_image_mode` composites transparency onto the background for every target mode
  without an alpha band (``"L"``, ``"CMYK"``...), where vLLM's does so for ``"RGB"`` only and lets
  a plain ``convert`` expose whatever colour transparent pixels happen to store. For ``"RGB"`` and
  for targets with alpha the two agree.

:func:`normalize_image` turns the pixels upright per the EXIF (or XMP) orientation without
re-serializing the EXIF block, which Pillow's ``exif_transpose`` does and which a crafted
multi-megabyte block turns into gigabytes of Python objects; the orientation metadata is dropped
from the result instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any

from PIL import ExifTags, Image, ImageMode

ALLOWED_IMAGE_FORMATS: tuple[str, ...] = ("JPEG", "PNG", "GIF", "WEBP", "BMP")
"""The Pillow plugins run on client bytes (see the module docstring). The JPEG plugin also yields
MPO (a JPEG with more pictures appended, as phones write them); only its first picture decodes."""

# Modes whose pixels carry alpha; other modes carry it through info["transparency"].
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
# EXIF orientations 2-8 need a transpose; 1 is upright and other values are invalid.
_TRANSPOSE_FOR_ORIENTATION = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
# Where an image keeps metadata that can carry an orientation (EXIF, and XMP's tiff:Orientation,
# which Pillow's getexif() also honours).
_ORIENTATION_METADATA = ("exif", "Raw profile type exif", "xmp", "XML:com.adobe.xmp")

BackgroundColor = tuple[int, int, int]


def open_image(fp: str | bytes | Any | IO[bytes]) -> Image.Image:
    """``Image.open`` restricted to :data:`ALLOWED_IMAGE_FORMATS` (a path or a binary file).

    Like ``Image.open``, reads the header only; a format outside the list raises
    ``PIL.UnidentifiedImageError``.
    """
    return Image.open(fp, formats=ALLOWED_IMAGE_FORMATS)


def rescale_image_size(image: Image.Image, size_factor: float, transpose: int = -1) -> Image.Image:
    """``image`` resized by ``size_factor`` (each side truncated to an int), then transposed by
    ``PIL.Image.Transpose(transpose)`` when ``transpose`` is 0 or more."""
    resized = image.resize((int(image.width * size_factor), int(image.height * size_factor)))
    if transpose >= 0:
        resized = resized.transpose(Image.Transpose(transpose))
    return resized


def exif_upright(image: Image.Image) -> Image.Image:
    """``image`` turned upright per its EXIF orientation; errors reading the EXIF propagate.

    Returns ``image`` itself when it is already upright. The turned image carries no orientation
    metadata, so a consumer that honours EXIF does not turn it again.
    """
    method = _TRANSPOSE_FOR_ORIENTATION.get(image.getexif().get(ExifTags.Base.Orientation, 1))
    if method is None:
        return image
    upright = image.transpose(method)
    for key in _ORIENTATION_METADATA:
        upright.info.pop(key, None)
    return upright


def normalize_image(image: Image.Image) -> Image.Image:
    """``image`` with its pixels as it is meant to be displayed (its EXIF orientation applied).

    As in vLLM, metadata that cannot be read leaves the image as it is.
    """
    try:
        return exif_upright(image)
    except MemoryError:
        raise
    except Exception:
        return image


def rgba_to_rgb(
    image: Image.Image, background_color: Sequence[int] = (255, 255, 255)
) -> Image.Image:
    """An ``RGBA`` image composited onto ``background_color``, as ``RGB``.

    Raises ``ValueError`` for another mode (use :func:`convert_image_mode`, which takes any).
    """
    if image.mode != "RGBA":
        raise ValueError(f"rgba_to_rgb takes an RGBA image, got mode {image.mode!r}")
    canvas = Image.new("RGB", image.size, _color(background_color))
    canvas.paste(image, mask=image.getchannel("A"))
    return canvas


def has_alpha_band(mode: str) -> bool:
    return any(band in ("A", "a") for band in ImageMode.getmode(mode).bands)


def has_transparency(image: Image.Image) -> bool:
    """Whether ``image`` carries transparency: an alpha band or a transparent colour/index."""
    return image.mode in _ALPHA_MODES or "transparency" in image.info


def convert_image_mode(
    image: Image.Image, to_mode: str, background_color: Sequence[int] = (255, 255, 255)
) -> Image.Image:
    """``image`` in ``to_mode``, compositing transparency ``to_mode`` cannot hold onto
    ``background_color``.

    Returns ``image`` itself when it is already in ``to_mode`` and nothing needs compositing.
    """
    if has_transparency(image) and not has_alpha_band(to_mode):
        # Through RGBA first, so a palette's or a colour key's transparency becomes an alpha band
        # to paste through: a plain conversion would expose the colours stored under it.
        rgba = image if image.mode == "RGBA" else image.convert("RGBA")
        rgb = rgba_to_rgb(rgba, background_color)
        return rgb if to_mode == "RGB" else rgb.convert(to_mode)
    if image.mode == to_mode:
        return image
    return image.convert(to_mode)


def _color(color: Sequence[int]) -> BackgroundColor:
    if len(color) != 3:
        raise ValueError(f"a background colour has 3 components, got {tuple(color)!r}")
    return (int(color[0]), int(color[1]), int(color[2]))


_has_transparency = has_transparency  # vLLM's private name, which its own tests import

__all__ = [
    "ALLOWED_IMAGE_FORMATS",
    "BackgroundColor",
    "convert_image_mode",
    "exif_upright",
    "has_alpha_band",
    "has_transparency",
    "normalize_image",
    "open_image",
    "rescale_image_size",
    "rgba_to_rgb",
]
