"""Good requests' latency with and without hostile traffic beside them, and what the mix costs.

Runs the fault mix of ``tests/security/_fault_mix.py`` (chat requests through the real stack:
per-request connector, lazy refs, the renderer's two phases) against loopback origins, twice in
one process: good traffic alone, then the same number of good requests interleaved with as many
hostile ones (stalls, drops, oversized bodies, gzip/deflate bombs, refused redirects, corrupt
payloads, pixel/video/audio decode bombs). Reports p50/p99 latency of the good requests in each
run and their ratio, every bad request's status, peak RSS over the run's baseline, and open
descriptors and threads before and after.

    python benchmarks/bench_fault_mix.py [--good 400] [--concurrency 64] [--json out.json]
        [--chart PATH]

``--chart PATH`` draws the good requests' p50 and p99 in both runs as a PNG.

The mix's settings (short fetch timeouts so stalls end, small caps) are in ``MIX_ENV``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(_TESTS / "security"), str(_TESTS)]

import _charts  # noqa: E402
from _fault_mix import (  # type: ignore[import-not-found]  # noqa: E402 - tests/security, put on sys.path above
    MIX_ENV,
    FaultOrigin,
    Outcome,
    PeakRSS,
    Stack,
    build_mix,
    open_fds,
    percentile,
    rss_bytes,
)

MIB = 1024 * 1024


async def run(
    stack: Stack, origin: FaultOrigin, total: int, bad_fraction: float, concurrency: int
) -> dict[str, Any]:
    requests = build_mix(origin, total, bad_fraction=bad_fraction, seed=int(bad_fraction * 100))
    await stack.http_client.close()
    fds, threads, baseline = open_fds(), threading.active_count(), rss_bytes()
    with PeakRSS() as rss:
        outcomes: list[Outcome] = await stack.run_all(origin, requests, concurrency=concurrency)
    await stack.http_client.close()
    await asyncio.sleep(0.2)
    good = [o.seconds for o in outcomes if o.request.good]
    lost = sum(1 for o in outcomes if o.request.good and o.status != 200)
    wrong = Counter(
        (o.request.kind, o.status) for o in outcomes if o.status != o.request.expected_status
    )
    statuses = Counter((o.request.kind, o.status) for o in outcomes if not o.request.good)
    return {
        "requests": total,
        "bad_fraction": bad_fraction,
        "good_requests": len(good),
        "good_lost": lost,
        "wrong_status": {f"{k} -> {s}": n for (k, s), n in wrong.items()},
        "bad_statuses": {f"{k} -> {s}": n for (k, s), n in sorted(statuses.items())},
        "good_p50_ms": percentile(good, 50) * 1e3,
        "good_p99_ms": percentile(good, 99) * 1e3,
        "peak_rss_over_baseline_mib": (rss.peak - baseline) / MIB,
        "fds_before_after": [fds, open_fds()],
        "threads_before_after": [threads, threading.active_count()],
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with FaultOrigin() as origin:
        stack = Stack()
        try:
            # Warm up: load both models, start the pools, fill the repeated image's cache entry.
            await run(stack, origin, 16, 0.0, args.concurrency)
            clean = await run(stack, origin, args.good, 0.0, args.concurrency)
            mixed = await run(stack, origin, 2 * args.good, 0.5, args.concurrency)
        finally:
            await stack.close()
    return {
        "good_only": clean,
        "mixed": mixed,
        "p99_ratio_mixed_over_clean": mixed["good_p99_ms"] / clean["good_p99_ms"],
        "p50_ratio_mixed_over_clean": mixed["good_p50_ms"] / clean["good_p50_ms"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--good", type=int, default=400, help="good requests per run")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    _charts.add_chart_argument(parser)
    args = parser.parse_args()
    for name in ("VLLM_MEDIA_URL_ALLOW_PRIVATE_IPS", "VLLM_MEDIA_CACHE"):
        os.environ.pop(name, None)
    os.environ.update(MIX_ENV)
    figures = asyncio.run(main_async(args))
    for name in ("good_only", "mixed"):
        run_figures = figures[name]
        print(
            f"{name:>9}: {run_figures['requests']} requests ({run_figures['good_requests']} good, "
            f"{run_figures['good_lost']} lost), good p50 {run_figures['good_p50_ms']:.1f} ms, "
            f"p99 {run_figures['good_p99_ms']:.1f} ms, peak RSS +"
            f"{run_figures['peak_rss_over_baseline_mib']:.0f} MiB, fds "
            f"{run_figures['fds_before_after']}, threads {run_figures['threads_before_after']}"
        )
    print(
        f"good p50 mixed/clean: {figures['p50_ratio_mixed_over_clean']:.2f}x, "
        f"p99 mixed/clean: {figures['p99_ratio_mixed_over_clean']:.2f}x"
    )
    print("bad requests:", json.dumps(figures["mixed"]["bad_statuses"], indent=1))
    if figures["mixed"]["wrong_status"]:
        print("WRONG STATUSES:", figures["mixed"]["wrong_status"])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    if args.chart:
        draw_chart(args.chart, figures, args)


def draw_chart(path: Path, figures: dict[str, Any], args: argparse.Namespace) -> None:
    clean, mixed = figures["good_only"], figures["mixed"]
    _charts.grouped_bars(
        path,
        title=(
            f"Good requests' latency, alone and beside as many hostile ones "
            f"({args.concurrency} in flight)"
        ),
        ratio_caption="with hostile traffic / alone",
        groups=["good p50", "good p99"],
        series={
            f"{clean['good_requests']} good requests alone ({clean['good_lost']} lost)": [
                clean["good_p50_ms"] / 1e3,
                clean["good_p99_ms"] / 1e3,
            ],
            (
                f"{mixed['good_requests']} good among {mixed['requests']} "
                f"({mixed['good_lost']} lost)"
            ): [mixed["good_p50_ms"] / 1e3, mixed["good_p99_ms"] / 1e3],
        },
        ylabel="latency of a good request",
        seconds=True,
        log=False,
        footnote=_charts.machine_note(),
    )


if __name__ == "__main__":
    main()
