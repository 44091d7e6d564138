"""From a header-parsed image to pixels: first frame, EXIF orientation, target mode."""

from __future__ import annotations

from PIL import ExifTags, Image, ImageFile, ImageMode

# Modes whose pixels carry alpha; other modes carry it through info["transparency"].
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
# Plugins that keep a decoder over their own copy of the whole payload (for seeking) which
# closing the file does not release; an image of theirs is copied rather than handed out.
_FORMATS_PINNING_PAYLOAD = frozenset({"WEBP", "AVIF"})
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
# Where a decoded image keeps metadata that can carry an orientation (EXIF, and XMP's
# tiff:Orientation, which Pillow's getexif() also honours).
_ORIENTATION_METADATA = ("exif", "Raw profile type exif", "xmp", "XML:com.adobe.xmp")
# Pillow keeps at most 4 bytes a pixel and a pointer per row.
_BYTES_PER_PIXEL = 4
_BYTES_PER_ROW = 8

BackgroundColor = tuple[int, int, int]


def decoded_image_bytes(size: tuple[int, int]) -> int:
    """What rasterizing an image of ``size`` allocates, for the request's decoded-bytes budget.

    4 bytes a pixel, as vLLM charges, plus Pillow's pointer per row, counted for the longer
    side (an EXIF rotation turns columns into rows): an image one pixel wide and 90 million
    tall takes 12 bytes a pixel, not 4.
    """
    width, height = size
    return _BYTES_PER_PIXEL * width * height + _BYTES_PER_ROW * max(width, height)


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
    method = _TRANSPOSE_FOR_ORIENTATION.get(image.getexif().get(ExifTags.Base.Orientation, 1))
    if method is None:
        return image
    upright = image.transpose(method)
    # The turned image must not say "turn me" again to a consumer that honours EXIF. Pillow's
    # exif_transpose re-serializes the whole EXIF block to drop the one tag, unpacking every
    # tag of it: a crafted multi-megabyte eXIf chunk becomes gigabytes of Python objects. The
    # metadata is dropped instead; the pixels are what the model sees.
    for key in _ORIENTATION_METADATA:
        upright.info.pop(key, None)
    return upright


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
