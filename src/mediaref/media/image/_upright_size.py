"""A JPEG's upright size (its EXIF orientation applied) from its header, no pixel decoded.

A render that needs no pixel (the routing path) sizes each JPEG this way. Pillow's JPEG open
parses every table in Python and costs more than the rest of such a render's work on the image,
so a *plain* JPEG, one whose size and orientation follow from its markers alone, is sized by
:func:`plain_jpeg_size` without Pillow; any other goes through Pillow's open and ``getexif``.
"""

from __future__ import annotations

from PIL import ExifTags

from mediaref.exceptions import MediaRefError
from mediaref.media.image._containers import jpeg_scan_count
from mediaref.media.image._header import (
    MAX_HEADER_SEGMENTS,
    PAYLOAD_ERRORS,
    check_jpeg_scans,
    check_pillow_refusal,
    check_pixel_limit,
    open_image_header,
)

_JPEG_LAYER_COUNTS = frozenset({1, 3, 4})  # the component counts Pillow opens (L, RGB, CMYK)


# What Pillow's JPEG plugin does with each marker before the first scan, for the markers whose
# handling :func:`plain_jpeg_size` can vouch for: stores the segment, or skips it.
_JPEG_STORED_APPS = frozenset({0xE0, *range(0xE3, 0xED), 0xEE, 0xEF})  # APP0, APP3-12, APP14-15
_JPEG_SKIPPED = frozenset({0xC4, 0xCC, 0xDC, 0xDD, 0xDF, 0xFE})  # DHT, DAC, DNL, DRI, EXP, COM
_JPEG_PLAIN_SOF = frozenset({0xC0, 0xC1, 0xC2})  # baseline, extended, progressive DCT


def plain_jpeg_size(data: bytes, max_segments: int) -> tuple[int, int] | None:
    """The ``(width, height)`` Pillow opens a plain JPEG at, with no orientation to apply; else None.

    Plain: every segment before the first scan is one Pillow's JPEG plugin reads without fail
    and none can change what it reports: no APP1 (EXIF or XMP: an orientation), APP2 (ICC
    fragments, an MPO's index) or APP13 (a Photoshop block Pillow may trip on), one 8-bit
    baseline, extended or progressive frame of 1, 3 or 4 components, quantization tables that
    parse, at most ``max_segments`` segments, and nothing between them. For such a file Pillow's
    open, its format (JPEG) and ``getexif()`` (no orientation) follow from these bytes alone, so
    the size is what a decode gives; for any other file None, and the caller asks Pillow.
    """
    if data[:2] != b"\xff\xd8":
        return None
    offset, end, segments = 2, len(data), 0
    size: tuple[int, int] | None = None
    while offset + 4 <= end and segments <= max_segments:
        if data[offset] != 0xFF:
            return None  # junk between segments: Pillow skips it, this walk does not
        marker = data[offset + 1]
        if marker == 0xFF:
            offset += 1
            continue
        segments += 1
        length = int.from_bytes(data[offset + 2 : offset + 4], "big")
        segment = data[offset + 4 : offset + 2 + length]
        if length < 2 or len(segment) != length - 2:
            return None
        if marker == 0xDA:
            return size
        if marker in _JPEG_PLAIN_SOF:
            if size is not None or not _plain_frame(segment):
                return None
            size = (int.from_bytes(segment[3:5], "big"), int.from_bytes(segment[1:3], "big"))
        elif marker == 0xDB:
            if not _quantization_tables_parse(segment):
                return None
        elif marker in _JPEG_STORED_APPS:
            # Pillow reads a JFIF version (APP0) and an Adobe version (APP14) unguarded.
            if (marker == 0xE0 and segment[:4] == b"JFIF") or (
                marker == 0xEE and segment[:5] == b"Adobe"
            ):
                if len(segment) < 7:
                    return None
        elif marker not in _JPEG_SKIPPED:
            return None
        offset += 2 + length
    return None


def _plain_frame(segment: bytes) -> bool:
    # Pillow reads the size and component count, refuses other depths and counts and an empty
    # image, and reads the components three bytes at a time (a short last one raises).
    return (
        len(segment) >= 6
        and (len(segment) - 6) % 3 == 0
        and segment[0] == 8
        and segment[5] in _JPEG_LAYER_COUNTS
        and segment[1:3] != b"\0\0"
        and segment[3:5] != b"\0\0"
    )


def _quantization_tables_parse(segment: bytes) -> bool:
    offset = 0
    while offset < len(segment):
        precision = 1 if segment[offset] < 16 else 2
        offset += 1 + 64 * precision
        if offset > len(segment):
            return False
    return True


_SWAPPING_ORIENTATIONS = frozenset({5, 6, 7, 8})  # transposes and quarter turns


def read_jpeg_upright_size(data: bytes) -> tuple[int, int] | None:
    """The ``(width, height)`` :meth:`ImageMediaIO.load_bytes` decodes a JPEG to (its EXIF
    orientation applied), read from its header: no pixel is decoded.

    None when ``data`` is not a JPEG (another format may keep its orientation after its pixels,
    PNG's eXIf chunk say) or when its header or EXIF block will not parse: the decode then says
    what is wrong. The orientation is read as the decode reads it (``getexif``: EXIF, then XMP).
    """
    if not data.startswith(b"\xff\xd8"):
        return None
    plain = plain_jpeg_size(data, MAX_HEADER_SEGMENTS["JPEG"])
    if plain is not None:
        # What Pillow would say of it without opening it (a Pillow open costs more than the rest
        # of a routing render's work on the image): the caps open_image_header applies.
        try:
            check_pixel_limit(plain)
            check_pillow_refusal(plain)
            check_jpeg_scans(jpeg_scan_count(data))
        except MediaRefError:
            return None
        return plain
    return _pillow_jpeg_upright_size(data)


def _pillow_jpeg_upright_size(data: bytes) -> tuple[int, int] | None:
    """:func:`read_jpeg_upright_size` as Pillow's open and ``getexif`` read it."""
    try:
        header = open_image_header(data)
    except MediaRefError:
        return None  # a cap or a refusal: the decode raises it
    except PAYLOAD_ERRORS:
        return None
    try:
        if header.image.format != "JPEG":
            return None
        width, height = header.image.size
        orientation = header.image.getexif().get(ExifTags.Base.Orientation, 1)
    except PAYLOAD_ERRORS:
        return None
    finally:
        header.close()
    return (height, width) if orientation in _SWAPPING_ORIENTATIONS else (width, height)


__all__ = ["plain_jpeg_size", "read_jpeg_upright_size"]
