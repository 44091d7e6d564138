"""Key derivation vs full decode, side by side in one run, on real-size media.

    python benchmarks/bench_key_vs_decode.py [--repeat N] [--photo astronaut.png] [--seed 0]
        [--chart PATH]

A fetched payload gets its cache key at fetch time; its decode is deferred (and skipped on a cache
hit). This script times, per payload, in one process and interleaved:

  sha256      bare ``hashlib.sha256(data).digest()``, the floor for any content key
  derive      ``derive_media_key(data, spec)``: the key alone (length-framed sha256 + spec)
  key         ``MediaIO.load_bytes_ref(data)``: what fetch pays, i.e. ``derive`` plus any header
              parse (image: Pillow header, EXIF ImageID, pixel cap; audio: soundfile header for
              the duration cap; video: none)
  decode      ``ref.decode()`` on a fresh ref: what a miss (and every eager request) pays

Payloads: a real photo (scikit-image) upscaled to 1920x1080 with LANCZOS as JPEG q=90, PNG and
WebP q=90; a 10 s 1280x720 30 fps H.264 clip (x264 veryfast, crf 23, default GOP) panning
across that photo, decoded to 32 frames (``VideoMediaIO(ImageMediaIO(), num_frames=32)``); 30 s
of synthetic speech-like 44.1 kHz stereo audio as 16-bit WAV and as MP3. Each round visits every
payload's decode and every payload's block of cheap calls (sha256, derive and key taking turns
call by call) in a seeded shuffled order, after a warm-up round. Medians and p90 over
``--repeat`` rounds. ``--chart PATH`` draws key vs decode per payload (log scale) as a PNG.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _bench_media as bm
import _charts
from mediaref.media.audio import AudioMediaIO
from mediaref.media.base import MediaIO, derive_media_key
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO

OPERATIONS = ("sha256", "derive", "key", "decode")
CHEAP_OPERATIONS = OPERATIONS[:3]
MIN_BLOCK_S = 0.03  # each round times the cheap operations, call by call, for at least this long


@dataclass
class Payload:
    name: str
    data: bytes
    media_io: MediaIO[Any]
    samples: dict[str, bm.Samples] = field(
        default_factory=lambda: {op: bm.Samples() for op in OPERATIONS}
    )
    derive_over_sha: list[float] = field(default_factory=list)  # paired within a round
    key_over_sha: list[float] = field(default_factory=list)
    calls_per_block: int = 1

    def operation(self, op: str) -> Callable[[], Any]:
        data, spec = self.data, self.media_io.get_decode_spec()
        if op == "sha256":
            return lambda: hashlib.sha256(data).digest()
        if op == "derive":
            return lambda: derive_media_key(data, spec)
        if op == "key":
            return lambda: self.media_io.load_bytes_ref(data)
        raise ValueError(op)

    def sample_cheap(self) -> None:
        """One round's sample of sha256, derive and key: medians of a block of single calls.

        The three operations take turns call by call (in rotating order), so drift from other
        load on the machine hits all three alike and the paired ratios cancel it.
        """
        ops = [self.operation(op) for op in CHEAP_OPERATIONS]
        per_op: list[list[float]] = [[] for _ in ops]
        for i in range(self.calls_per_block):
            for j in range(len(ops)):
                k = (i + j) % len(ops)
                elapsed, _ = bm.time_call(ops[k])
                per_op[k].append(elapsed)
        medians = [statistics.median(times) for times in per_op]
        for op, median in zip(CHEAP_OPERATIONS, medians, strict=True):
            self.samples[op].add(median)
        self.derive_over_sha.append(medians[1] / medians[0])
        self.key_over_sha.append(medians[2] / medians[0])

    def sample_decode(self) -> None:
        ref = self.media_io.load_bytes_ref(self.data)  # fresh, untimed: only the decode counts
        elapsed, _ = bm.time_call(ref.decode)
        self.samples["decode"].add(elapsed)


def make_payloads(photo_name: str, seed: int) -> list[Payload]:
    photo = bm.upscale(bm.load_photo(photo_name))
    image_io = ImageMediaIO()
    video_io = VideoMediaIO(ImageMediaIO(), num_frames=32)
    audio_io = AudioMediaIO()
    audio = bm.speechlike_audio(30.0, 44_100, channels=2, seed=seed)
    return [
        Payload("1080p JPEG q90", bm.encode_image(photo, "JPEG"), image_io),
        Payload("1080p PNG", bm.encode_image(photo, "PNG"), image_io),
        Payload("1080p WebP q90", bm.encode_image(photo, "WEBP"), image_io),
        Payload(
            "720p H.264 10 s -> 32 fr",
            bm.encode_pan_clip(bm.load_photo(photo_name), seconds=10.0),
            video_io,
        ),
        Payload("30 s WAV 44.1k st", bm.encode_audio(audio, 44_100, "WAV"), audio_io),
        Payload("30 s MP3 44.1k st", bm.encode_audio(audio, 44_100, "MP3"), audio_io),
    ]


def run(payloads: list[Payload], repeat: int, seed: int) -> None:
    rng = random.Random(seed)
    for payload in payloads:  # warm-up, which also sizes the blocks of cheap calls
        one_call = sum(bm.time_call(payload.operation(op))[0] for op in CHEAP_OPERATIONS)
        payload.calls_per_block = max(5, int(MIN_BLOCK_S / max(one_call, 1e-7)))
        payload.sample_cheap()
        payload.sample_decode()
        for samples in payload.samples.values():
            samples.seconds.clear()
        payload.derive_over_sha.clear()
        payload.key_over_sha.clear()
    tasks = [(payload, kind) for payload in payloads for kind in ("cheap", "decode")]
    for _ in range(repeat):
        rng.shuffle(tasks)  # a seeded, different order every round
        for payload, kind in tasks:
            if kind == "cheap":
                payload.sample_cheap()
            else:
                payload.sample_decode()


def report(payloads: list[Payload], repeat: int) -> None:
    headers = [
        "payload",
        "size",
        "sha256",
        "derive",
        "derive/sha",
        "key (load_bytes_ref)",
        "key/sha",
        "decode",
        "decode/key",
    ]
    rows = []
    for p in payloads:
        s = p.samples
        rows.append(
            [
                p.name,
                bm.fmt_bytes(len(p.data)),
                bm.fmt_seconds(s["sha256"].median),
                bm.fmt_seconds(s["derive"].median),
                f"{statistics.median(p.derive_over_sha):.3f}x",
                f"{bm.fmt_seconds(s['key'].median)} (p90 {bm.fmt_seconds(s['key'].p90)})",
                f"{statistics.median(p.key_over_sha):.2f}x",
                f"{bm.fmt_seconds(s['decode'].median)} (p90 {bm.fmt_seconds(s['decode'].p90)})",
                f"{s['decode'].median / s['key'].median:,.0f}x",
            ]
        )
    print(f"\nMedians over {repeat} interleaved rounds (p90 in brackets); per-call times.")
    bm.print_table(headers, rows)
    print(
        "\nderive/sha, key/sha: median over rounds of the in-round ratio (calls interleaved).\n"
        "decode/key = median decode / median key: the work a cache hit skips, per unit of key.\n"
        "Targets (issue 2): decode/key >= 20x for JPEG, >= 100x for video;\n"
        "derive within 1.1x of sha256."
    )


def draw_chart(path: Path, payloads: list[Payload], repeat: int) -> None:
    _charts.grouped_bars(
        path,
        title="What a cache hit skips: the key (fetch time) vs the decode",
        ratio_caption="decode / key, medians",
        groups=[p.name.replace(" q90", "").replace(" -> ", "\n-> ") for p in payloads],
        series={
            "key: MediaIO.load_bytes_ref (mediaref, at fetch)": [
                p.samples["key"].median for p in payloads
            ],
            "decode: ref.decode() (a miss, or every eager request)": [
                p.samples["decode"].median for p in payloads
            ],
        },
        ylabel="time per call (median)",
        seconds=True,
        footnote=_charts.machine_note(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Key derivation vs full decode (and vs bare sha256) on real-size media.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("--repeat", type=int, default=20, help="measured rounds (default 20)")
    parser.add_argument(
        "--photo",
        default="astronaut.png",
        choices=bm.PHOTO_NAMES,
        help="scikit-image photo the images and the clip are made from (default astronaut.png)",
    )
    parser.add_argument("--seed", type=int, default=0, help="shuffle and audio seed (default 0)")
    _charts.add_chart_argument(parser)
    args = parser.parse_args()

    start = time.perf_counter()
    payloads = make_payloads(args.photo, args.seed)
    made_s = time.perf_counter() - start
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"photo {args.photo}; seed {args.seed}; media generated in {made_s:.1f}s"
    )
    run(payloads, args.repeat, args.seed)
    report(payloads, args.repeat)
    if args.chart:
        draw_chart(args.chart, payloads, args.repeat)
    print(f"\ntotal {time.perf_counter() - start:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
