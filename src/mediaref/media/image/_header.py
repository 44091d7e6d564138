"""Reading an image's header without its pixels: the accepted formats, the caps, the EXIF ImageID.

**Accepted formats.** Only formats whose Pillow ``open()`` reads a header and nothing more, and
whose ``load()`` allocates exactly the size that header declared (so the pixel cap checked on the
header bounds the allocation), are identified at all: :data:`ACCEPTED_FORMATS`. Pillow's other
plugins are never run on client bytes. Each refused one fails a check: ICO, CUR, ICNS and DCX
decode an embedded image while opening (an ICO declaring 16x16 can hold a 13000x13000 PNG); TIFF
unpacks whole tag arrays while opening (a 64 MB file's StripOffsets became 2 GB of Python ints
and minutes of CPU) and its tiles need not match its size; EPS runs Ghostscript; WMF, BUFR, GRIB
and HDF5 are stubs; PSD reads its layers, FLI/MPEG are movies, and AVIF/JPEG 2000 hand the bytes
to codecs whose allocations follow the bitstream, not the header Pillow reports. A refused format
is the client's fault: :class:`~mediaref.exceptions.VLLMUnprocessableEntityError` (HTTP 422),
raised at fetch time when the magic bytes name it, so the client hears it before any decode.

**Caps.** Pillow's ``Image.open`` also runs its own decompression-bomb check against the
process-wide ``Image.MAX_IMAGE_PIXELS``. Our policy is ``VLLM_MAX_IMAGE_PIXELS`` (0 disables it),
and it must be the check that fires; changing the global per call would race with every other
thread using Pillow, so :func:`open_image_header` runs the accepted plugins itself, as
``Image.open`` does minus that final check. A few plugins still consult the global from inside:
WebP while opening (its canvas size is read from the first 30 bytes and checked before Pillow
sees the file) and GIF when a frame is larger than the screen it declares (Pillow then grows the
image to hold it). Their refusal means the image cannot be decoded in this process whatever our
cap says, so it surfaces as :class:`~mediaref.exceptions.MediaTooLargeError` too.

**Work caps.** A JPEG makes libjpeg pass over the whole image once per scan; a crafted
progressive file with thousands of scans costs minutes of CPU from a few hundred kilobytes, so
more than :data:`MAX_JPEG_SCANS` is refused (422), like a refused format. Counting scans reads the
whole payload (~0.3 ms for a 1080p photo, more than the key's own sha256), so it happens when the
header is opened for a decode, not when a key is derived from the container bytes. Pillow's JPEG, PNG and
GIF parsers loop in Python over segments, chunks and blocks that can be a few bytes each; a file
packed with empty ones took tens of seconds to open, so more than :data:`MAX_HEADER_SEGMENTS`
is refused too, before any parser (ours or Pillow's) walks them.
"""

from __future__ import annotations

import io
import struct

from PIL import ExifTags, Image, ImageFile, PngImagePlugin, UnidentifiedImageError

from mediaref import envs
from mediaref.exceptions import MediaTooLargeError, VLLMUnprocessableEntityError
from mediaref.image import ALLOWED_IMAGE_FORMATS
from mediaref.media.image._containers import (
    WEBP_HEADER_BYTES,
    ContainerHeader,
    header_segments,
    jpeg_scan_count,
    png_with_one_idat,
    png_without_compressed_text,
    webp_canvas_size,
)

ACCEPTED_FORMATS: tuple[str, ...] = ALLOWED_IMAGE_FORMATS
"""Pillow plugins run on client bytes: :data:`mediaref.image.ALLOWED_IMAGE_FORMATS`, the one list."""

MAX_JPEG_SCANS = 500
"""More start-of-scan markers than any encoder writes (libjpeg's progressive script has 10);
libjpeg-turbo suggests a limit of this order against progressive-scan exploits."""

MAX_HEADER_SEGMENTS = {"JPEG": 4096, "PNG": 65536, "GIF": 65536}
"""The units Pillow's parsers loop over in Python (see ``header_segments``): JPEG segments
before the first scan (a photo has a few dozen), PNG chunks (8 KB pixel chunks would make 64K of
them a 512 MB file), GIF blocks before the first image (16 MB of comment)."""

# Plugins signal "not my format" with these (Image.open skips to the next plugin on them).
_NOT_THIS_FORMAT = (SyntaxError, IndexError, TypeError, struct.error)
_PREFIX_BYTES = 16  # what Image.open hands the plugins' accept() functions
_JPEG_FORMATS = frozenset({"JPEG", "MPO"})

PAYLOAD_ERRORS: tuple[type[Exception], ...] = (
    OSError,  # Pillow's decoders: "image file is truncated", "broken data stream"...
    SyntaxError,  # "broken PNG file", "not a GIF file"
    ValueError,
    EOFError,
    IndexError,
    KeyError,
    struct.error,
)
"""What Pillow raises for bytes it cannot read: the payload's fault. Anything else (MemoryError,
TypeError, RuntimeError) is not mapped here: it is the server's, and propagates as itself."""


class ImageHeader:
    """A header-parsed image and the in-memory file it reads from (a view of the payload)."""

    __slots__ = ("image", "source")

    def __init__(self, image: ImageFile.ImageFile, source: io.BytesIO) -> None:
        self.image = image
        self.source = source

    def close(self) -> None:
        """Drop the file's hold on the payload; pixels already decoded stay readable."""
        self.source.close()


def open_image_header(data: bytes, *, for_decode: bool = False) -> ImageHeader:
    """Identify ``data`` among :data:`ACCEPTED_FORMATS`, parse its header, apply the caps.

    Reads no pixels. ``for_decode``: the pixels will be loaded next, so a PNG's image data is
    first joined into one chunk (``png_with_one_idat``: one decoder feed, not one a chunk),
    a copy a header-only read has no use for. Raises :class:`MediaTooLargeError` over a cap,
    :class:`VLLMUnprocessableEntityError` for a refused format or too many JPEG scans, and
    whatever the plugins raise for a header they cannot read.
    """
    webp_size = webp_canvas_size(data[:WEBP_HEADER_BYTES])
    if webp_size is not None:
        check_pixel_limit(webp_size)
    check_header_segments(data)
    readable = png_without_compressed_text(data)
    source = io.BytesIO(png_with_one_idat(readable) if for_decode else readable)
    try:
        image = _identify(source, len(data))
        check_pixel_limit(image.size)
        if image.format in _JPEG_FORMATS:
            check_jpeg_scans(jpeg_scan_count(data))
    except Image.DecompressionBombError as exc:
        source.close()
        raise pillow_refusal(exc) from exc
    except BaseException:
        source.close()
        raise
    return ImageHeader(image, source)


def check_container_header(header: ContainerHeader) -> None:
    """The caps :func:`open_image_header` applies, on a header read from the container bytes."""
    check_pixel_limit(header.size)
    if header.format in ("WEBP", "GIF"):
        # Pillow's WebP plugin refuses these inside its open, and its GIF plugin when the first
        # frame grows the image past Pillow's own limit.
        check_pillow_refusal(header.size)


def _identify(source: io.BytesIO, size: int) -> ImageFile.ImageFile:
    prefix = source.read(_PREFIX_BYTES)
    Image.init()  # registers every plugin, as Image.open would; only the accepted ones run
    hints: list[str] = []
    for format_id in ACCEPTED_FORMATS:
        if format_id not in Image.OPEN:  # built without it (WebP needs libwebp)
            continue
        factory, accept = Image.OPEN[format_id]
        try:
            verdict = accept(prefix) if accept is not None else True
            if isinstance(verdict, str):  # "... because WEBP support not installed"
                hints.append(verdict)
                continue
            if not verdict:
                continue
            source.seek(0)
            return factory(source, "")
        except _NOT_THIS_FORMAT:
            # Loose accept() checks let garbage reach several plugins; their complaints would
            # only mislead, so the message names the bytes instead.
            continue
    refused = _recognise_refused(prefix, hints)
    if refused is not None:
        raise unsupported_format_error(refused)
    detail = f" ({'; '.join(hints)})" if hints else ""
    raise UnidentifiedImageError(
        f"cannot identify an image format in {size} bytes starting with {prefix!r}{detail}"
    )


def _recognise_refused(prefix: bytes, hints: list[str]) -> str | None:
    """The refused format whose magic ``prefix`` carries, if one says so; Pillow's hints to ``hints``.

    Only ``accept()`` runs (a look at the prefix); a plugin without one claims nothing.
    """
    for format_id, (_, accept) in Image.OPEN.items():
        if format_id in ACCEPTED_FORMATS or accept is None:
            continue
        try:
            verdict = accept(prefix)
        except Exception:  # a prefix check that trips on garbage claims nothing
            continue
        if isinstance(verdict, str):  # e.g. "... because AVIF support not installed"
            hints.append(verdict)
        elif verdict:
            return format_id
    return None


def unsupported_format_error(format_id: str) -> VLLMUnprocessableEntityError:
    return VLLMUnprocessableEntityError(
        f"image format {format_id} is not accepted (accepted: {', '.join(ACCEPTED_FORMATS)})",
        modality="image",
    )


def check_header_segments(data: bytes) -> None:
    """Refuse (422) a file packed with more header units than Pillow should loop over."""
    counted = header_segments(data, MAX_HEADER_SEGMENTS)
    if counted is None:
        return
    format_id, segments = counted
    limit = MAX_HEADER_SEGMENTS[format_id]
    if segments > limit:
        raise VLLMUnprocessableEntityError(
            f"{format_id} with more than {limit} header segments is refused: parsing each costs "
            "CPU, and no encoder writes that many",
            modality="image",
        )


def check_jpeg_scans(scans: int) -> None:
    if scans > MAX_JPEG_SCANS:
        raise VLLMUnprocessableEntityError(
            f"JPEG with {scans} scans is refused: decoding makes a pass over the image for each "
            f"scan, and no encoder writes more than {MAX_JPEG_SCANS}",
            modality="image",
        )


def pillow_refusal(exc: Image.DecompressionBombError) -> MediaTooLargeError:
    return MediaTooLargeError(
        f"image exceeds Pillow's process-wide Image.MAX_IMAGE_PIXELS limit: {exc}"
    )


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
        raise pillow_refusal(refusal) from refusal


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
    """The EXIF ImageID (tag 0x800D in IFD0) of a header-parsed image, if it has a usable one.

    Never rasterizes: a PNG whose header had no eXIf chunk is not probed, because
    ``PngImageFile.getexif()`` then loads the whole image looking for one after the pixel data.
    """
    if isinstance(image, PngImagePlugin.PngImageFile) and "exif" not in image.info:
        return None
    try:
        return _image_id_from_exif(image.getexif())
    except MemoryError:
        raise
    except Exception:
        # A damaged EXIF block costs only the shared key: the image keys off its bytes, and
        # decode decides whether the pixels are readable.
        return None


def image_id_from_exif_block(block: bytes) -> bytes | None:
    """The EXIF ImageID in an EXIF block (with or without its ``Exif\\0\\0`` prefix), if usable.

    Parsing reads IFD0's entries and the data they point to (Pillow bounds that by the block's
    size) and unpacks only the one tag.
    """
    exif = Image.Exif()
    try:
        exif.load(block)
        return _image_id_from_exif(exif)
    except MemoryError:
        raise
    except Exception:  # as in read_exif_image_id
        return None


def _image_id_from_exif(exif: Image.Exif) -> bytes | None:
    # IFD0's ImageID (0x800D), where vLLM's hasher reads it; never the Exif IFD's ImageUniqueID.
    value = exif.get(ExifTags.Base.ImageID)
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogateescape")
    if not isinstance(value, bytes):
        return None
    value = value.strip(b"\x00 \t\r\n")
    # Some writers leave an all-zero placeholder; keying off it would make unrelated images
    # share a cache entry.
    if not value.strip(b"0"):
        return None
    return value


__all__ = [
    "ACCEPTED_FORMATS",
    "MAX_HEADER_SEGMENTS",
    "MAX_JPEG_SCANS",
    "PAYLOAD_ERRORS",
    "ImageHeader",
    "check_container_header",
    "check_header_segments",
    "check_jpeg_scans",
    "check_pillow_refusal",
    "check_pixel_limit",
    "image_id_from_exif_block",
    "open_image_header",
    "pillow_refusal",
    "read_exif_image_id",
    "unsupported_format_error",
]
