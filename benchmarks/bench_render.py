"""Render-server throughput and latency: mediaref's lazy path vs the eager baseline, hot and cold.

Starts ``mediaref serve`` as a subprocess, pinned to ONE core (the load generator runs on the
other cores), and a loopback media origin serving 1080p JPEGs made from scikit-image's photos.
Each workload is ``--requests`` chat requests with one ``image_url`` each, ``--concurrency`` in
flight, timed at the client (request sent to response read):

- **hot**: 80% of the requests repeat one of ``--pool`` images (each requested once beforehand,
  so those are processor-cache hits), 20% are unique (misses);
- **cold**: every image unique.

Both run against the lazy server (mediaref: the image is keyed from its bytes, decoded only on a
miss) and then the eager one (``--eager-media``, vLLM 0.33's way: decoded at fetch, hashed over
its pixels, hit or not), in the same run. Prints requests/s and p50/p95/p99 per workload and
server, and the one-core line for the hot workload.

    python benchmarks/bench_render.py [--requests 200] [--concurrency 8] [--pool 8]
        [--payload none|tensors] [--json out.json] [--chart PATH] [--replot out.json]

``--payload tensors`` makes each response carry the processed tensors base64-encoded (a 1080p
image's are ~5 MB of JSON), as a render server feeding an engine does; ``none`` sends names,
dtypes and shapes only and so measures the rendering itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import numpy as np
from tqdm import tqdm

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(_TESTS / "security"), str(_TESTS)]

import _charts  # noqa: E402
from _bench_media import PHOTO_NAMES, encode_image, load_photo, photo_variant  # noqa: E402
from _fault_mix import FaultOrigin  # type: ignore[import-not-found]  # noqa: E402

HIT_FRACTION = 0.8
STARTUP_S = 180.0


class Server:
    """``python -m mediaref serve`` on a free port, pinned to ``core``."""

    def __init__(self, core: int | None, *extra: str) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mediaref",
                "serve",
                "--port",
                "0",
                "--allowed-media-domains",
                "127.0.0.1",
                "--media-url-allow-private-ips",
                *extra,
            ],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
            preexec_fn=(lambda: os.sched_setaffinity(0, {core})) if core is not None else None,
        )
        assert self.process.stderr is not None
        line = self.process.stderr.readline()
        match = re.search(r"listening on (http://\S+)", line)
        if match is None:
            raise SystemExit(f"the server did not start: {line}{self.process.stderr.read()}")
        self.url = match.group(1)
        # Keep draining stderr so the server never blocks on a full pipe.
        threading.Thread(target=self.process.stderr.read, daemon=True).start()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def body_for(url: str, payload: str) -> bytes:
    part = {"type": "image_url", "image_url": {"url": url}}
    content = [part, {"type": "text", "text": "What is in this image?"}]
    return json.dumps(
        {"messages": [{"role": "user", "content": content}], "mm_payload": payload}
    ).encode()


class Media:
    """1080p JPEG variants of the photos, served by a loopback origin, one fresh URL on demand."""

    def __init__(self, origin: FaultOrigin, seed: int = 0) -> None:
        self.origin = origin
        self.rng = np.random.default_rng(seed)
        self.photos = [load_photo(name) for name in PHOTO_NAMES]
        self.count = 0

    def fresh_url(self) -> str:
        photo = self.photos[self.count % len(self.photos)]
        data = encode_image(photo_variant(photo, self.rng), "JPEG", quality=90)
        self.count += 1
        return self.origin.add(f"img-{self.count}.jpg", data, "image/jpeg")


def workload(media: Media, name: str, requests: int, pool: list[str]) -> list[str]:
    rng = random.Random(requests)
    if name == "cold":
        return [media.fresh_url() for _ in range(requests)]
    return [
        rng.choice(pool) if rng.random() < HIT_FRACTION else media.fresh_url()
        for _ in range(requests)
    ]


async def drain(response: aiohttp.ClientResponse) -> int:
    """Read a response body to its end and keep none of it: the bytes read. A hot response is
    ~17 MB; ``read()`` would join its chunks into one more copy on the load generator's core,
    which then bounds the run before the server does."""
    size = 0
    while True:
        chunk, _ = await response.content.readchunk()
        if not chunk:
            return size
        size += len(chunk)


async def drive(
    url: str, bodies: list[bytes], concurrency: int, label: str
) -> tuple[float, list[float]]:
    """Send ``bodies`` with ``concurrency`` in flight; (wall seconds, per-request latencies)."""
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=600)
    ) as session:
        with tqdm(total=len(bodies), desc=label, unit="req", leave=False) as bar:

            async def one(body: bytes) -> None:
                async with gate:
                    start = time.perf_counter()
                    async with session.post(
                        url + "/v1/chat/completions/render",
                        data=body,
                        headers={"Content-Type": "application/json"},
                    ) as response:
                        if response.status != 200:
                            raise SystemExit(f"{response.status}: {await response.text()}")
                        await drain(response)
                    latencies.append(time.perf_counter() - start)
                    bar.update()

            start = time.perf_counter()
            await asyncio.gather(*map(one, bodies))
            return time.perf_counter() - start, latencies


def summary(wall: float, latencies: list[float]) -> dict[str, float]:
    ordered = np.asarray(sorted(latencies))
    return {
        "requests_per_s": len(latencies) / wall,
        "p50_s": float(np.percentile(ordered, 50)),
        "p95_s": float(np.percentile(ordered, 95)),
        "p99_s": float(np.percentile(ordered, 99)),
    }


def pin_cores() -> tuple[int | None, set[int] | None]:
    """One core for the server, the others for this process (None: nothing to pin)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None, None
    return cores[0], set(cores[1:])


async def measure(args: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    server_core, client_cores = pin_cores()
    if client_cores is not None:
        os.sched_setaffinity(0, client_cores)
    results: dict[str, dict[str, dict[str, float]]] = {}
    with FaultOrigin() as origin:
        media = Media(origin)
        for mode, extra in (("lazy", ()), ("eager", ("--eager-media",))):
            # Every miss decoded and processed on both: with ``--payload none`` the lazy server
            # would otherwise answer Qwen2-VL's JPEGs from their headers (docs/serving.md,
            # *Rendering for routing*), which is not what this compares.
            server = Server(server_core, "--no-layout-from-headers", *extra)
            try:
                pool = [media.fresh_url() for _ in range(args.pool)]
                # Warm-up: each pool image once (the hot workload's hits), and a few misses.
                warm = [
                    body_for(u, args.payload) for u in pool + [media.fresh_url() for _ in range(4)]
                ]
                await drive(server.url, warm, args.concurrency, f"{mode} warm-up")
                results[mode] = {}
                for name in ("hot", "cold"):
                    urls = workload(media, name, args.requests, pool)
                    bodies = [body_for(u, args.payload) for u in urls]
                    wall, latencies = await drive(
                        server.url, bodies, args.concurrency, f"{mode} {name}"
                    )
                    results[mode][name] = summary(wall, latencies)
            finally:
                server.stop()
    return results


def report(results: dict[str, dict[str, dict[str, float]]], args: argparse.Namespace) -> None:
    fmt = _charts.format_seconds
    print(
        f"{args.requests} requests per workload, {args.concurrency} in flight, "
        f"1080p JPEG, payload={args.payload}; server on one core"
    )
    print(f"{'workload':<8} {'server':<6} {'req/s':>8} {'p50':>9} {'p95':>9} {'p99':>9}")
    for name in ("hot", "cold"):
        for mode in ("lazy", "eager"):
            r = results[mode][name]
            print(
                f"{name:<8} {mode:<6} {r['requests_per_s']:8.1f} {fmt(r['p50_s']):>9} "
                f"{fmt(r['p95_s']):>9} {fmt(r['p99_s']):>9}"
            )
        ratio = results["lazy"][name]["requests_per_s"] / results["eager"][name]["requests_per_s"]
        print(f"{'':<8} lazy/eager throughput: {ratio:.2f}x")
    hot = results["lazy"]["hot"]["requests_per_s"]
    print(
        f"one core sustains {hot:.0f} render requests/s for 1080p JPEG chat requests at "
        f"{HIT_FRACTION:.0%} hits (payload={args.payload})"
    )


def chart(results: dict[str, dict[str, dict[str, float]]], path: Path, command: str | None) -> None:
    groups, lazy, eager = [], [], []
    for name in ("hot", "cold"):
        for stat in ("p50", "p99"):
            groups.append(f"{name} {stat}")
            lazy.append(results["lazy"][name][f"{stat}_s"])
            eager.append(results["eager"][name][f"{stat}_s"])
    throughput = {
        name: results["lazy"][name]["requests_per_s"] / results["eager"][name]["requests_per_s"]
        for name in ("hot", "cold")
    }
    _charts.grouped_bars(
        path,
        title="Render server latency, 1080p JPEG chat requests, server on one core",
        groups=groups,
        series={"mediaref (lazy)": lazy, "eager (decode at fetch, hash pixels)": eager},
        ylabel="latency per request",
        seconds=True,
        ratio_caption=f"eager / mediaref latency; throughput mediaref / eager: "
        f"hot (80% hits) {throughput['hot']:.2f}x, cold {throughput['cold']:.2f}x",
        footnote=_charts.machine_note(command),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--pool", type=int, default=8, help="distinct images the hits repeat")
    parser.add_argument("--payload", choices=("none", "tensors"), default="none")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--replot",
        type=Path,
        metavar="JSON",
        help="report and draw a --json file, measuring nothing",
    )
    _charts.add_chart_argument(parser)
    args = parser.parse_args()
    if args.replot:
        results = json.loads(args.replot.read_text())
    else:
        results = asyncio.run(measure(args))
    report(results, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.chart:
        # A replot names the command that measured the figures, not itself.
        chart(results, args.chart, "python benchmarks/bench_render.py" if args.replot else None)


if __name__ == "__main__":
    main()
