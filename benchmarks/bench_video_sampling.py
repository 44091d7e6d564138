"""Sampled video decode: keyframe seeking and non-reference skipping vs decoding through.

    python benchmarks/bench_video_sampling.py [--seconds 10 60] [--keyframe-intervals 30 250]
        [--height 720] [--frames 32] [--repeat 5] [--all-frames] [--chart PATH]

Encodes a synthetic clip (a textured image panning, so the codec has real work) for each length
and keyframe interval, then times, interleaved round by round (the order alternates), medians of
``--repeat``:
  seek          PyAVVideoBackend sampling ``--frames`` frames (packet index + keyframe seeks;
                H.264 non-reference frames no wanted index names are not decoded): mediaref's
  no-skip       the same call with that skip off (every frame between a seek and a wanted
                frame decoded): what the skip saves
  decode-thru   the same call with seeking and the skip off: it decodes every frame up to the
                last wanted one (the last frame, for uniform sampling), converting only the kept
                ones, as a sampler without seeking does (a grab loop)
  all-frames    (``--all-frames``) num_frames=-1: every frame decoded *and* converted to RGB; it
                needs the request's decoded-bytes budget lifted (300 frames of 720p RGB is 830 MB,
                over VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES' default), which this path does for
                itself. It measures the RGB conversion and the allocation, not seeking.
Each path's frames decoded (``num_decoded_frames``) and seeks are printed beside its time, so the
claim checks itself: seeking can only pay where a keyframe lies in a gap between wanted frames,
and a case where it does not is flagged. Timing belongs here, not in the tests.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import av
import numpy as np

import _charts
import mediaref.media.video._pyav_decode as pyav_decode
from mediaref.video import PyAVVideoBackend, VideoMetadata

PATHS = ("seek", "no-skip", "decode-thru", "all-frames")


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


@dataclass
class PathResult:
    """One path's timings on one clip, and the work its last call reported."""

    seconds: list[float] = field(default_factory=list)
    decoded: int = 0
    seeks: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


@contextmanager
def counting_seeks() -> Iterator[list[int]]:
    """Count the decoder's keyframe seeks (the metadata counts frames, not seeks)."""
    counter = [0]
    original = pyav_decode.FrameDecoder.frames_from_keyframe

    def frames_from_keyframe(self: pyav_decode.FrameDecoder, pts: int) -> Iterator[av.VideoFrame]:
        counter[0] += 1
        return original(self, pts)

    pyav_decode.FrameDecoder.frames_from_keyframe = frames_from_keyframe  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        pyav_decode.FrameDecoder.frames_from_keyframe = original  # type: ignore[method-assign]


@contextmanager
def seeking_disabled() -> Iterator[None]:
    saved = pyav_decode.MIN_FRAMES_SKIPPED_BY_SEEK
    pyav_decode.MIN_FRAMES_SKIPPED_BY_SEEK = 1 << 62
    try:
        yield
    finally:
        pyav_decode.MIN_FRAMES_SKIPPED_BY_SEEK = saved


@contextmanager
def nonref_skip_disabled() -> Iterator[None]:
    saved = pyav_decode.SKIPPABLE_NONREF_CODECS
    pyav_decode.SKIPPABLE_NONREF_CODECS = frozenset()
    try:
        yield
    finally:
        pyav_decode.SKIPPABLE_NONREF_CODECS = saved


@contextmanager
def decode_budget_lifted() -> Iterator[None]:
    name = "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES"
    saved = os.environ.get(name)
    os.environ[name] = "0"  # read when used: 0 means no limit
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def path_call(path: str, data: bytes, frames: int) -> Callable[[], VideoMetadata]:
    def call() -> VideoMetadata:
        if path == "seek":
            return PyAVVideoBackend.load_bytes(data, num_frames=frames)[1]
        if path == "no-skip":
            with nonref_skip_disabled():
                return PyAVVideoBackend.load_bytes(data, num_frames=frames)[1]
        if path == "decode-thru":
            with seeking_disabled(), nonref_skip_disabled():
                return PyAVVideoBackend.load_bytes(data, num_frames=frames)[1]
        with decode_budget_lifted():
            return PyAVVideoBackend.load_bytes(data, num_frames=-1)[1]

    return call


def measure(data: bytes, frames: int, paths: tuple[str, ...], repeat: int) -> dict[str, PathResult]:
    calls = {path: path_call(path, data, frames) for path in paths}
    for call in calls.values():
        call()  # warm-up: first-call costs (codec setup, imports) are not the comparison
    results = {path: PathResult() for path in paths}
    with counting_seeks() as seeks:
        for round_index in range(repeat):
            order = paths if round_index % 2 == 0 else paths[::-1]
            for path in order:
                seeks[0] = 0
                start = time.perf_counter()
                metadata: dict[str, Any] = dict(calls[path]())
                results[path].seconds.append(time.perf_counter() - start)
                results[path].decoded = int(metadata["num_decoded_frames"])
                results[path].seeks = seeks[0]
    return results


def gap_note(total: int, frames: int, interval: int, seek: PathResult, thru: PathResult) -> str:
    """Why seeking did or did not pay on this clip, from the counts rather than the times
    (``seek`` here: the path that seeks without the non-reference skip)."""
    gap = (total - 1) / max(frames - 1, 1)
    if seek.decoded < thru.decoded:
        saved = thru.decoded - seek.decoded
        return f"{seek.seeks} seeks skipped {saved} of {thru.decoded} frames"
    return (
        f"NO SEEK: wanted frames are {gap:.1f} apart and keyframes {interval} apart, so no gap "
        f"skips >= {pyav_decode.MIN_FRAMES_SKIPPED_BY_SEEK} frames past a keyframe; no-skip "
        f"and decode-thru decode the same frames and only noise separates them"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Sampled video decode: keyframe seeking vs decoding through.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("--seconds", type=float, nargs="+", default=[10.0, 60.0])
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--keyframe-intervals", type=int, nargs="+", default=[30, 250])
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument(
        "--all-frames",
        action="store_true",
        help="also time num_frames=-1 (every frame to RGB; lifts the decoded-bytes budget)",
    )
    _charts.add_chart_argument(parser)
    args = parser.parse_args()
    paths = PATHS if args.all_frames else PATHS[:3]

    cases: list[tuple[str, dict[str, PathResult]]] = []
    for seconds in args.seconds:
        for interval in args.keyframe_intervals:
            data = encode_clip(seconds, args.height, interval)
            results = measure(data, args.frames, paths, args.repeat)
            seek, no_skip, thru = results["seek"], results["no-skip"], results["decode-thru"]
            _, metadata = PyAVVideoBackend.load_bytes(data, num_frames=args.frames)
            total = int(metadata["total_num_frames"])
            print(
                f"{seconds:g}s {metadata['width']}x{metadata['height']} keyint={interval} "
                f"({len(data) / 1e6:.1f} MB, {total} frames), sampling {args.frames}, "
                f"median of {args.repeat}:"
            )
            for path, result in results.items():
                ratio = f"  ({result.median / seek.median:.2f}x seek)" if path != "seek" else ""
                print(
                    f"  {path:<11} {result.median * 1e3:8.1f} ms  decoded {result.decoded:5d} "
                    f"frames, {result.seeks:3d} seeks{ratio}"
                )
            print(f"  {gap_note(total, args.frames, interval, no_skip, thru)}")
            print(
                f"  the non-reference skip left {no_skip.decoded - seek.decoded} frames undecoded"
            )
            cases.append((f"{seconds:g} s, keyframe\nevery {interval}", results))
    if args.chart:
        names = {
            "seek + skip (mediaref)": "seek",
            "seek, skip off": "no-skip",
            "decode through (both off)": "decode-thru",
        }
        series = {name: [r[path].median for _, r in cases] for name, path in names.items()}
        labels = {
            name: [
                f"{_charts.format_seconds(r[path].median)}\n{r[path].decoded} fr" for _, r in cases
            ]
            for name, path in names.items()
        }
        _charts.grouped_bars(
            args.chart,
            title=f"Sampling {args.frames} frames from a {args.height}p H.264 clip",
            ratios=[
                f"{r['no-skip'].median / r['seek'].median:.2f}x, "
                f"{r['decode-thru'].median / r['seek'].median:.2f}x"
                for _, r in cases
            ],
            ratio_caption="skip off, then decode through, over mediaref's time; "
            "'fr' = frames decoded",
            groups=[name for name, _ in cases],
            series=series,
            bar_labels=labels,
            ylabel="time per call (median)",
            seconds=True,
            footnote=_charts.machine_note(),
        )


if __name__ == "__main__":
    main()
