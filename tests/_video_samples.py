"""Small generated video clips whose frames say which index they are.

Each frame paints its index as a grid of black and white 16x16 blocks (one bit per block, most
significant first), aligned to the codecs' macroblocks so that lossy encoders keep every bit
readable. :func:`read_frame_index` recovers the index from a decoded RGB frame, which lets a test
check WHICH frames a sampled decode returned, not only how many.
"""

from __future__ import annotations

import functools
import io
import os
import struct
from collections.abc import Callable
from fractions import Fraction

import av
import numpy as np

# SVT-AV1 prints its configuration banner to stderr on every encoder open unless told otherwise.
os.environ.setdefault("SVT_LOG", "1")

BLOCK = 16
_LOW, _HIGH = 16, 235

# codec name -> (encoder, pixel format, encoder options); the keyframe interval is set per clip.
ENCODERS: dict[str, tuple[str, str, dict[str, str]]] = {
    "h264": ("libx264", "yuv420p", {"preset": "ultrafast", "tune": "zerolatency"}),
    "h264_bframes": ("libx264", "yuv420p", {"preset": "medium", "bf": "3"}),
    "hevc": ("libx265", "yuv420p", {"preset": "ultrafast", "x265-params": "log-level=error"}),
    "vp9": ("libvpx-vp9", "yuv420p", {"deadline": "realtime", "cpu-used": "8"}),
    # Temporal filtering and the faster presets blur the one-bit blocks of these tiny frames.
    "av1": ("libsvtav1", "yuv420p", {"preset": "8", "svtav1-params": "rc=0:qp=4:enable-tf=0"}),
    "mpeg4": ("mpeg4", "yuv420p", {"qscale": "2"}),
}


def encoder_unavailable_reason(codec: str) -> str | None:
    """Why ``codec`` cannot be encoded here, or None when it can."""
    encoder = ENCODERS[codec][0]
    if encoder not in av.codecs_available:
        return f"this FFmpeg build has no {encoder} encoder"
    return None


def frame_pattern(index: int, width: int, height: int) -> np.ndarray:
    """The RGB frame for ``index``: its bits as blocks, plus a gradient so frames carry texture."""
    cols, rows = width // BLOCK, height // BLOCK
    bits = cols * rows
    if index >= 1 << bits:
        raise ValueError(f"{width}x{height} carries {bits} bits, too few for frame {index}")
    frame = np.empty((height, width, 3), dtype=np.uint8)
    for bit in range(bits):
        row, col = divmod(bit, cols)
        on = (index >> (bits - 1 - bit)) & 1
        frame[row * BLOCK : (row + 1) * BLOCK, col * BLOCK : (col + 1) * BLOCK] = (
            _HIGH if on else _LOW
        )
    return frame


def read_frame_index(frame: np.ndarray) -> int:
    """The index painted by :func:`frame_pattern`, read back from a decoded frame."""
    height, width = frame.shape[:2]
    cols, rows = width // BLOCK, height // BLOCK
    index = 0
    for bit in range(cols * rows):
        row, col = divmod(bit, cols)
        # The block centre: ringing from lossy coding sits at the block edges.
        top, left = row * BLOCK, col * BLOCK
        centre = frame[top + 4 : top + BLOCK - 4, left + 4 : left + BLOCK - 4]
        index = (index << 1) | int(centre.mean() > (_LOW + _HIGH) / 2)
    return index


@functools.cache
def make_clip(
    codec: str = "h264",
    container: str = "mp4",
    *,
    num_frames: int = 30,
    width: int = 64,
    height: int = 48,
    fps: int = 30,
    keyframe_interval: int = 10,
    movflags: str | None = None,
) -> bytes:
    """Encode ``num_frames`` pattern frames; cached, so tests share one encode per clip.
    ``movflags``: the MP4 muxer's (e.g. ``frag_keyframe+empty_moov`` for a fragmented MP4)."""
    encoder, pix_fmt, options = ENCODERS[codec]
    options = dict(options)
    if encoder.startswith("libx26"):
        # Fixed GOPs: no scene-cut keyframes, so keyframe positions are known to the tests.
        params = f"keyint={keyframe_interval}:min-keyint={keyframe_interval}:scenecut=0"
        key = "x264-params" if encoder == "libx264" else "x265-params"
        options[key] = f"{options[key]}:{params}" if key in options else params
    buffer = io.BytesIO()
    muxer_options = {"movflags": movflags} if movflags else {}
    with av.open(buffer, mode="w", format=container, options=muxer_options) as output:
        stream = output.add_stream(encoder, rate=Fraction(fps), options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        stream.codec_context.gop_size = keyframe_interval
        for index in range(num_frames):
            frame = av.VideoFrame.from_ndarray(frame_pattern(index, width, height), format="rgb24")
            for packet in stream.encode(frame):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    return buffer.getvalue()


@functools.cache
def make_black_clip(
    width: int, height: int, num_frames: int, container: str = "mp4", codec: str = "h264"
) -> bytes:
    """Black frames, which compress to almost nothing: a few KB declaring gigabytes of pixels.

    The frames are built in YUV directly (no RGB conversion), so even 4096x4096 encodes fast.
    """
    encoder, pix_fmt, options = ENCODERS[codec]
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as output:
        stream = output.add_stream(encoder, rate=Fraction(30), options=dict(options))
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        frame = av.VideoFrame(width, height, pix_fmt)
        for plane in frame.planes:
            plane.update(bytes(plane.buffer_size))
        for index in range(num_frames):
            frame.pts = index
            for packet in stream.encode(frame):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    return buffer.getvalue()


_STBL_PATH = (b"moov", b"trak", b"mdia", b"minf", b"stbl")


def _find_box(data: bytes, path: tuple[bytes, ...], start: int = 0, end: int | None = None) -> int:
    """The offset of the box at ``path`` (first match at each level)."""
    end = len(data) if end is None else end
    position = start
    while position + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, position)
        if kind == path[0]:
            return (
                position
                if len(path) == 1
                else _find_box(data, path[1:], position + 8, position + size)
            )
        position += size
    raise KeyError(path)


def declare_mp4_samples(data: bytes, count: int) -> bytes:
    """``data`` (a one-track MP4) with a sample table declaring ``count`` one-byte samples.

    The rewritten table takes a few dozen bytes whatever ``count`` is: a constant sample size in
    ``stsz``, one ``stsc`` run and one ``stts`` run. FFmpeg's demuxer indexes every declared
    sample when it opens the file.
    """
    stbl = _find_box(data, _STBL_PATH)
    (stbl_size,) = struct.unpack_from(">I", data, stbl)
    kept = bytearray()
    position = stbl + 8
    while position < stbl + stbl_size:
        size, kind = struct.unpack_from(">I4s", data, position)
        if kind not in (b"stsz", b"stsc", b"stts", b"stss", b"ctts"):
            kept += data[position : position + size]
        position += size
    kept += struct.pack(">I4sIII", 20, b"stsz", 0, 1, count)
    kept += struct.pack(">I4sIIIII", 28, b"stsc", 0, 1, 1, count, 1)
    kept += struct.pack(">I4sIIII", 24, b"stts", 0, 1, count, 1)
    new_stbl = struct.pack(">I4s", 8 + len(kept), b"stbl") + bytes(kept)
    delta = len(new_stbl) - stbl_size
    out = bytearray(data[:stbl] + new_stbl + data[stbl + stbl_size :])
    for depth in range(1, len(_STBL_PATH)):  # the boxes around stbl grow with it
        parent = _find_box(data, _STBL_PATH[:depth])
        (size,) = struct.unpack_from(">I", data, parent)
        struct.pack_into(">I", out, parent, size + delta)
    return bytes(out)


def make_clip_with_timestamps(
    container: str, pts_of: Callable[[int], int], num_frames: int = 40
) -> bytes:
    """Intra-only frames painted with their index, muxed with presentation timestamps
    ``pts_of(index)`` (which may go backwards) and decode timestamps that increase, as muxers
    require."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as output:
        stream = output.add_stream("mpeg4", rate=30, options={"qscale": "2"})
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.time_base = Fraction(1, 30)
        stream.codec_context.gop_size = 1

        def mux(packets: list[av.Packet]) -> None:
            for packet in packets:
                index = packet.pts
                packet.pts, packet.dts = pts_of(index), index - 10 * num_frames
                output.mux(packet)

        for index in range(num_frames):
            frame = av.VideoFrame.from_ndarray(frame_pattern(index, 64, 48), format="rgb24")
            frame.pts = index
            mux(stream.encode(frame))
        mux(stream.encode(None))
    return buffer.getvalue()
