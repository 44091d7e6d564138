"""What JPEG, WebP and PNG files say about themselves in their container headers, read from bytes.

A ref's key needs the image's size (for the pixel cap) and, when EXIF ImageIDs are trusted, the
EXIF block; the three common formats state both in their first few segments, chunks or markers.
Reading them here is cheaper than a Pillow open, and it keeps Pillow's open-time work out of
fetch: its JPEG plugin parses every table, its WebP plugin sets up the whole animation decoder
(reserving the canvas), and its PNG plugin inflates text chunks (up to 64 MB of them).

Each reader returns None for a file it cannot follow; the caller then falls back to a Pillow
header parse, which decides what a malformed file means.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

WEBP_HEADER_BYTES = 30  # RIFF header, first chunk header, and that chunk's size fields
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # not DHT, JPG, DAC
_JPEG_STANDALONE_MARKERS = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM, RSTn: no length field
_JPEG_SOS = b"\xff\xda"
_JPEG_SOS_PATTERN = re.compile(re.escape(_JPEG_SOS))
_FEW_SCANS = 64
"""More scans than any encoder's progressive script; past them the count goes to ``bytes.count``."""
_PNG_COMPRESSED_TEXT = frozenset({b"zTXt", b"iTXt"})
# zlib.crc32 lets go of the GIL for a buffer over 5 KiB, and taking it back waits up to a switch
# interval (5 ms) beside a busy Python thread; pieces this small keep it, for the same 0.6 ms a
# 2 MB payload (one CRC over a joined copy would cost a second copy of the payload).
_CRC_PIECE_BYTES = 4096
# The text keywords whose content Pillow turns into an orientation (EXIF, XMP).
_PNG_TEXT_KEPT = frozenset({b"Raw profile type exif", b"XML:com.adobe.xmp"})


@dataclass(frozen=True)
class ContainerHeader:
    """An image's format, its size as the header declares it, and its EXIF block if it has one.

    ``mode`` is the mode Pillow will open it in and ``transparent`` whether it carries
    transparency (what converting it to a mode changes), when the header says (None: ask
    Pillow).
    """

    format: str
    size: tuple[int, int]
    exif: bytes | None = None
    mode: str | None = None
    transparent: bool = False


# Pillow's modes: a JPEG's by its component count, a PNG's by (colour type, bit depth).
_JPEG_MODES = {1: "L", 3: "RGB", 4: "CMYK"}
_PNG_MODES = {0: "L", 2: "RGB", 3: "P", 4: "LA", 6: "RGBA"}
_PNG_GREY_MODES = {1: "1", 16: "I;16"}  # colour type 0 at these depths


def webp_canvas_size(head: bytes) -> tuple[int, int] | None:
    """The canvas size a WebP file declares in its first chunk's header, or None if not WebP."""
    if len(head) < WEBP_HEADER_BYTES or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
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


def webp_header(data: bytes, *, want_exif: bool) -> ContainerHeader | None:
    """A WebP's canvas size and EXIF chunk from its RIFF chunk headers, or None if not WebP."""
    size = webp_canvas_size(data[:WEBP_HEADER_BYTES])
    if size is None:
        return None
    mode = "RGBA" if _webp_has_alpha(data) else "RGB"
    if not want_exif:
        return ContainerHeader("WEBP", size, mode=mode, transparent=mode == "RGBA")
    offset, end = 12, min(len(data), 8 + int.from_bytes(data[4:8], "little"))
    exif = None
    while offset + 8 <= end:
        fourcc = data[offset : offset + 4]
        length = int.from_bytes(data[offset + 4 : offset + 8], "little")
        if fourcc == b"EXIF":
            exif = data[offset + 8 : offset + 8 + length]
            break
        offset += 8 + length + (length & 1)  # chunks are padded to an even length
    return ContainerHeader("WEBP", size, exif, mode=mode, transparent=mode == "RGBA")


def _webp_has_alpha(data: bytes) -> bool:
    """libwebp's ``has_alpha`` feature, which Pillow opens a WebP as RGBA by: the extended
    header's alpha flag, or a lossless bitstream's alpha hint."""
    chunk = data[12:16]
    if chunk == b"VP8X":
        return bool(data[20] & 0x10)
    if chunk == b"VP8L":
        return bool(int.from_bytes(data[21:25], "little") >> 28 & 1)
    return False


def png_header(data: bytes, *, want_exif: bool) -> ContainerHeader | None:
    """A PNG's size (IHDR) and the eXIf chunk before its pixel data, or None if it won't walk.

    An eXIf chunk after the pixel data is not looked for: Pillow reads those only by decoding
    the image, and the key must never cost a decode.
    """
    if data[:8] != _PNG_SIGNATURE or data[12:16] != b"IHDR" or len(data) < 33:
        return None
    width, height = struct.unpack(">II", data[16:24])
    if not (0 < width < 2**31 and 0 < height < 2**31):
        return None
    depth, colour = data[24], data[25]
    mode = _PNG_GREY_MODES.get(depth, "L") if colour == 0 else _PNG_MODES.get(colour)
    exif: bytes | None = None
    transparent = mode in ("LA", "RGBA")
    offset = 33  # signature (8) + IHDR (4 length, 4 type, 13 body, 4 CRC)
    while offset + 8 <= len(data):  # the chunks before the pixels: few, and short
        length = int.from_bytes(data[offset : offset + 4], "big")
        kind = data[offset + 4 : offset + 8]
        if kind in (b"IDAT", b"IEND") or offset + 12 + length > len(data):
            break
        if kind == b"tRNS":
            transparent = True
        elif kind == b"eXIf" and want_exif and exif is None:
            exif = data[offset + 8 : offset + 8 + length]
        offset += 12 + length  # length, type, body, CRC
    return ContainerHeader("PNG", (width, height), exif, mode=mode, transparent=transparent)


def gif_header(data: bytes) -> ContainerHeader | None:
    """A GIF's size as Pillow will decode it: its screen, grown to hold the first frame.

    Read from the bytes because Pillow's open already allocates: reading the first frame's
    header it prepares that frame's disposal canvas, a raster of the frame's size, which the
    header alone may declare at 65535x65535. None when the blocks do not walk to a first image
    descriptor; the caller's full header parse then decides what the file is.
    """
    if data[:6] not in (b"GIF87a", b"GIF89a") or len(data) < 13:
        return None
    width, height = struct.unpack("<HH", data[6:10])
    flags = data[10]
    offset = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)  # after the global palette
    while offset < len(data):
        introducer = data[offset]
        if introducer == 0x21:  # an extension: label, then sub-blocks up to the empty one
            offset += 2
            while offset < len(data) and data[offset]:
                offset += 1 + data[offset]
            offset += 1
        elif introducer == 0x2C and offset + 9 <= len(data):  # the first image descriptor
            left, top, frame_width, frame_height = struct.unpack(
                "<HHHH", data[offset + 1 : offset + 9]
            )
            size = (max(width, left + frame_width), max(height, top + frame_height))
            return ContainerHeader("GIF", size) if size[0] and size[1] else None
        else:  # a trailer before any image, or bytes that are not a block
            return None
    return None


def png_without_compressed_text(data: bytes) -> bytes:
    """``data`` without the compressed text chunks Pillow would inflate, if it has any.

    Pillow inflates every zTXt and compressed iTXt chunk while reading a PNG, up to 1 MB each
    and 64 MB an image, and keeps the text in ``info``, which the decoded image inherits: a
    15 kB file became 16 MB in memory. Only two keywords can change the decoded pixels (they may
    carry the orientation Pillow's ``getexif`` honours), so the first chunk of each is kept.
    Returns ``data`` itself, uncopied, when there is nothing to drop or the chunks do not walk.
    """
    if data[:8] != _PNG_SIGNATURE:
        return data
    kept: list[bytes | memoryview] = []
    view = memoryview(data)
    offset, copied_to, seen = 8, 0, set()
    while offset + 8 <= len(data):
        length = int.from_bytes(data[offset : offset + 4], "big")
        kind = data[offset + 4 : offset + 8]
        end = offset + 12 + length
        if end > len(data):
            break
        if kind in _PNG_COMPRESSED_TEXT:
            keyword = bytes(view[offset + 8 : min(offset + 8 + 80, end)]).split(b"\0", 1)[0]
            if keyword in _PNG_TEXT_KEPT and keyword not in seen:
                seen.add(keyword)
            else:
                kept.append(view[copied_to:offset])
                copied_to = end
        if kind == b"IEND":
            break
        offset = end
    if not kept:
        return data
    kept.append(view[copied_to:])
    return b"".join(kept)


def png_with_one_idat(data: bytes) -> bytes:
    """``data`` with its first run of consecutive IDAT chunks merged into one, if it has several.

    Pillow's PNG reader hands its decoder one IDAT chunk at a time (its own encoder writes 64 KiB
    chunks, libpng's 8 KiB), and every feed takes the GIL back, which beside a busy Python thread
    waits up to a switch interval: a 1080p PNG in 31 chunks decoded 4x slower beside one. One
    chunk reaches the decoder in the decode's big feeds (``media/image/_pixels.py``). The merged
    chunk carries its correct CRC, so the result is a valid PNG with the same pixels. Only the first run is merged (an
    APNG's default image; ``fdAT`` frames are left as they are), the bytes around it are kept
    as they are (a truncated tail stays truncated), and ``data`` itself is returned, uncopied,
    when there is one chunk or none, or the chunks do not walk to a second one.
    """
    if data[:8] != _PNG_SIGNATURE:
        return data
    view = memoryview(data)
    offset = 8
    while offset + 8 <= len(data) and data[offset + 4 : offset + 8] not in (b"IDAT", b"IEND"):
        offset += 12 + int.from_bytes(data[offset : offset + 4], "big")
    run_start, bodies = offset, []
    while offset + 8 <= len(data) and data[offset + 4 : offset + 8] == b"IDAT":
        length = int.from_bytes(data[offset : offset + 4], "big")
        end = offset + 12 + length
        if end > len(data):  # a truncated chunk stays as it is, after the merged ones
            break
        bodies.append(view[offset + 8 : end - 4])
        offset = end
    if len(bodies) < 2:
        return data
    merged_length = sum(len(body) for body in bodies)
    if merged_length >= 2**31:  # a PNG chunk's length field is 31 bits
        return data
    crc = zlib.crc32(b"IDAT")
    for body in bodies:  # in pieces zlib computes holding the GIL (see _CRC_PIECE_BYTES)
        for start in range(0, len(body), _CRC_PIECE_BYTES):
            crc = zlib.crc32(body[start : start + _CRC_PIECE_BYTES], crc)
    return b"".join(
        (
            view[:run_start],
            merged_length.to_bytes(4, "big"),
            b"IDAT",
            *bodies,
            crc.to_bytes(4, "big"),
            view[offset:],
        )
    )


def jpeg_header(data: bytes, *, want_exif: bool) -> ContainerHeader | None:
    """A JPEG's size and first EXIF block from its marker segments, or None.

    None when the markers do not parse up to the frame header (SOF); the caller's full header
    parse then decides what the file is.
    """
    if data[:2] != b"\xff\xd8":
        return None
    offset, end = 2, len(data)
    exif: bytes | None = None
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
        if want_exif and marker == 0xE1 and segment[:6] == b"Exif\x00\x00" and exif is None:
            exif = segment
        elif marker in _JPEG_SOF_MARKERS:
            if len(segment) < 5:
                return None
            height = int.from_bytes(segment[1:3], "big")
            width = int.from_bytes(segment[3:5], "big")
            if not (width and height):
                return None
            mode = _JPEG_MODES.get(segment[5]) if len(segment) > 5 else None
            return ContainerHeader("JPEG", (width, height), exif, mode=mode)
        elif marker == 0xDA:  # start of scan before any frame header
            return None
        offset += 2 + length
    return None


def header_segments(data: bytes, limits: Mapping[str, int]) -> tuple[str, int] | None:
    """The units Pillow's parser loops over in Python, counted up to the format's limit + 1.

    JPEG: marker segments before the first scan (libjpeg reads the rest, in C). PNG: every
    chunk (Pillow reads the ones before the pixels on open, each pixel chunk while decoding and
    the rest after). GIF: blocks and sub-blocks before the first image. Each costs Pillow about
    a microsecond of Python, each can be a few bytes long, and a file packed with empty ones
    makes a header parse take tens of seconds. None for another format or unwalkable bytes.
    """
    if data[:2] == b"\xff\xd8":
        return "JPEG", _jpeg_segments(data, limits["JPEG"])
    if data[:8] == _PNG_SIGNATURE:
        return "PNG", _png_chunks(data, limits["PNG"])
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF", _gif_blocks(data, limits["GIF"])
    return None


def _jpeg_segments(data: bytes, limit: int) -> int:
    offset, count = 2, 0
    while offset + 4 <= len(data) and count <= limit:
        if data[offset] != 0xFF:
            break
        marker = data[offset + 1]
        if marker == 0xFF:
            offset += 1
            continue
        count += 1
        if marker in _JPEG_STANDALONE_MARKERS:
            offset += 2
            continue
        if marker == 0xDA:  # the first scan: libjpeg takes over from here
            break
        offset += 2 + int.from_bytes(data[offset + 2 : offset + 4], "big")
    return count


def _png_chunks(data: bytes, limit: int) -> int:
    offset, count = 8, 0
    while offset + 8 <= len(data) and count <= limit:
        count += 1
        if data[offset + 4 : offset + 8] == b"IEND":
            break
        offset += 12 + int.from_bytes(data[offset : offset + 4], "big")
    return count


def _gif_blocks(data: bytes, limit: int) -> int:
    flags = data[10] if len(data) > 10 else 0
    offset = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)  # after the global palette
    count = 0
    while offset < len(data) and count <= limit and data[offset] == 0x21:  # an extension
        offset += 2  # introducer and label
        count += 1
        while offset < len(data) and count <= limit:  # its sub-blocks, up to the empty one
            size = data[offset]
            offset += 1 + size
            count += 1
            if size == 0:
                break
    return count


def jpeg_scan_count(data: bytes, frame_offset: int = 2) -> int:
    """The start-of-scan markers after ``frame_offset`` (the first image's SOF): an upper bound.

    In entropy-coded data a 0xFF byte is always followed by 0x00 or a restart marker, so every
    0xFF 0xDA pair there is a real start of scan. The count also takes in pairs that other
    segments hold by chance and the scans of images appended after the first (an MPO's, a gain
    map's): it can only overcount, which no crafted file can turn into an undercount.

    A pair cannot overlap itself, so every match counts. It holds the GIL: numpy compares faster
    but lets go of the GIL at every step, and a decode thread then waits a switch interval (5 ms)
    per step to take it back whenever another thread runs Python (benchmarks/bench_decode_gil.py).
    The regular expression's search skips to each 0xFF (58 us for a 720p JPEG, where
    ``bytes.count`` takes 142: a routing render counts four); each match costs it a match object,
    so a file of many pairs (crafted: 35 ns each) is counted by ``bytes.count`` (0.4 ns a byte)
    once it has shown more than a real file has.
    """
    found = 0
    for _ in _JPEG_SOS_PATTERN.finditer(data, frame_offset):
        found += 1
        if found > _FEW_SCANS:
            return data.count(_JPEG_SOS, frame_offset)
    return found


__all__ = [
    "WEBP_HEADER_BYTES",
    "ContainerHeader",
    "gif_header",
    "header_segments",
    "jpeg_header",
    "jpeg_scan_count",
    "png_header",
    "png_with_one_idat",
    "png_without_compressed_text",
    "webp_canvas_size",
    "webp_header",
]
