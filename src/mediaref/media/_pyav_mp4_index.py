"""What FFmpeg's MP4 demuxer will allocate for its sample index, read from the box headers.

The ``mov`` demuxer builds an index entry (about 37 bytes, measured with FFmpeg 8) for every
sample a track's sample table declares, while it opens the file. A constant-size ``stsz`` box
declares its count in four bytes, as does a ``trun`` box of a fragment, so a 2 KB payload
declaring 80 million samples makes ``av.open`` allocate 2.8 GB before any check of ours could
run. :func:`declared_index_bytes` walks the ISO BMFF box tree (headers only, bounded) to sum the
declared samples, so that the cost can be charged to the request's decoded-bytes budget before
the demuxer sees the payload.

A compressed movie header (QuickTime ``cmov``: a zlib-deflated ``moov`` whose inflated size the
file states) hides its sample tables from this walk and is a decompression bomb of its own; it
is refused.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

_Buffer = bytes | bytearray | memoryview

# FFmpeg's per-sample index cost (AVIndexEntry plus the demuxer's per-sample tables), rounded up.
INDEX_BYTES_PER_SAMPLE = 40

# Boxes that may start an ISO BMFF / QuickTime file (what FFmpeg's mov probe looks for).
_TOP_LEVEL = {b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot", b"styp", b"sidx"}
# Containers on the way to the sample tables: moov/trak/mdia/minf/stbl and moof/traf.
_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"moof", b"traf", b"edts", b"mvex"}
# More boxes than any real file has (a fragmented hour at one fragment a second has ~15,000).
_MAX_BOXES = 200_000


class ContainerIndexError(ValueError):
    """The MP4 box tree cannot be walked safely (a compressed header, too many boxes)."""


def declared_index_bytes(data: _Buffer) -> int:
    """Bytes FFmpeg's MP4 demuxer would allocate for the samples ``data`` declares; 0 if not MP4.

    Raises :class:`ContainerIndexError` for a compressed movie header or an absurd box count.
    """
    if len(data) < 8 or bytes(data[4:8]) not in _TOP_LEVEL:
        return 0
    return _declared_samples(data) * INDEX_BYTES_PER_SAMPLE


def _declared_samples(data: _Buffer) -> int:
    samples = 0
    visited = 0
    pending = [(0, len(data))]
    while pending:
        start, end = pending.pop()
        for kind, body, body_end in _boxes(data, start, end):
            visited += 1
            if visited > _MAX_BOXES:
                raise ContainerIndexError(f"more than {_MAX_BOXES} MP4 boxes")
            if kind == b"cmov":
                raise ContainerIndexError("compressed MP4 movie headers (cmov) are not supported")
            if kind in _CONTAINERS:
                pending.append((body, body_end))
            elif kind in (b"stsz", b"stz2", b"trun"):
                samples += _sample_count(data, kind, body, body_end)
    return samples


def _sample_count(data: _Buffer, kind: bytes, body: int, end: int) -> int:
    # stsz: version/flags, sample_size, sample_count; stz2: version/flags, 3 reserved bytes and
    # a field size, sample_count; trun: version/flags, sample_count.
    offset = body + (4 if kind == b"trun" else 8)
    if offset + 4 > end:
        return 0
    (count,) = struct.unpack_from(">I", data, offset)
    return int(count)


def _boxes(data: _Buffer, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(type, body start, body end) of each box in ``data[start:end]``; stops at a broken one."""
    position = start
    while position + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, position)
        header = 8
        if size == 1:  # a 64-bit size follows the type
            if position + 16 > end:
                return
            (size,) = struct.unpack_from(">Q", data, position + 8)
            header = 16
        elif size == 0:  # the box runs to the end of its parent
            size = end - position
        if size < header or position + size > end:
            # Truncated: the demuxer reads what is there, so count what is there too.
            size = end - position
            if size < header:
                return
        yield kind, position + header, position + size
        position += size


__all__ = ["INDEX_BYTES_PER_SAMPLE", "ContainerIndexError", "declared_index_bytes"]
