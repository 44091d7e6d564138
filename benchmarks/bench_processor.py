"""A stream of multimodal requests: mediaref's lazy path vs vLLM 0.33's eager path, in one run.

    python benchmarks/bench_processor.py [--requests 80] [--hot-fraction 0.8] [--block 8] [--seed 0]
        [--chart PATH]

Both paths start from fetched bytes and end with the processor's output for one request:

  lazy   ``media_io.load_bytes_ref(data)`` (header parse + sha256 key), then
         ``proc.apply(proc.build_inputs(prompt, {modality: [ref]}))``: the item hashes as its key,
         a hit never decodes, a miss decodes on the media pool and runs the HF processor.
  eager  ``media_io.load_bytes(data)`` (decode at fetch, the same decoder), then the same
         ``apply`` on the decoded item: the hasher runs blake3 over the PIL image's pixels or the
         frames array, on hits too, and a miss runs the HF processor exactly as the lazy path.

``apply`` runs as the three steps it is made of (``apply_phase1``, ``wait_decodes``,
``apply_phase2``) so that the hashing phase can be timed on its own.

Each path has its own Qwen2-VL processor (the built-in model: the real HF image and video
processors with the checkpoint's configs, so a 1080p image is processed at full size) and its own
processor cache with the same byte budget. They see the same seeded stream: with probability
``--hot-fraction`` a request repeats an item of the hot set (``--hot-images`` 1080p JPEGs and
``--hot-videos`` 720p H.264 clips), otherwise it brings a new cold item (a video with probability
``--cold-video-fraction``, else a JPEG). Images are 1920x1080 JPEG q=90 made from scikit-image's
colour photos (crops and mirror images for the cold ones); videos pan across those photos and are
sampled to ``--video-frames`` frames. After a warm-up on separate items, each path serves the
stream as a server serves its own: ``--block`` requests in a row (default 8), then the other path
serves the same ones, the first path alternating per block; ``--block 1`` interleaves the paths
request by request, so each one's hits run right after the other's decodes, with cold CPU caches.
Each request's two costs are paired; hits and misses are read from each cache's counters and must
agree between the paths. Outputs are compared (token ids always, pixel tensors on misses) outside
the timed region. ``--chart PATH`` draws each request kind's median cost on both paths (log scale)
as a PNG.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import _bench_media as bm
import _charts
from mediaref.cache import MultiModalProcessorOnlyCache
from mediaref.media.base import MediaIO
from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import ModelConfig
from mediaref.processing.processor import BaseMultiModalProcessor
from mediaref.registry import MULTIMODAL_REGISTRY

PATHS = ("lazy", "eager")
PROMPTS = {
    "image": "<|vision_start|><|image_pad|><|vision_end|>Describe this image.",
    "video": "<|vision_start|><|video_pad|><|vision_end|>Describe this video.",
}
PIXEL_FIELDS = {"image": "pixel_values", "video": "pixel_values_videos"}


@dataclass(frozen=True)
class Item:
    name: str
    modality: str
    data: bytes


@dataclass
class Outcome:
    """One request on one path: where its time went, and whether the cache served it."""

    fetch_s: float  # lazy: load_bytes_ref (header + sha256); eager: the decode
    hash_s: float  # apply_phase1: hash the item, look the hash up, submit misses' decodes
    rest_s: float  # build_inputs, the decode wait, apply_phase2 (HF on misses, prompt updates)
    hit: bool
    output: Any = field(repr=False, default=None)

    @property
    def total_s(self) -> float:
        return self.fetch_s + self.hash_s + self.rest_s

    @property
    def identify_s(self) -> float:
        """What it takes to know which item this is: fetch-time work plus hashing."""
        return self.fetch_s + self.hash_s


class ServingPath:
    """One way of serving requests: its own processor, cache and decoders."""

    def __init__(self, name: str, cache_gb: float, video_frames: int) -> None:
        self.name = name
        config = ModelConfig(model=str(builtin_model_path("qwen2_vl")))
        self.cache = MultiModalProcessorOnlyCache(cache_gb)
        self.processor: BaseMultiModalProcessor[Any] = MULTIMODAL_REGISTRY.create_processor(
            config, cache=self.cache
        )
        # apply() is phase 1, the decode wait and phase 2; the benchmark runs them itself to
        # time the phases, which is only the same thing if the model keeps that composition.
        assert self.processor.supports_two_phase_apply
        info = self.processor.info
        self.media_io: dict[str, MediaIO[Any]] = {
            "image": info.get_media_io("image"),
            # Uniform frames (the model's bound qwen2_vl loader samples 2 a second).
            "video": info.get_media_io(
                "video", {"num_frames": video_frames, "video_backend": "pyav"}
            ),
        }

    def fetch(self, item: Item) -> Any:
        media_io = self.media_io[item.modality]
        if self.name == "lazy":
            return media_io.load_bytes_ref(item.data)
        return media_io.load_bytes(item.data)

    def serve(self, item: Item) -> Outcome:
        processor = self.processor
        start = time.perf_counter()
        media = self.fetch(item)
        fetched = time.perf_counter()
        inputs = processor.build_inputs(PROMPTS[item.modality], {item.modality: [media]})
        built = time.perf_counter()
        with processor.apply_phase1(inputs) as state:
            hashed = time.perf_counter()
            state.wait_decodes()
            output = processor.apply_phase2(state)
        done = time.perf_counter()
        stats = self.cache.make_stats(delta=True)
        return Outcome(
            fetch_s=fetched - start,
            hash_s=hashed - built,
            rest_s=(built - fetched) + (done - hashed),
            hit=stats.hits == stats.total == 1,
            output=output,
        )

    def reset(self) -> None:
        self.cache.clear_cache()
        self.cache.make_stats(delta=True)


# -- media -----------------------------------------------------------------------------------


def make_stream(args: argparse.Namespace) -> tuple[list[Item], list[Item], list[Item]]:
    """(warm-up items, hot set, the request stream) - all encoded before anything is timed."""
    rng = np.random.default_rng(args.seed)
    photos = {name: bm.load_photo(name) for name in bm.PHOTO_NAMES}
    names = list(photos)
    counter = iter(range(1 << 30))

    def new_image() -> Item:
        name = names[int(rng.integers(len(names)))]
        image = bm.photo_variant(photos[name], rng)
        return Item(f"jpeg#{next(counter)}", "image", bm.encode_image(image, "JPEG"))

    def new_video() -> Item:
        name = names[int(rng.integers(len(names)))]
        phase = float(rng.random())
        clip = bm.encode_pan_clip(photos[name], seconds=args.video_seconds, phase=phase)
        return Item(f"h264#{next(counter)}", "video", clip)

    warmup = [new_image(), new_video()]
    hot = [new_image() for _ in range(args.hot_images)]
    hot += [new_video() for _ in range(args.hot_videos)]
    stream: list[Item] = []
    for _ in range(args.requests):
        if hot and rng.random() < args.hot_fraction:
            stream.append(hot[int(rng.integers(len(hot)))])
        elif rng.random() < args.cold_video_fraction:
            stream.append(new_video())
        else:
            stream.append(new_image())
    return warmup, hot, stream


# -- the run ---------------------------------------------------------------------------------


def same_output(a: Outcome, b: Outcome, modality: str, compare_pixels: bool) -> bool:
    if a.output["prompt_token_ids"] != b.output["prompt_token_ids"]:
        return False
    if not compare_pixels:
        return True
    pixel_field = PIXEL_FIELDS[modality]
    return torch.equal(
        a.output["mm_kwargs"].get_data()[pixel_field], b.output["mm_kwargs"].get_data()[pixel_field]
    )


def serve_block(path: ServingPath, items: list[Item]) -> list[Outcome]:
    """One path serves ``items`` in order, as a server would serve its own stream."""
    gc.collect()  # untimed: a collection should not land inside a request's timing
    gc.disable()
    try:
        return [path.serve(item) for item in items]
    finally:
        gc.enable()


def run(
    paths: dict[str, ServingPath],
    warmup: list[Item],
    stream: list[Item],
    block: int,
    log: Callable[[str], None],
    trace: bool,
) -> list[tuple[Item, dict[str, Outcome]]]:
    for item in warmup:  # first calls load the HF processors and fill allocator pools
        for path in paths.values():
            serve_block(path, [item, item])  # a miss, then a hit
    for path in paths.values():
        path.reset()
    gc.freeze()  # setup objects leave the collector's view, so the collects are cheap

    results = []
    mismatches = []
    for block_index, first in enumerate(range(0, len(stream), block)):
        items = stream[first : first + block]
        order = PATHS if block_index % 2 == 0 else PATHS[::-1]  # who goes first alternates
        served = {name: serve_block(paths[name], items) for name in order}
        for offset, item in enumerate(items):
            index = first + offset
            outcomes = {name: served[name][offset] for name in PATHS}
            lazy, eager = outcomes["lazy"], outcomes["eager"]
            if lazy.hit != eager.hit or not same_output(lazy, eager, item.modality, not lazy.hit):
                mismatches.append(
                    f"request {index} ({item.name}): hit lazy={lazy.hit} eager={eager.hit}"
                )
            for outcome in outcomes.values():
                outcome.output = None  # free the tensors; the cache keeps what it stores
            results.append((item, outcomes))
            if trace:
                log(
                    f"  #{index} {item.name:<8} "
                    + "  ".join(
                        f"{name} {'hit ' if o.hit else 'miss'} {bm.fmt_seconds(o.fetch_s)}"
                        f" + {bm.fmt_seconds(o.hash_s)} + {bm.fmt_seconds(o.rest_s)}"
                        for name, o in outcomes.items()
                    )
                )
            elif (index + 1) % 20 == 0:
                log(f"  {index + 1}/{len(stream)} requests")
    if mismatches:
        print("WARNING: the paths disagreed:\n  " + "\n  ".join(mismatches))
    return results


# -- report ----------------------------------------------------------------------------------


def cost_cells(outcomes: list[dict[str, Outcome]], measure: str) -> tuple[bm.Samples, bm.Samples]:
    lazy = bm.Samples([getattr(o["lazy"], measure) for o in outcomes])
    eager = bm.Samples([getattr(o["eager"], measure) for o in outcomes])
    return lazy, eager


def paired_ratio(outcomes: list[dict[str, Outcome]], measure: str) -> float:
    """Median over requests of eager/lazy: both ran back to back, so load drift cancels."""
    ratio: float = statistics.median(
        getattr(o["eager"], measure) / getattr(o["lazy"], measure) for o in outcomes
    )
    return ratio


def report(results: list[tuple[Item, dict[str, Outcome]]]) -> None:
    rows = []
    for modality in ("image", "video"):
        for hit, label in ((True, "hit"), (False, "miss")):
            chosen = [
                o for item, o in results if item.modality == modality and o["lazy"].hit == hit
            ]
            if not chosen:
                continue
            lazy, eager = cost_cells(chosen, "total_s")
            lazy_id, eager_id = cost_cells(chosen, "identify_s")
            lazy_rest, eager_rest = cost_cells(chosen, "rest_s")
            rows.append(
                [
                    f"{modality} {label}",
                    str(len(chosen)),
                    f"{bm.fmt_seconds(lazy.median)} / {bm.fmt_seconds(lazy.p90)}",
                    f"{bm.fmt_seconds(eager.median)} / {bm.fmt_seconds(eager.p90)}",
                    f"{paired_ratio(chosen, 'total_s'):,.1f}x",
                    bm.fmt_seconds(lazy_id.median),
                    bm.fmt_seconds(eager_id.median),
                    f"{paired_ratio(chosen, 'identify_s'):,.0f}x",
                    f"{bm.fmt_seconds(lazy_rest.median)} / {bm.fmt_seconds(eager_rest.median)}",
                ]
            )
    print("\nPer-request cost: whole request (median / p90), then identify + rest (medians):")
    bm.print_table(
        [
            "request",
            "n",
            "lazy",
            "eager",
            "eager/lazy",
            "identify lazy",
            "identify eager",
            "ratio",
            "rest lazy / eager",
        ],
        rows,
    )

    n = len(results)
    busy = {p: sum(o[p].total_s for _, o in results) for p in PATHS}
    hits = sum(o["lazy"].hit for _, o in results)
    print(f"\nOverall: {n} requests, {hits} hits ({hits / n:.0%}), served one at a time:")
    bm.print_table(
        ["path", "busy time", "requests/s"],
        [[p, f"{busy[p]:.2f}s", f"{n / busy[p]:.2f}"] for p in PATHS],
    )
    print(f"throughput lazy/eager: {busy['eager'] / busy['lazy']:.2f}x")
    print(
        "\nidentify = fetch-time work + apply_phase1 (hash, cache lookup, submitting decodes):\n"
        "  lazy: load_bytes_ref (header parse + sha256 key), then the item hashes as its key;\n"
        "  eager: load_bytes (full decode), then blake3 over the decoded pixels / frames.\n"
        "rest = build_inputs + decode wait + apply_phase2 (on a miss: the decode (lazy) and\n"
        "  the HF processor; on a hit: prompt tokenization and placeholder expansion, alike on\n"
        "  both paths).\n"
        "eager/lazy and ratio: the median over requests of each request's eager/lazy ratio.\n"
        "Targets (issue 5): 1080p JPEG hit >= 20x cheaper lazily, video hit >= 100x."
    )


def draw_chart(
    path: Path, results: list[tuple[Item, dict[str, Outcome]]], args: argparse.Namespace
) -> None:
    groups, lazy, eager, ratios = [], [], [], []
    for modality in ("image", "video"):
        for hit, label in ((True, "hit"), (False, "miss")):
            chosen = [
                o for item, o in results if item.modality == modality and o["lazy"].hit == hit
            ]
            if not chosen:
                continue
            lazy_cost, eager_cost = cost_cells(chosen, "total_s")
            groups.append(f"{modality} {label}\n(n={len(chosen)})")
            lazy.append(lazy_cost.median)
            eager.append(eager_cost.median)
            ratios.append(paired_ratio(chosen, "total_s"))
    _charts.grouped_bars(
        path,
        title=(
            f"Qwen2-VL processor on a stream of {len(results)} requests "
            f"({args.hot_fraction:.0%} to a hot set)"
        ),
        ratio_caption="eager / lazy, median of each request's paired ratio",
        groups=groups,
        series={
            "lazy: MediaRef, hashed by its key (mediaref)": lazy,
            "eager: decode at fetch, blake3 over pixels (vLLM 0.33)": eager,
        },
        ratios=ratios,
        ylabel="whole request (median)",
        seconds=True,
        footnote=_charts.machine_note(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Processor request stream: mediaref lazy vs an eager decode-and-hash baseline.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    add = parser.add_argument
    add("--requests", type=int, default=80, help="requests in the stream (default 80)")
    add("--hot-fraction", type=float, default=0.8, help="share of requests for hot items (0.8)")
    add("--hot-images", type=int, default=2, help="1080p JPEGs in the hot set (default 2)")
    add("--hot-videos", type=int, default=2, help="720p clips in the hot set (default 2)")
    parser.add_argument(
        "--cold-video-fraction",
        type=float,
        default=0.25,
        help="share of cold requests that bring a new video rather than a new image (default 0.25)",
    )
    add("--video-seconds", type=float, default=3.0, help="clip length (default 3)")
    add("--video-frames", type=int, default=16, help="frames sampled per clip (default 16)")
    parser.add_argument(
        "--block",
        type=int,
        default=8,
        help="requests each path serves in a row before the other path serves them (default 8;"
        " 1 interleaves the paths request by request)",
    )
    parser.add_argument(
        "--cache-gb",
        type=float,
        default=4.0,
        help="processor cache budget per path, GiB (default 4, vLLM's default)",
    )
    parser.add_argument("--seed", type=int, default=0, help="stream and media seed (default 0)")
    parser.add_argument("--trace", action="store_true", help="log every request's times to stderr")
    _charts.add_chart_argument(parser)
    args = parser.parse_args()
    if not 0 <= args.hot_fraction <= 1 or not 0 <= args.cold_video_fraction <= 1:
        parser.error("fractions must be within [0, 1]")
    if args.block < 1:
        parser.error("--block must be at least 1")

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    start = time.perf_counter()
    warmup, hot, stream = make_stream(args)
    cold = len({item.name for item in stream} - {item.name for item in hot})
    log(f"media encoded: {len(hot)} hot items, {cold} cold items, {len(stream)} requests")
    paths = {name: ServingPath(name, args.cache_gb, args.video_frames) for name in PATHS}
    results = run(paths, warmup, stream, args.block, log, args.trace)
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs; "
        f"seed {args.seed}; Qwen2-VL built-in processor; cache {args.cache_gb:g} GiB per path; "
        f"blocks of {args.block}\n"
        f"stream: {len(stream)} requests, hot fraction {args.hot_fraction:g} over {len(hot)} items "
        f"({args.hot_images} JPEG 1080p, {args.hot_videos} H.264 720p {args.video_seconds:g} s "
        f"-> {args.video_frames} frames), {cold} cold items "
        f"(video share {args.cold_video_fraction:g})"
    )
    report(results)
    if args.chart:
        draw_chart(args.chart, results, args)
    log("done")


if __name__ == "__main__":
    main()
