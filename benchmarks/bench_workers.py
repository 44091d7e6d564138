"""``mediaref serve --workers N``: cold throughput and hot hit rate, one worker against N.

Starts the server as a subprocess three times: one worker pinned to one core (what a core gives),
one worker on every core, and ``--workers N`` on every core (the load generator beside them:
responses carry no tensors, ``mm_payload: "none"``, so the client's share of the cores stays
small), and drives each with the
same requests: chat requests with one 1080p JPEG each (variants of scikit-image's photos, as
``data:`` URLs, encoded before the clock starts), ``--concurrency`` in flight.

- **cold**: every image distinct: every request decodes and runs the HF processor (the server
  runs with ``--no-layout-from-headers``: with ``mm_payload: "none"`` it would otherwise answer
  Qwen2-VL images from their headers; ``--layout-from-headers`` measures that path). Reported:
  requests/s and p50/p99, the cores the server kept busy (its processes' CPU time over the run's
  wall time: one worker near the cores it has leaves nothing for more workers to add), and N
  workers' requests/s over one's.
- **hot**: ``--hot-requests`` requests drawn (seeded) from a pool of ``--pool`` images: the hit
  rate is the share of items the server did not decode (``mediaref_decodes_total``, summed over
  the workers), which with N workers must equal one worker's: a repeat is a hit whichever
  worker takes it.

    python benchmarks/bench_workers.py [--workers 2] [--requests 160] [--concurrency 8]
        [--cache-gb GB] [--layout-from-headers] [--json out.json] [--chart PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(_TESTS)]

import _charts  # noqa: E402
from _bench_media import PHOTO_NAMES, encode_image, load_photo, photo_variant  # noqa: E402
from _serve_process import ServerProcess  # type: ignore[import-not-found]  # noqa: E402

CHAT = "/v1/chat/completions/render"


def images(count: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    photos = [load_photo(name) for name in PHOTO_NAMES]
    return [encode_image(photo_variant(photos[i % len(photos)], rng), "JPEG") for i in range(count)]


def body(jpeg: bytes) -> bytes:
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What?"}]
    return json.dumps(
        {"messages": [{"role": "user", "content": content}], "mm_payload": "none"}
    ).encode()


async def drive(url: str, bodies: list[bytes], concurrency: int) -> tuple[float, list[float]]:
    """Wall seconds and each request's latency; every answer must be a 200."""
    queue = list(reversed(bodies))
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=True)  # a worker each time
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while queue:
                payload = queue.pop()
                start = time.perf_counter()
                async with session.post(
                    url + CHAT, data=payload, headers={"Content-Type": "application/json"}
                ) as response:
                    await response.read()
                    assert response.status == 200, await response.text()
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - start, latencies


async def decodes(url: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
        text = await response.text()
    return sum(float(v) for v in re.findall(r"^mediaref_decodes_total\{[^}]*\} (\S+)$", text, re.M))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def start_server(workers: int, cores: set[int] | None, args: argparse.Namespace) -> Any:
    """The server, its processes limited to ``cores`` (None: every core): the child inherits
    this process's affinity, which is put back at once."""
    everything = os.sched_getaffinity(0)
    if cores:
        os.sched_setaffinity(0, cores)
    try:
        extra = ["--mm-processor-cache-gb", str(args.cache_gb)] if args.cache_gb else []
        if not args.layout_from_headers:
            extra.append("--no-layout-from-headers")  # decode and process, as the cold
        return ServerProcess("--workers", str(workers), *extra)
    finally:
        os.sched_setaffinity(0, everything)


async def measure_one(
    workers: int, cores: set[int] | None, args: argparse.Namespace
) -> dict[str, Any]:
    cold = [body(jpeg) for jpeg in images(args.requests, seed=workers * 1000 + 1)]
    warm = [body(jpeg) for jpeg in images(2 * args.concurrency, seed=workers * 1000 + 2)]
    pool = [body(jpeg) for jpeg in images(args.pool, seed=7)]  # the same pool for both runs
    rng = random.Random(11)
    stream = [pool[rng.randrange(len(pool))] for _ in range(args.hot_requests)]
    server = start_server(workers, cores, args)
    try:
        await drive(server.url, warm, args.concurrency)  # every worker's first requests
        cpu_before = server.cpu_seconds()
        wall, latencies = await drive(server.url, cold, args.concurrency)
        cold_cpu = server.cpu_seconds() - cpu_before
        before = await decodes(server.url)
        await drive(server.url, stream, args.concurrency)
        decoded = await decodes(server.url) - before
    finally:
        server.stop()
    return {
        "workers": workers,
        "cores": len(cores) if cores else len(os.sched_getaffinity(0)),
        "cold_rps": len(cold) / wall,
        "cold_p50_ms": percentile(latencies, 50) * 1e3,
        "cold_p99_ms": percentile(latencies, 99) * 1e3,
        # Cores the server kept busy: near the cores it has, no process count can add throughput.
        "cold_server_cores_busy": cold_cpu / wall,
        "hot_requests": len(stream),
        "hot_distinct": len(set(stream)),
        "hot_decoded": decoded,
        "hot_hit_rate": 1 - decoded / len(stream),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--requests", type=int, default=160, help="cold requests")
    parser.add_argument("--hot-requests", type=int, default=300)
    parser.add_argument("--pool", type=int, default=40, help="distinct images of the hot stream")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--cache-gb", type=float, default=0.0, help="--mm-processor-cache-gb (0: the default)"
    )
    parser.add_argument(
        "--layout-from-headers",
        action="store_true",
        help="let the server answer from the images' headers (nothing decoded: the routing "
        "path); by default it decodes and processes every cold image",
    )
    parser.add_argument("--json", type=Path)
    _charts.add_chart_argument(parser)
    args = parser.parse_args()
    first_core = {min(os.sched_getaffinity(0))}
    rows = [
        asyncio.run(measure_one(1, first_core, args)),  # what one core gives
        asyncio.run(measure_one(1, None, args)),
        asyncio.run(measure_one(args.workers, None, args)),
    ]
    pinned, one, many = rows
    print(
        f"{'workers':>7} {'cores':>5} {'cold req/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'busy cores':>10} {'hot hit rate':>12}"
    )
    for row in rows:
        print(
            f"{row['workers']:>7} {row['cores']:>5} {row['cold_rps']:>10.1f} {row['cold_p50_ms']:>8.1f} "
            f"{row['cold_p99_ms']:>8.1f} {row['cold_server_cores_busy']:>10.2f} "
            f"{row['hot_hit_rate']:>12.3f} "
            f"({row['hot_decoded']:.0f} decoded of {row['hot_requests']}, "
            f"{row['hot_distinct']} distinct)"
        )
    print(
        f"cold throughput, {many['workers']} workers over 1 worker on the same cores: "
        f"{many['cold_rps'] / one['cold_rps']:.2f}x; over 1 worker on one core: "
        f"{many['cold_rps'] / pinned['cold_rps']:.2f}x"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.chart:
        _charts.grouped_bars(
            args.chart,
            title="mediaref serve: cold 1080p JPEG requests/s by --workers (2 cores)",
            groups=[f"{row['workers']} worker(s), {row['cores']} core(s)" for row in rows],
            series={"cold requests/s": [row["cold_rps"] for row in rows]},
            ylabel="requests/s",
            ratios=[row["cold_rps"] / pinned["cold_rps"] for row in rows],
            ratio_caption="labels: over one worker on one core",
            footnote=_charts.machine_note(),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
