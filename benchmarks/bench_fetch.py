"""Fetch overhead: MediaConnector against the bare alternative, side by side in one run.

    python benchmarks/bench_fetch.py [--concurrency 200] [--rounds 7] [--kib 256] [--origin-mbps 0]

http: ``--concurrency`` concurrent fetches of one ``--kib`` KiB JPEG from an aiohttp server on
127.0.0.1 (in its own process; ``--origin-mbps`` paces its uplink, as a remote origin's network
would), timed per round, median of ``--rounds``:
  bare aiohttp   one shared ClientSession, ``await response.read()``
  bare + key     the same, then ``derive_media_key`` on the media pool: the least any fetch that
                 returns a MediaRef must do
  connector/raw  ``fetch_image_async`` with a decoder that only derives the key (sha256)
  connector/img  ``fetch_image_async`` with ``ImageMediaIO`` (key + eager header parse, no pixels)
Both connector runs include the per-hop policy checks, the streamed size cap and building the
ref on the media pool. The overhead target is <= 1.2x bare. Each row also gives the client
process's CPU time per batch (all its threads) and CPU/wall: when the bare GET alone keeps the
client at ~100% of a core and the origin takes much of another, as on a 2-core machine, the key's
sha256 (linear in the bytes) cannot hide behind the transfer and shows up in wall time.

data: one ``data:`` URL of the same JPEG, fetched synchronously ``--rounds`` x 50 times:
  bare base64    ``pybase64.b64decode(text, validate=True)``
  bare + key     the same, then ``derive_media_key``
  connector/raw  ``fetch_image`` with the key-only decoder
  connector/img  ``fetch_image`` with ``ImageMediaIO``
"""

from __future__ import annotations

import argparse
import asyncio
import io
import multiprocessing
import multiprocessing.connection
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import ClassVar

import aiohttp
import numpy as np
import pybase64
from aiohttp import web
from PIL import Image

from mediaref.media.base import DecodeSpec, MediaIO, derive_media_key
from mediaref.media.connector import MediaConnector
from mediaref.media.executor import get_media_executor
from mediaref.media.image import ImageMediaIO


class KeyOnlyIO(MediaIO[bytes]):
    """Transport cost plus key derivation, with no image work at all."""

    modality: ClassVar[str] = "image"
    _spec = DecodeSpec(modality="image", decoder="raw")  # built once, as real decoders do

    def load_bytes(self, data: bytes) -> bytes:
        return data

    def get_decode_spec(self) -> DecodeSpec:
        return self._spec


def make_jpeg(kib: int) -> bytes:
    """Random-ish pixels compress poorly, so the JPEG size tracks the requested size."""
    rng = np.random.default_rng(0)
    side = 64
    while True:
        pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        if buffer.tell() >= kib * 1024:
            return buffer.getvalue()
        side = int(side * 1.25)


_PACED_CHUNK_BYTES = 64 * 1024


class _Link:
    """The origin's uplink when paced: one fixed bandwidth shared by every response."""

    def __init__(self, megabits_per_s: float) -> None:
        self._bytes_per_s = megabits_per_s * 1e6 / 8
        self._free_at = 0.0

    async def send(self, size: int) -> None:
        """Wait until ``size`` more bytes would have left the link."""
        now = asyncio.get_running_loop().time()
        self._free_at = max(now, self._free_at) + size / self._bytes_per_s
        await asyncio.sleep(self._free_at - now)


def _serve(
    payload: bytes, megabits_per_s: float, ports: multiprocessing.connection.Connection
) -> None:
    link = _Link(megabits_per_s) if megabits_per_s > 0 else None

    async def handler(request: web.Request) -> web.StreamResponse:
        if link is None:
            return web.Response(body=payload, content_type="image/jpeg")
        response = web.StreamResponse(headers={"Content-Type": "image/jpeg"})
        response.content_length = len(payload)
        await response.prepare(request)
        for start in range(0, len(payload), _PACED_CHUNK_BYTES):
            chunk = payload[start : start + _PACED_CHUNK_BYTES]
            await link.send(len(chunk))
            await response.write(chunk)
        await response.write_eof()
        return response

    async def run() -> None:
        app = web.Application()
        app.router.add_get("/image.jpg", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        ports.send(runner.addresses[0][1])
        await asyncio.Event().wait()  # until terminated

    asyncio.run(run())


class Server:
    """The origin, in its own process so it does not compete with the client for the GIL."""

    def __init__(self, payload: bytes, megabits_per_s: float = 0.0) -> None:
        receive, send = multiprocessing.Pipe(duplex=False)
        self._receive = receive
        self._process = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(payload, megabits_per_s, send), daemon=True
        )
        self.port = 0

    def __enter__(self) -> Server:
        self._process.start()
        if not self._receive.poll(60):
            raise RuntimeError("benchmark server did not start")
        self.port = self._receive.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        self._process.terminate()
        self._process.join(10)


async def time_concurrent(
    fetch_one: Callable[[], Awaitable[object]], concurrency: int
) -> tuple[float, float]:
    """(wall seconds, client CPU seconds: every thread of this process) for one batch."""
    start, cpu_start = time.perf_counter(), time.process_time()
    await asyncio.gather(*(fetch_one() for _ in range(concurrency)))
    return time.perf_counter() - start, time.process_time() - cpu_start


async def bench_http(
    url: str, concurrency: int, rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    connector = MediaConnector(allow_private_ips=True)
    key_only, image_io = KeyOnlyIO(), ImageMediaIO()
    async with aiohttp.ClientSession() as session:

        async def bare() -> bytes:
            async with session.get(url) as response:
                return await response.read()

        async def bare_and_key() -> bytes:
            # The least any ref-producing fetch must do: the GET, then the sha256 key off-loop.
            data = await bare()
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(get_media_executor(), derive_media_key, data, spec)

        spec = key_only.get_decode_spec()
        candidates: dict[str, Callable[[], Awaitable[object]]] = {
            "bare aiohttp": bare,
            "bare + key": bare_and_key,
            "connector/raw": lambda: connector.fetch_image_async(url, key_only),
            "connector/img": lambda: connector.fetch_image_async(url, image_io),
        }
        for fetch in candidates.values():  # warm up connections, pools and imports
            await time_concurrent(fetch, concurrency)
        walls: dict[str, list[float]] = {name: [] for name in candidates}
        cpus: dict[str, list[float]] = {name: [] for name in candidates}
        for _ in range(rounds):  # interleaved, so drift hits every candidate alike
            for name, fetch in candidates.items():
                wall, cpu = await time_concurrent(fetch, concurrency)
                walls[name].append(wall)
                cpus[name].append(cpu)
    return (
        {name: statistics.median(times) for name, times in walls.items()},
        {name: statistics.median(times) for name, times in cpus.items()},
    )


def bench_data(payload: bytes, rounds: int, per_round: int = 50) -> dict[str, float]:
    text = pybase64.b64encode(payload).decode("ascii")
    url = "data:image/jpeg;base64," + text
    connector = MediaConnector()
    key_only, image_io = KeyOnlyIO(), ImageMediaIO()
    spec = key_only.get_decode_spec()
    candidates: dict[str, Callable[[], object]] = {
        "bare base64": lambda: pybase64.b64decode(text, validate=True),
        "bare + key": lambda: derive_media_key(pybase64.b64decode(text, validate=True), spec),
        "connector/raw": lambda: connector.fetch_image(url, key_only),
        "connector/img": lambda: connector.fetch_image(url, image_io),
    }
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, call in candidates.items():
            start = time.perf_counter()
            for _ in range(per_round):
                call()
            samples[name].append((time.perf_counter() - start) / per_round)
    return {name: statistics.median(times) for name, times in samples.items()}


def report(
    title: str,
    medians: dict[str, float],
    baseline: str,
    unit: str,
    scale: float,
    cpu: dict[str, float] | None = None,
) -> None:
    cpu_header = f"  {'client CPU':>10}  {'CPU/wall':>8}" if cpu else ""
    print(f"{title}\n  {'':<14} {'time':>9}      {'vs bare':>7}  {'vs bare + key':>13}{cpu_header}")
    for name, seconds in medians.items():
        cpu_cells = f"  {cpu[name] * scale:7.2f} {unit}  {cpu[name] / seconds:7.0%}" if cpu else ""
        print(
            f"  {name:<14} {seconds * scale:9.2f} {unit}   {seconds / medians[baseline]:6.2f}x"
            f"  {seconds / medians['bare + key']:12.2f}x{cpu_cells}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--kib", type=int, default=256)
    parser.add_argument(
        "--origin-mbps",
        type=float,
        default=0.0,
        help="pace the origin's uplink to this many Mbit/s, shared by all responses (default 0:"
        " unpaced loopback, where the client's CPU is the limit)",
    )
    args = parser.parse_args()

    payload = make_jpeg(args.kib)
    kib = len(payload) / 1024
    origin = f"origin paced to {args.origin_mbps:g} Mbit/s" if args.origin_mbps > 0 else "unpaced"
    print(
        f"payload: {kib:.0f} KiB JPEG; concurrency {args.concurrency}; rounds {args.rounds};"
        f" {origin}"
    )
    with Server(payload, args.origin_mbps) as server:
        url = f"http://127.0.0.1:{server.port}/image.jpg"
        http, http_cpu = asyncio.run(bench_http(url, args.concurrency, args.rounds))
    report(
        f"http: {args.concurrency} concurrent fetches (median per batch; {os.cpu_count()} CPUs)",
        http,
        "bare aiohttp",
        "ms",
        1e3,
        http_cpu,
    )
    if http_cpu["bare aiohttp"] > 0.9 * http["bare aiohttp"]:
        print(
            "  note: the bare GET keeps this process's CPU busy for its whole batch (CPU/wall"
            " near 100%),\n  so work added per byte (the sha256 key) adds wall time unless a"
            " spare core absorbs it."
        )
    data = bench_data(payload, args.rounds)
    report("data: one fetch (median)", data, "bare base64", "us", 1e6)


if __name__ == "__main__":
    main()
