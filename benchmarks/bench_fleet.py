"""A fleet of render servers: the hit rate with one Redis cache under them, and without.

Three parts, in one run:

1. **Hit rate.** ``--replicas`` ``mediaref serve`` processes (on this machine) behind client-side
   round-robin, driven by a Zipf(``--zipf``) stream of ``--requests`` chat requests over
   ``--images`` distinct 1080p JPEGs (``data:`` URLs, ``mm_payload: "none"`` so the client stays
   light; ``--no-layout-from-headers`` so each miss is decoded and processed). Three fleets see
   the same stream: one process holding everything (the ceiling), the
   replicas with a Redis server of this run's own under them (``--cache-redis-url``), and the
   replicas alone. A request's item is a miss exactly when some replica decodes it, so the
   fleet's hit rate is ``1 - decoded / requests`` (``mediaref_decodes_total``, summed).
2. **Latency of a hit**, in process: one 1080p JPEG through the processor as a local hit, as an
   L2 hit (its local cache emptied, over a warm Redis), and as a miss; p50/p99 and the bytes read.
3. **Faults** under the Redis fleet: the stream again while Redis is stopped mid-run (then
   restarted), while it sleeps (``DEBUG SLEEP``), and while it is full (``maxmemory`` 8 MB,
   evicting): good requests lost (target 0) and the p99 of each phase.

    python benchmarks/bench_fleet.py [--replicas 3] [--requests 600] [--images 500] [--zipf 1.1]
        [--json out.json] [--chart PATH]

Needs ``redis-server`` on the PATH (it starts its own, on a free port, keeping nothing on disk).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

import _charts
from _bench_media import PHOTO_NAMES, encode_image, load_photo, photo_variant
from bench_render_vs_vllm import RenderServer, _free_port

SECRET = "bench-fleet-secret-0123456789abcdef"


class OwnRedis:
    """``redis-server`` on a free port, nothing on disk; stoppable and restartable."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("bench_fleet needs redis-server (apt install redis-server)")
        command = [binary, "--port", str(self.port), "--save", "", "--appendonly", "no"]
        command += ["--enable-debug-command", "yes"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        import redis

        for _ in range(200):
            try:
                redis.Redis.from_url(self.url, socket_timeout=1).ping()
                return
            except redis.RedisError:
                time.sleep(0.02)
        raise SystemExit("redis-server did not start")

    def command(self, *args: str) -> Any:
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=10).execute_command(*args)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


def chat_body(jpeg: bytes) -> bytes:
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Hi"}]
    body = {"messages": [{"role": "user", "content": content}], "mm_payload": "none"}
    return json.dumps(body).encode()


def zipf_stream(images: int, requests: int, exponent: float, seed: int) -> list[int]:
    """``requests`` draws over ``images`` ranks with P(rank k) proportional to 1 / k**exponent."""
    ranks = np.arange(1, images + 1, dtype=np.float64)
    weights = ranks**-exponent
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.choice(images, size=requests, p=weights / weights.sum())]


async def send_stream(
    urls: list[str], bodies: list[bytes], stream: list[int], in_flight: int
) -> tuple[list[float], int]:
    """Round-robin over ``urls``; (latencies of the answered requests, requests lost)."""
    gate = asyncio.Semaphore(in_flight)
    latencies: list[float] = []
    lost = 0
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(index: int, image: int) -> None:
            nonlocal lost
            async with gate:
                start = time.perf_counter()
                try:
                    async with session.post(
                        urls[index % len(urls)] + "/v1/chat/completions/render",
                        data=bodies[image],
                        headers={"Content-Type": "application/json"},
                    ) as response:
                        await response.read()
                        if response.status != 200:
                            lost += 1
                            return
                except aiohttp.ClientError:
                    lost += 1
                    return
                latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(one(i, image) for i, image in enumerate(stream)))
    return latencies, lost


def scraped(url: str) -> dict[str, float]:
    """Images decoded (``decoded``) and the Redis cache's counters, from a replica's /metrics."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    found = {"decoded": 0.0}
    match = re.search(r'^mediaref_decodes_total\{modality="image"\} (\S+)$', text, re.M)
    if match:
        found["decoded"] = float(match.group(1))
    for event, value in re.findall(r"^mediaref_l2_cache_(\w+)_total\{[^}]*\} (\S+)$", text, re.M):
        found[f"l2_{event}"] = found.get(f"l2_{event}", 0.0) + float(value)
    return found


def _p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


EVERY_MISS_DECODES = ("--no-layout-from-headers",)
"""Replica flags: a routing request (``mm_payload: "none"``) of JPEGs is otherwise answered from
their headers, nothing decoded or cached (docs/serving.md), and this benchmark counts misses as
decodes."""


async def hit_rates(
    args: argparse.Namespace, bodies: list[bytes], redis_url: str
) -> dict[str, Any]:
    stream = zipf_stream(len(bodies), args.requests, args.zipf, seed=7)
    cores = set(os.sched_getaffinity(0))
    fleets = {
        "one process": (1, EVERY_MISS_DECODES),
        f"{args.replicas} replicas + Redis": (
            args.replicas,
            (*EVERY_MISS_DECODES, "--cache-redis-url", redis_url),
        ),
        f"{args.replicas} replicas alone": (args.replicas, EVERY_MISS_DECODES),
    }
    results: dict[str, Any] = {}
    for name, (count, extra) in fleets.items():
        servers = [RenderServer("mediaref", cores, "", *extra) for _ in range(count)]
        try:
            latencies, lost = await send_stream(
                [s.url for s in servers], bodies, stream, args.in_flight
            )
            counts: dict[str, float] = {}
            for server in servers:
                for key, value in scraped(server.url).items():
                    counts[key] = counts.get(key, 0.0) + value
        finally:
            for server in servers:
                server.stop()
        results[name] = {
            "hit_rate": 1 - counts["decoded"] / len(stream),
            "counters": counts,
            "lost": lost,
            "p50_s": _p(latencies, 50),
            "p99_s": _p(latencies, 99),
        }
        print(
            f"  {name}: hit rate {results[name]['hit_rate']:.1%}, lost {lost}, {counts}", flush=True
        )
    distinct = len(set(stream))
    results["ideal"] = {"hit_rate": 1 - distinct / len(stream)}
    return results


def hit_latencies(jpeg: bytes, redis_url: str, repeat: int) -> dict[str, Any]:
    """One image through the processor as a local hit, an L2 hit and a miss (in process)."""
    from mediaref.cache import MultiModalProcessorOnlyCache
    from mediaref.cache.redis_l2 import RedisL2Settings, RedisL2Store, RedisLayeredProcessorCache
    from mediaref.media.image import ImageMediaIO
    from mediaref.models.builtin import builtin_model_path
    from mediaref.processing.context import ModelConfig
    from mediaref.processing.stored_updates import PROMPT_UPDATES_JSON
    from mediaref.registry import MULTIMODAL_REGISTRY

    config = ModelConfig(model=str(builtin_model_path("qwen2_vl")))
    prompt = "<|vision_start|><|image_pad|><|vision_end|>Hi"
    settings = RedisL2Settings(url=redis_url, secret=SECRET.encode(), namespace="latency")
    store = RedisL2Store(settings)

    def processor(cache: Any) -> Any:
        return MULTIMODAL_REGISTRY.create_processor(config, cache=cache)

    def layered() -> RedisLayeredProcessorCache:
        return RedisLayeredProcessorCache(
            MultiModalProcessorOnlyCache(config), store, PROMPT_UPDATES_JSON
        )

    def run(proc: Any) -> float:
        ref = ImageMediaIO().load_bytes_ref(jpeg)
        start = time.perf_counter()
        proc.apply(proc.build_inputs(prompt, {"image": [ref]}))
        return time.perf_counter() - start

    # One processor each, its local cache emptied before an L2 hit or a miss: a fresh processor
    # would add its own first-call setup (~8 ms here) to those and not to a local hit.
    warm = processor(layered())
    run(warm)  # the miss that writes the entry
    store.flush()
    over_redis = layered()
    from_redis = processor(over_redis)
    plain = MultiModalProcessorOnlyCache(config)
    cold = processor(plain)
    run(from_redis), run(cold)  # each processor's first call, off the books
    timings: dict[str, list[float]] = {"local hit": [], "L2 hit": [], "miss": []}
    for _ in range(repeat):
        timings["local hit"].append(run(warm))
        over_redis.local.clear_cache()
        timings["L2 hit"].append(run(from_redis))
        plain.clear_cache()
        timings["miss"].append(run(cold))
    read = store.stats["bytes_read"] / max(1, store.stats["hits"])
    store.close()
    return {name: {"p50_s": _p(v, 50), "p99_s": _p(v, 99)} for name, v in timings.items()} | {
        "bytes_per_l2_hit": read
    }


async def faults(args: argparse.Namespace, bodies: list[bytes], redis: OwnRedis) -> dict[str, Any]:
    cores = set(os.sched_getaffinity(0))
    stream = zipf_stream(len(bodies), args.requests // 2, args.zipf, seed=11)
    extra = (*EVERY_MISS_DECODES, "--cache-redis-url", redis.url)
    servers = [RenderServer("mediaref", cores, "", *extra) for _ in range(args.replicas)]
    urls = [s.url for s in servers]
    results: dict[str, Any] = {}

    async def phase(name: str, during: Any = None) -> None:
        task = asyncio.get_running_loop().run_in_executor(None, during) if during else None
        latencies, lost = await send_stream(urls, bodies, stream, args.in_flight)
        if task is not None:
            await task
        results[name] = {"lost": lost, "p50_s": _p(latencies, 50), "p99_s": _p(latencies, 99)}
        print(f"  fault {name}: lost {lost}, p99 {results[name]['p99_s'] * 1e3:.0f} ms", flush=True)

    def stop_then_restart() -> None:
        time.sleep(1.0)
        redis.stop()
        time.sleep(3.0)
        redis.start()

    try:
        await phase("healthy")
        await phase("killed, restarted", stop_then_restart)
        await phase(
            "slow (DEBUG SLEEP 3)", lambda: (time.sleep(0.5), redis.command("DEBUG", "SLEEP", "3"))
        )
        redis.command("CONFIG", "SET", "maxmemory", "8mb")
        redis.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        await phase("full (maxmemory 8 MB)")
    finally:
        for server in servers:
            server.stop()
    return results


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    os.environ["MEDIAREF_CACHE_REDIS_SECRET"] = SECRET  # the replicas inherit it
    rng = np.random.default_rng(3)
    photos = [load_photo(name) for name in PHOTO_NAMES]
    jpegs = [
        encode_image(photo_variant(photos[i % len(photos)], rng), "JPEG", quality=90)
        for i in range(args.images)
    ]
    bodies = [chat_body(jpeg) for jpeg in jpegs]
    redis = OwnRedis()
    redis.start()
    try:
        print("hit rates", flush=True)
        results: dict[str, Any] = {"hit_rate": await hit_rates(args, bodies, redis.url)}
        print("hit latencies", flush=True)
        results["latency"] = hit_latencies(jpegs[0], redis.url, args.repeat)
        print("faults", flush=True)
        results["faults"] = await faults(args, bodies, redis)
    finally:
        redis.stop()
    return results


def report(results: dict[str, Any]) -> None:
    fmt = _charts.format_seconds
    print(f"\n{'fleet':<24} {'hit rate':>9} {'lost':>5} {'p50':>9} {'p99':>9}")
    for name, row in results["hit_rate"].items():
        if name == "ideal":
            continue
        print(
            f"{name:<24} {row['hit_rate']:9.1%} {row['lost']:5d} {fmt(row['p50_s']):>9} "
            f"{fmt(row['p99_s']):>9}"
        )
    print(f"{'(every repeat a hit)':<24} {results['hit_rate']['ideal']['hit_rate']:9.1%}")
    print(f"\n{'one 1080p JPEG':<24} {'p50':>9} {'p99':>9}")
    for name, row in results["latency"].items():
        if isinstance(row, dict):
            print(f"{name:<24} {fmt(row['p50_s']):>9} {fmt(row['p99_s']):>9}")
    print(f"bytes read per L2 hit: {results['latency']['bytes_per_l2_hit'] / 2**20:.1f} MiB")
    print(f"\n{'fault (Redis fleet)':<24} {'lost':>5} {'p50':>9} {'p99':>9}")
    for name, row in results["faults"].items():
        print(f"{name:<24} {row['lost']:5d} {fmt(row['p50_s']):>9} {fmt(row['p99_s']):>9}")


def chart(results: dict[str, Any], path: Path) -> None:
    fleets = [name for name in results["hit_rate"] if name != "ideal"]
    _charts.grouped_bars(
        path,
        title="A fleet's hit rate on a Zipf stream of 1080p JPEG chat requests",
        groups=fleets,
        series={"hit rate": [results["hit_rate"][n]["hit_rate"] * 100 for n in fleets]},
        ylabel="hit rate (%)",
        ratios=[f"{results['hit_rate'][n]['hit_rate']:.1%}" for n in fleets],
        ratio_caption="share of requests whose image no replica had to decode",
        footnote=_charts.machine_note(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=15, help="hit-latency samples")
    parser.add_argument("--json", type=Path)
    _charts.add_chart_argument(parser)
    args = parser.parse_args()
    results = asyncio.run(measure(args))
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.chart:
        chart(results, args.chart)


if __name__ == "__main__":
    main()
