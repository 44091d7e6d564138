"""An RGB JPEG decoded by libjpeg-turbo in one call, straight into a new Pillow image's storage.

Pillow decodes a JPEG with libjpeg-turbo too, but asks for one scanline per call and repacks
each from RGB into its 4-byte RGBX storage: a 1080p photo took 5.9 ms here. simplejpeg drives
libjpeg-turbo's TurboJPEG API, which decodes the whole image in one call, the GIL released,
and writes RGBX itself; pointed at the storage of a new Pillow RGB image
(:func:`mediaref.media.image.pillow_storage.rgbx_view`, writable), the same photo took 5.2 ms
in the same loop, and nothing is repacked. The same library and the same algorithms (the
accurate integer IDCT and fancy upsampling, the default of both), so the same pixels: pinned
against Pillow's decoder by
``tests/test_media_image_jpeg_turbo.py`` on every JPEG the tests hold (each chroma subsampling,
progressive, restart markers, optimized Huffman tables, odd sizes, real photos).

Only what both decode alike takes this path: a JPEG Pillow reads as RGB (three 8-bit
components), its tile as Pillow opened it (no draft), small enough for one Pillow block (about
4 megapixels: the storage must be one exportable run). Anything else returns None, and so does
anything libjpeg-turbo so much as warns about (a truncated or damaged stream: simplejpeg's
strict mode), after which Pillow's own decoder runs with its own tolerance and errors, as if
this path did not exist. ``MEDIAREF_TURBO_JPEG=0`` turns the path off.
"""

from __future__ import annotations

from PIL import Image, ImageFile

from mediaref import envs
from mediaref.media.image.pillow_storage import rgbx_view

__all__ = ["decode_rgb_jpeg"]

_JPEG_FORMATS = frozenset({"JPEG", "MPO"})  # an MPO's first frame is a plain JPEG at offset 0
_PILLOW_RGB_TILE_ARGS = ("RGB", "")  # Pillow's rawmode, and no JPEG colour mode forced
_RGB_PIXEL_BYTES = 4  # Pillow stores an RGB pixel as RGBX


def decode_rgb_jpeg(image: ImageFile.ImageFile, payload: bytes) -> Image.Image | None:
    """``image``'s pixels (``payload`` opened by Pillow, not loaded) as a new RGB image carrying
    its ``info`` and ``format``; None when this path does not take it (see the module)."""
    if not envs.MEDIAREF_TURBO_JPEG or not _takes(image):
        return None
    import simplejpeg

    decoded = Image.new("RGB", image.size, None)  # storage not filled: every pixel is written
    pixels = rgbx_view(decoded, writable=True)
    if pixels is None:  # no single exportable run after all: Pillow decodes
        return None
    # No separate header call: it would let go of the GIL and take it back once more (up to a
    # switch interval beside busy Python: 10.8 -> 16.4 ms for a 1080p photo). libjpeg-turbo reads
    # the frame header Pillow read (three 8-bit components: YCbCr, or RGB under an Adobe
    # marker; both come out RGBX); a too-small buffer is its ValueError, a smaller image shows
    # in the shape of what it returns.
    try:
        filled = simplejpeg.decode_jpeg(payload, colorspace="RGBX", buffer=pixels, strict=True)
    except ValueError:
        return None  # damaged or merely suspicious: Pillow's decoder has the last word
    finally:
        del pixels  # the writable view must not outlive the fill
    complete = filled.shape == (image.height, image.width, 4)
    del filled  # a view of the same storage
    if not complete:
        return None
    decoded.info = dict(image.info)
    decoded.format = image.format  # as Pillow's plugins set it
    return decoded


def _takes(image: ImageFile.ImageFile) -> bool:
    tile = image.tile
    return (
        image.format in _JPEG_FORMATS
        and image.mode == "RGB"
        and getattr(image, "bits", None) == 8
        and getattr(image, "layers", None) == 3
        and not image.decoderconfig  # draft() sets a DCT scale there
        and len(tile) == 1
        and tile[0].codec_name == "jpeg"
        and tile[0].offset == 0
        and tile[0].extents == (0, 0, *image.size)
        and tile[0].args == _PILLOW_RGB_TILE_ARGS
        and _fits_one_block(image.width, image.height)
    )


def _fits_one_block(width: int, height: int) -> bool:
    """Whether Pillow stores an RGB image of this size in one block (its rows go to blocks of
    ``get_block_size()`` bytes, whole rows each), checked before a new image is allocated for
    nothing: only a one-block image's storage can be exported as one run."""
    block_bytes = int(Image.core.get_block_size())  # type: ignore[attr-defined]
    return height <= max(1, block_bytes // (width * _RGB_PIXEL_BYTES))
