"""From a header-parsed image to pixels: first frame, EXIF orientation, target mode."""

from __future__ import annotations

from PIL import ExifTags, Image, ImageFile, ImageMode, ImageOps

# Modes whose pixels carry alpha; other modes carry it through info["transparency"].
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
# Plugins that keep a decoder over their own copy of the whole payload (for seeking) which
# closing the file does not release; an image of theirs is copied rather than handed out.
_FORMATS_PINNING_PAYLOAD = frozenset({"WEBP", "AVIF"})
# EXIF orientations 2-8 need a transpose; 1 is upright and other values are invalid.
_TRANSPOSED_ORIENTATIONS = range(2, 9)

BackgroundColor = tuple[int, int, int]


def decode_first_frame(
    image: ImageFile.ImageFile, mode: str, background: BackgroundColor
) -> Image.Image:
    """The first frame of ``image``, upright per its EXIF orientation, in ``mode``.

    A freshly opened image sits on its first frame, and loading without seeking decodes only
    that frame (for GIF, APNG and animated WebP alike).
    """
    image.load()
    upright = _apply_exif_orientation(image)
    converted = convert_image_mode(upright, mode, background)
    if converted is image and image.format in _FORMATS_PINNING_PAYLOAD:
        converted = image.copy()
    return converted


def _apply_exif_orientation(image: Image.Image) -> Image.Image:
    orientation = image.getexif().get(ExifTags.Base.Orientation, 1)
    if orientation not in _TRANSPOSED_ORIENTATIONS:
        # exif_transpose would hand back a full copy even when there is nothing to do.
        return image
    # exif_transpose also drops the orientation tag from the result's EXIF, so a consumer that
    # honours EXIF does not rotate the pixels a second time.
    return ImageOps.exif_transpose(image)


def has_alpha_band(mode: str) -> bool:
    return any(band in ("A", "a") for band in ImageMode.getmode(mode).bands)


def convert_image_mode(image: Image.Image, mode: str, background: BackgroundColor) -> Image.Image:
    """``image`` in ``mode``, compositing any transparency ``mode`` cannot hold on ``background``.

    Returns ``image`` itself when it is already in ``mode`` and nothing needs compositing.
    """
    carries_transparency = image.mode in _ALPHA_MODES or "transparency" in image.info
    if carries_transparency and not has_alpha_band(mode):
        # Convert to RGBA first so a palette's or a colour key's transparency becomes an alpha
        # band, then paste through it: a plain convert would expose whatever colour the
        # transparent pixels happen to store.
        rgba = image.convert("RGBA")
        canvas = Image.new("RGB", rgba.size, background)
        canvas.paste(rgba, mask=rgba.getchannel("A"))
        return canvas if mode == "RGB" else canvas.convert(mode)
    if image.mode == mode:
        return image
    return image.convert(mode)
