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


@functools.lru_cache(maxsize=None)
def make_clip(
    codec: str = "h264",
    container: str = "mp4",
    *,
    num_frames: int = 30,
    width: int = 64,
    height: int = 48,
    fps: int = 30,
    keyframe_interval: int = 10,
) -> bytes:
    """Encode ``num_frames`` pattern frames; cached, so tests share one encode per clip."""
    encoder, pix_fmt, options = ENCODERS[codec]
    options = dict(options)
    if encoder.startswith("libx26"):
        # Fixed GOPs: no scene-cut keyframes, so keyframe positions are known to the tests.
        params = f"keyint={keyframe_interval}:min-keyint={keyframe_interval}:scenecut=0"
        key = "x264-params" if encoder == "libx264" else "x265-params"
        options[key] = f"{options[key]}:{params}" if key in options else params
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as output:
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
