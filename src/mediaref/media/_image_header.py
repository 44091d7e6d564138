"""Reading an image's header without its pixels: identify, size-check, find its EXIF ImageID.

Pillow's ``Image.open`` is lazy (it parses the header and leaves the pixels), but it also runs
Pillow's own decompression-bomb check against the process-wide ``Image.MAX_IMAGE_PIXELS``: a
warning above that many pixels, ``DecompressionBombError`` above twice as many. Our policy is
``VLLM_MAX_IMAGE_PIXELS`` (0 disables it), and it must be the check that fires. Changing the global
per call would race with every other thread using Pillow, so :func:`open_image_header` runs the
registered format plugins itself, exactly as ``Image.open`` does minus that final check, and
applies our cap to the header's size before anything is decoded.

A few plugins still consult the global from inside themselves. WebP does so while opening (its
decoder reserves the canvas then), so a WebP canvas size is read from the first 30 bytes and
checked before Pillow sees the file. The others (GIF frames larger than their screen, MPO, TIFF
at load time) are rare; at the header their refusal means the image cannot be decoded in this
process whatever our cap says, so it surfaces as :class:`MediaTooLargeError` too, at fetch time.
"""

from __future__ import annotations

import io
import struct

from PIL import ExifTags, Image, ImageFile, PngImagePlugin, UnidentifiedImageError

from mediaref import envs
from mediaref.exceptions import MediaTooLargeError

# Plugins signal "not my format" with these (Image.open skips to the next plugin on them).
_NOT_THIS_FORMAT = (SyntaxError, IndexError, TypeError, struct.error)
_PREFIX_BYTES = 16  # what Image.open hands the plugins' accept() functions
_EXIF_IMAGE_UNIQUE_ID = 0xA420
_WEBP_HEADER_BYTES = 30  # RIFF header, first chunk header, and that chunk's size fields


class ImageHeader:
    """A header-parsed image and the in-memory file it reads from (a view of the payload)."""

    __slots__ = ("image", "source")

    def __init__(self, image: ImageFile.ImageFile, source: io.BytesIO) -> None:
        self.image = image
        self.source = source

    def close(self) -> None:
        """Drop the file's hold on the payload; pixels already decoded stay readable."""
        self.source.close()


def open_image_header(data: bytes) -> ImageHeader:
    """Identify ``data``, parse its header and enforce ``VLLM_MAX_IMAGE_PIXELS``. Reads no pixels.

    Raises :class:`MediaTooLargeError` for too many pixels, and whatever the plugins raise for a
    header they cannot read.
    """
    webp_size = _webp_canvas_size(data[:_WEBP_HEADER_BYTES])
    if webp_size is not None:
        check_pixel_limit(webp_size)
    source = io.BytesIO(data)
    try:
        image = _identify(source, len(data))
        check_pixel_limit(image.size)
    except Image.DecompressionBombError as exc:
        source.close()
        raise MediaTooLargeError(
            f"image exceeds Pillow's process-wide Image.MAX_IMAGE_PIXELS limit: {exc}"
        ) from exc
    except BaseException:
        source.close()
        raise
    return ImageHeader(image, source)


def _identify(source: io.BytesIO, size: int) -> ImageFile.ImageFile:
    prefix = source.read(_PREFIX_BYTES)
    tried: set[str] = set()
    hints: list[str] = []
    # Like Image.open: the common plugins first, then every plugin if none of those matched.
    for load_plugins in (Image.preinit, Image.init):
        load_plugins()
        for format_id in list(Image.ID):
            if format_id in tried:
                continue
            tried.add(format_id)
            factory, accept = Image.OPEN[format_id]
            try:
                verdict = accept(prefix) if accept else True
                if isinstance(verdict, str):  # e.g. "... because AVIF support not installed"
                    hints.append(verdict)
                    continue
                if not verdict:
                    continue
                source.seek(0)
                return factory(source, "")
            except _NOT_THIS_FORMAT:
                # Loose accept() checks let garbage reach several plugins; their complaints
                # would only mislead, so the message names the bytes instead.
                continue
    detail = f" ({'; '.join(hints)})" if hints else ""
    raise UnidentifiedImageError(
        f"cannot identify an image format in {size} bytes starting with {prefix!r}{detail}"
    )


def _webp_canvas_size(head: bytes) -> tuple[int, int] | None:
    """The canvas size a WebP file declares in its first chunk's header, or None if not WebP."""
    if len(head) < _WEBP_HEADER_BYTES or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        return None
    chunk = head[12:16]
    if chunk == b"VP8X":  # extended: 24-bit canvas width-1, height-1
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    if chunk == b"VP8L" and head[20] == 0x2F:  # lossless: 14-bit width-1, height-1
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":  # lossy key frame: 14-bit sizes
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def check_pillow_refusal(size: tuple[int, int]) -> None:
    """Refuse at fetch time what Pillow's WebP plugin would refuse when it opens the file.

    Without it, a canvas over twice ``Image.MAX_IMAGE_PIXELS`` would pass the header read and
    fail only at decode time, whatever ``VLLM_MAX_IMAGE_PIXELS`` allows.
    """
    pillow_limit = Image.MAX_IMAGE_PIXELS
    width, height = size
    if pillow_limit and width * height > 2 * pillow_limit:
        refusal = Image.DecompressionBombError(
            f"Image size ({width * height} pixels) exceeds limit of {2 * pillow_limit} pixels"
        )
        raise MediaTooLargeError(
            f"image exceeds Pillow's process-wide Image.MAX_IMAGE_PIXELS limit: {refusal}"
        ) from refusal


def check_pixel_limit(size: tuple[int, int]) -> None:
    """Raise :class:`MediaTooLargeError` above ``VLLM_MAX_IMAGE_PIXELS`` (0 or less: no cap)."""
    limit = envs.VLLM_MAX_IMAGE_PIXELS
    width, height = size
    if limit > 0 and width * height > limit:
        raise MediaTooLargeError(
            f"image of {width}x{height} = {width * height} pixels exceeds the {limit}-pixel "
            "limit (VLLM_MAX_IMAGE_PIXELS)"
        )


def read_exif_image_id(image: ImageFile.ImageFile) -> bytes | None:
    """The EXIF ImageUniqueID (tag 0xA420) if the header carries a usable one, else None.

    Never rasterizes: a PNG whose header had no eXIf chunk is not probed, because
    ``PngImageFile.getexif()`` then loads the whole image looking for one after the pixel data.
    """
    if isinstance(image, PngImagePlugin.PngImageFile) and "exif" not in image.info:
        return None
    try:
        return _image_id_from_exif(image.getexif())
    except Exception:  # noqa: BLE001
        # A damaged EXIF block costs only the shared key: the image keys off its bytes, and
        # decode decides whether the pixels are readable.
        return None


def webp_header(data: bytes) -> tuple[tuple[int, int], bytes | None] | None:
    """A WebP's canvas size and EXIF ImageID from its RIFF chunk headers, or None if not WebP.

    Opening a WebP with Pillow sets up the whole animation decoder (it reserves the canvas), which
    costs milliseconds; the RIFF container says everything the key needs without that.
    """
    size = _webp_canvas_size(data[:_WEBP_HEADER_BYTES])
    if size is None:
        return None
    offset, end = 12, min(len(data), 8 + int.from_bytes(data[4:8], "little"))
    while offset + 8 <= end:
        fourcc = data[offset : offset + 4]
        length = int.from_bytes(data[offset + 4 : offset + 8], "little")
        if fourcc == b"EXIF":
            exif = Image.Exif()
            try:
                exif.load(data[offset + 8 : offset + 8 + length])
                return size, _image_id_from_exif(exif)
            except Exception:  # noqa: BLE001 - as in read_exif_image_id
                return size, None
        offset += 8 + length + (length & 1)  # chunks are padded to an even length
    return size, None


_JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # not DHT, JPG, DAC
_JPEG_STANDALONE_MARKERS = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM, RSTn: no length field


def jpeg_header(data: bytes) -> tuple[tuple[int, int], bytes | None] | None:
    """A JPEG's size and EXIF ImageID from its marker segments, or None if they do not parse.

    Pillow's JPEG open parses every table before the scan (quantization, Huffman), which costs
    more than the key's sha256 of a small photo; the size and the EXIF block are all a key needs.
    None sends the caller to the full header parse, which decides what a malformed file means.
    """
    if data[:2] != b"\xff\xd8":
        return None
    offset, end = 2, len(data)
    image_id: bytes | None = None
    while offset + 4 <= end:
        if data[offset] != 0xFF:
            return None
        marker = data[offset + 1]
        if marker == 0xFF:  # fill byte before a marker
            offset += 1
            continue
        if marker in _JPEG_STANDALONE_MARKERS:
            offset += 2
            continue
        length = int.from_bytes(data[offset + 2 : offset + 4], "big")
        segment = data[offset + 4 : offset + 2 + length]
        if length < 2 or len(segment) != length - 2:
            return None
        if marker == 0xE1 and segment[:6] == b"Exif\x00\x00" and image_id is None:
            exif = Image.Exif()
            try:
                exif.load(segment)
                image_id = _image_id_from_exif(exif)
            except Exception:  # noqa: BLE001 - as in read_exif_image_id
                image_id = None
        elif marker in _JPEG_SOF_MARKERS:
            if len(segment) < 5:
                return None
            height = int.from_bytes(segment[1:3], "big")
            width = int.from_bytes(segment[3:5], "big")
            return ((width, height), image_id) if width and height else None
        elif marker == 0xDA:  # start of scan before any frame header
            return None
        offset += 2 + length
    return None


def _image_id_from_exif(exif: Image.Exif) -> bytes | None:
    value = exif.get_ifd(ExifTags.IFD.Exif).get(_EXIF_IMAGE_UNIQUE_ID)
    if value is None:  # the standard puts it in the Exif IFD; some writers use IFD0
        value = exif.get(_EXIF_IMAGE_UNIQUE_ID)
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogateescape")
    if not isinstance(value, bytes):
        return None
    value = value.strip(b"\x00 \t\r\n")
    # Some cameras write an all-zero placeholder; keying off it would make unrelated photos
    # share a cache entry.
    if not value.strip(b"0"):
        return None
    return value
