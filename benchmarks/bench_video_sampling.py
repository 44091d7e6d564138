"""Sampled video decode: keyframe seeking vs decoding every frame, side by side in one run.

    python benchmarks/bench_video_sampling.py [--seconds 10] [--height 720] [--frames 32]

Encodes a synthetic clip (a textured image panning, so the codec has real work) at each keyframe
interval, then times, best of ``--repeat``:
  seek        PyAVVideoBackend sampling ``--frames`` frames (packet index + keyframe seeks)
  no-seek     the same sampling with seeking disabled (decodes through to the last wanted frame)
  all-frames  num_frames=-1: every frame decoded and converted to RGB
and prints the ratios. Timing belongs here, not in the tests.
"""

from __future__ import annotations

import argparse
import io
import time
from fractions import Fraction

import av
import numpy as np

import mediaref.media.video._pyav_decode as pyav_decode
from mediaref.video import PyAVVideoBackend


def encode_clip(seconds: float, height: int, keyframe_interval: int, fps: int = 30) -> bytes:
    width = height * 16 // 9 // 2 * 2
    rng = np.random.default_rng(0)
    texture_width = (width + 8 * fps * int(seconds)) // 8
    texture = rng.integers(0, 256, (height // 8, texture_width, 3), np.uint8)
    texture = np.kron(texture, np.ones((8, 8, 1), np.uint8))  # blocks: compressible but not flat
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as output:
        params = f"keyint={keyframe_interval}:min-keyint={keyframe_interval}:scenecut=0"
        stream = output.add_stream(
            "libx264", rate=Fraction(fps), options={"preset": "veryfast", "x264-params": params}
        )
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(int(seconds * fps)):
            frame = np.ascontiguousarray(texture[:height, 8 * i : 8 * i + width])
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    return buffer.getvalue()


def best_of(repeat: int, fn) -> tuple[float, dict]:
    best, metadata = float("inf"), {}
    for _ in range(repeat):
        start = time.perf_counter()
        _, metadata = fn()
        best = min(best, time.perf_counter() - start)
    return best, metadata


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--keyframe-intervals", type=int, nargs="+", default=[30, 250])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for interval in args.keyframe_intervals:
        data = encode_clip(args.seconds, args.height, interval)
        sample = lambda: PyAVVideoBackend.load_bytes(data, num_frames=args.frames)  # noqa: E731
        sample()  # warm-up: first-call costs (codec setup, imports) are not the comparison
        seek_s, seek_md = best_of(args.repeat, sample)
        saved = pyav_decode.MIN_FRAMES_SKIPPED_BY_SEEK
        pyav_decode.MIN_FRAMES_SKIPPED_BY_SEEK = 1 << 62
        try:
            noseek_s, noseek_md = best_of(args.repeat, sample)
        finally:
            pyav_decode.MIN_FRAMES_SKIPPED_BY_SEEK = saved
        every = lambda: PyAVVideoBackend.load_bytes(data, num_frames=-1)  # noqa: E731
        all_s, all_md = best_of(args.repeat, every)
        print(
            f"{args.seconds:g}s {seek_md['width']}x{seek_md['height']} keyint={interval} "
            f"({len(data) / 1e6:.1f} MB, {all_md['total_num_frames']} frames), "
            f"sampling {args.frames}:\n"
            f"  seek       {seek_s * 1e3:8.1f} ms  decoded {seek_md['num_decoded_frames']} frames\n"
            f"  no-seek    {noseek_s * 1e3:8.1f} ms  "
            f"decoded {noseek_md['num_decoded_frames']} frames"
            f"  ({noseek_s / seek_s:.2f}x seek)\n"
            f"  all-frames {all_s * 1e3:8.1f} ms  decoded {all_md['num_decoded_frames']} frames"
            f"  ({all_s / seek_s:.2f}x seek)"
        )


if __name__ == "__main__":
    main()
