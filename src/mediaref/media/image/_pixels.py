"""From a header-parsed image to pixels: first frame, EXIF orientation, target mode."""

from __future__ import annotations

from PIL import Image, ImageFile

from mediaref.image import BackgroundColor, convert_image_mode, exif_upright
from mediaref.media.image._jpeg_turbo import decode_rgb_jpeg

# Plugins that keep a decoder over their own copy of the whole payload (for seeking) which
# closing the file does not release; an image of theirs is copied rather than handed out.
_FORMATS_PINNING_PAYLOAD = frozenset({"WEBP", "AVIF"})
# Pillow feeds a decoder 64 KiB of the payload at a time, and every feed takes the GIL again:
# beside a busy Python thread (the renderer's worker, the event loop, a tokenizer) a feed waits
# up to a switch interval (5 ms). In feeds this big most images decode in one, the GIL released
# throughout, while a feed's copy of the payload stays bounded: a 1080p JPEG's whole decode
# beside busy Python 39 -> 17.6 ms (benchmarks/bench_decode_gil.py).
DECODE_FEED_BYTES = 4 << 20
# Pillow keeps at most 4 bytes a pixel and a pointer per row.
_BYTES_PER_PIXEL = 4
_BYTES_PER_ROW = 8


def decoded_image_bytes(size: tuple[int, int]) -> int:
    """What rasterizing an image of ``size`` allocates, for the request's decoded-bytes budget.

    4 bytes a pixel, as vLLM charges, plus Pillow's pointer per row, counted for the longer
    side (an EXIF rotation turns columns into rows): an image one pixel wide and 90 million
    tall takes 12 bytes a pixel, not 4.
    """
    width, height = size
    return _BYTES_PER_PIXEL * width * height + _BYTES_PER_ROW * max(width, height)


def decode_first_frame(
    image: ImageFile.ImageFile,
    mode: str | None,
    background: BackgroundColor,
    payload: bytes,
) -> Image.Image:
    """The first frame of ``image``, upright per its EXIF orientation, in ``mode`` (None: its own).

    A freshly opened image sits on its first frame, and loading without seeking decodes only
    that frame (for GIF, APNG and animated WebP alike). A damaged EXIF block fails the decode
    (the caller maps it), rather than silently leaving the pixels the wrong way up.
    ``payload``: the bytes ``image`` was opened from, for an RGB JPEG's one-call decode
    (:mod:`mediaref.media.image._jpeg_turbo`); where that path declines, Pillow decodes.
    """
    loaded = decode_rgb_jpeg(image, payload)
    if loaded is None:
        image.decodermaxblock = max(image.decodermaxblock, DECODE_FEED_BYTES)
        image.load()
        loaded = image
    upright = exif_upright(loaded)
    converted = upright if mode is None else convert_image_mode(upright, mode, background)
    if converted is image and image.format in _FORMATS_PINNING_PAYLOAD:
        converted = image.copy()
    return converted


__all__ = [
    "DECODE_FEED_BYTES",
    "BackgroundColor",
    "convert_image_mode",
    "decode_first_frame",
    "decoded_image_bytes",
]
