"""Hostile clients of a render server, and the good traffic beside them: the standing attack mix.

Shared by ``tests/security/test_serve_under_attack.py`` (behaviour: every good request succeeds,
``/health`` answers, nothing leaks) and ``benchmarks/bench_serve_attacks.py`` (the good requests'
latency with and without each attack). Each attacker is a coroutine that keeps attacking until its
``stop`` event is set, from a source address of its own (127.0.0.x: a client of its own to the
server), and counts what it got back; none of them ever raises.

==================  ===========================================================================
``slow_bodies``     connections that send a request's headers, then one byte of body at a time
``header_dribble``  connections that send a request line, then a header byte at a time
``stalling_origin`` chat requests of 32 image URLs each to an origin that never answers
``long_text``       chat requests of megabytes of text, and of text just under the char bound
``deep_json``       bodies nested thousands deep, and ``chat_template_kwargs`` 900 deep
``wide_json``       a body of 1.5 M keys (23 MB)
``bad_types``       ``tools: [1,2,3]``, ``temperature: Infinity``, ``n: 1e9``, 5,000-digit ints,
                    1x5000 images, placeholder tokens in text
``connections``     as many idle connections as the server lets one client hold
==================  ===========================================================================

Each runs at a level (connections held, or requests in flight): ``FLOOD``, as hard as one client
can push it alone, or ``MIX``, the standing mix's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
from aiohttp import web
from PIL import Image

CHAT = "/v1/chat/completions/render"
HEALTH = "/health"
GOOD_SOURCE = "127.0.0.10"
HEALTH_SOURCE = "127.0.0.11"
_TIMEOUT = aiohttp.ClientTimeout(total=120)


def jpeg_url(seed: int, size: tuple[int, int] = (96, 72)) -> str:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()


def png_url(width: int, height: int) -> str:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (90, 30, 9)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def chat(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": list(parts)}], "mm_payload": "none", **fields}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def good_requests(count: int) -> list[bytes]:
    """The good traffic: small images (a few repeated, most unique) and text, as JSON bodies."""
    bodies = []
    for index in range(count):
        if index % 4 == 3:
            body = chat(text(f"Write a haiku about the number {index}."))
        else:
            seed = index % 8 if index % 2 else 1000 + index  # half repeats, half unique
            body = chat(image(jpeg_url(seed)), text("What is in this image?"))
        bodies.append(json.dumps(body).encode())
    return bodies


def session_from(source: str, limit: int = 100) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(local_addr=(source, 0), limit=limit, force_close=True)
    return aiohttp.ClientSession(connector=connector, timeout=_TIMEOUT)


@dataclass
class GoodRun:
    """What the good client saw: each request's status and latency."""

    statuses: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) if self.latencies else float("nan")


async def run_good_traffic(url: str, bodies: list[bytes], concurrency: int) -> GoodRun:
    """Send ``bodies`` from the good client, ``concurrency`` at a time."""
    run = GoodRun()
    gate = asyncio.Semaphore(concurrency)
    async with session_from(GOOD_SOURCE, limit=concurrency) as session:

        async def one(body: bytes) -> None:
            async with gate:
                start = time.perf_counter()
                try:
                    async with session.post(
                        url + CHAT, data=body, headers={"Content-Type": "application/json"}
                    ) as response:
                        await response.read()
                        status = response.status
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    status = 0
                run.latencies.append(time.perf_counter() - start)
                run.statuses.append(status)

        await asyncio.gather(*(one(body) for body in bodies))
    return run


async def poll_health(url: str, stop: asyncio.Event, seen: list[tuple[int, float]]) -> None:
    """``/health`` every 50 ms from a client of its own: (status, seconds) each time."""
    async with session_from(HEALTH_SOURCE, limit=1) as session:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                async with session.get(url + HEALTH) as response:
                    status = response.status
            except (aiohttp.ClientError, asyncio.TimeoutError):
                status = 0
            seen.append((status, time.perf_counter() - start))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)


# -- attackers ---------------------------------------------------------------------------------


@dataclass
class Attack:
    """One attacker's target, its own client address, and what came back (by status)."""

    url: str
    source: str
    stop: asyncio.Event
    level: int
    """How hard: connections held, or requests in flight (see ``FLOOD`` and ``MIX``)."""
    stall_url: str = ""
    """The stalling origin's URL, for ``stalling_origin``."""
    outcomes: Counter[str] = field(default_factory=Counter)

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").split(":")
        return host, int(port)

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = self.host_port
        return await asyncio.open_connection(host, port, local_addr=(self.source, 0))

    async def post_json(self, session: aiohttp.ClientSession, body: bytes) -> None:
        try:
            async with session.post(
                self.url + CHAT, data=body, headers={"Content-Type": "application/json"}
            ) as response:
                await response.read()
                self.outcomes[str(response.status)] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self.outcomes[type(exc).__name__] += 1

    async def pause(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)


async def _trickle(attack: Attack, head: bytes, drip: bytes) -> None:
    """One connection: ``head``, then ``drip`` every 200 ms until the server closes it."""
    try:
        reader, writer = await attack.open()
    except OSError as exc:
        attack.outcomes[type(exc).__name__] += 1
        await attack.pause(0.2)
        return
    try:
        writer.write(head)
        while not attack.stop.is_set() and not reader.at_eof():
            writer.write(drip)
            await writer.drain()
            with contextlib.suppress(asyncio.TimeoutError):
                line = await asyncio.wait_for(reader.readline(), 0.2)
                if line.startswith(b"HTTP/1.1 "):
                    attack.outcomes[line[9:12].decode()] += 1
                    return
                if not line:
                    attack.outcomes["closed"] += 1
                    return
    except (ConnectionError, OSError):
        attack.outcomes["reset"] += 1
    finally:
        writer.close()


def _head(length: int) -> bytes:
    return (
        f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def slow_bodies(attack: Attack) -> None:
    async def keep_one() -> None:
        while not attack.stop.is_set():
            await _trickle(attack, _head(100_000) + b"{", b" ")

    await asyncio.gather(*(keep_one() for _ in range(attack.level)))


async def header_dribble(attack: Attack) -> None:
    async def keep_one() -> None:
        while not attack.stop.is_set():
            await _trickle(attack, f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n".encode(), b"X")

    await asyncio.gather(*(keep_one() for _ in range(attack.level)))


def line_was_refusal(waiting: asyncio.Task[bytes]) -> bool:
    return (
        waiting.done()
        and not waiting.cancelled()
        and not waiting.exception()
        and waiting.result().startswith(b"HTTP/1.1 503")
    )


async def connections(attack: Attack) -> None:
    """Hold as many idle connections as the server lets this client open, reopening each one
    the server closes; count the refusals (503) and the closes (its header timeout)."""

    async def hold_one() -> None:
        while not attack.stop.is_set():
            try:
                reader, writer = await attack.open()
            except OSError as exc:
                attack.outcomes[type(exc).__name__] += 1
                await attack.pause(0.2)
                continue
            waiting = asyncio.create_task(reader.readline())
            await asyncio.wait(
                [waiting, asyncio.create_task(attack.stop.wait())], return_when="FIRST_COMPLETED"
            )
            if waiting.done():
                line = waiting.result() if not waiting.exception() else b""
                attack.outcomes[line[9:12].decode() if line else "closed"] += 1
            else:
                waiting.cancel()
            writer.close()
            if attack.level <= MIX["connections"] and line_was_refusal(waiting):
                await attack.pause(1.0)  # the standing mix retries a refusal a second later

    await asyncio.gather(*(hold_one() for _ in range(attack.level)))


async def _flood(attack: Attack, bodies: list[bytes]) -> None:
    in_flight = attack.level
    async with session_from(attack.source, limit=in_flight) as session:

        async def worker(offset: int) -> None:
            index = offset
            while not attack.stop.is_set():
                await attack.post_json(session, bodies[index % len(bodies)])
                index += in_flight

        await asyncio.gather(*(worker(i) for i in range(in_flight)))


async def stalling_origin(attack: Attack) -> None:
    body = chat(*(image(f"{attack.stall_url}?n={i}") for i in range(32)))
    await _flood(attack, [json.dumps(body).encode()])


async def long_text(attack: Attack) -> None:
    bodies = [
        json.dumps(chat(text("a" * 4_000_000))).encode(),
        json.dumps(chat(text("the quick brown fox jumps over a lazy dog " * 15_000))).encode(),
    ]
    await _flood(attack, bodies)


async def deep_json(attack: Attack) -> None:
    deep: Any = {}
    for _ in range(900):
        deep = {"k": deep}
    bodies = [
        b"[" * 100_000 + b"]" * 100_000,
        json.dumps(chat(text("hi"), chat_template_kwargs=deep)).encode(),
    ]
    await _flood(attack, bodies)


async def wide_json(attack: Attack) -> None:
    wide = json.dumps({f"key{i}": i for i in range(1_500_000)}).encode()
    await _flood(attack, [wide])


async def bad_types(attack: Attack) -> None:
    hi = text("hi")
    plain = json.dumps(chat(hi)).encode()[:-1]  # the closing brace left off: fields follow
    bodies = [
        json.dumps(chat(hi, tools=[1, 2, 3])).encode(),
        plain + b', "temperature": Infinity}',
        json.dumps(chat(hi, n=10**9)).encode(),
        plain + b', "max_tokens": ' + b"9" * 5000 + b"}",
        json.dumps(chat(image(png_url(1, 5000)), hi)).encode(),
        json.dumps(chat(text("<|image_pad|>" * 10_000))).encode(),
    ]
    await _flood(attack, bodies)


ATTACKS: dict[str, Callable[[Attack], Awaitable[None]]] = {
    "slow_bodies": slow_bodies,
    "header_dribble": header_dribble,
    "long_text": long_text,
    "deep_json": deep_json,
    "wide_json": wide_json,
    "bad_types": bad_types,
    "connections": connections,
    "stalling_origin": stalling_origin,
}

FLOOD = {
    "slow_bodies": 40,
    "header_dribble": 40,
    "long_text": 8,
    "deep_json": 8,
    "wide_json": 4,
    "bad_types": 8,
    "connections": 400,
    "stalling_origin": 64,
}
"""Each attack alone, as hard as one client can push it: requests back to back, or every
connection it can reopen."""

MIX = {
    "slow_bodies": 80,
    "header_dribble": 40,
    "long_text": 2,
    "deep_json": 2,
    "wide_json": 1,
    "bad_types": 2,
    "connections": 300,
    "stalling_origin": 64,
}
"""The standing mix: every attack at once, each at the strength the outside attack used (80
half-sent bodies, 64 requests of 32 stalled URLs, megabytes of text and JSON a request or two at a
time, a client holding more connections than it may)."""


class StallingOrigin:
    """An origin on its own thread that accepts every request and never answers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, name="stalling-origin", daemon=True)
        self.port = 0
        self.requests = 0
        self.in_flight = 0
        self.most_at_once = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/stall"

    def __enter__(self) -> StallingOrigin:
        self._thread.start()
        assert self._ready.wait(30), "origin did not start"
        return self

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(30)
        self._thread.join(30)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._startup())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _startup(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_get("/stall", self._stall)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        assert self._stopping is not None and self._runner is not None
        self._stopping.set()
        await self._runner.cleanup()
        self._loop.call_soon(self._loop.stop)

    async def _stall(self, request: web.Request) -> web.Response:
        assert self._stopping is not None
        self.requests += 1
        self.in_flight += 1
        self.most_at_once = max(self.most_at_once, self.in_flight)
        try:
            await self._stopping.wait()
        finally:
            self.in_flight -= 1  # the client hung up (the handler is cancelled) or shutdown
        return web.Response(body=b"late")


async def run_attacks(
    url: str,
    levels: dict[str, int],
    during: Callable[[], Awaitable[Any]],
    stall_url: str = "",
) -> tuple[Any, dict[str, Counter[str]]]:
    """Start each attack of ``levels`` at its level (each from its own address), await
    ``during()`` and an answer to every attack, then stop them."""
    stop = asyncio.Event()
    running = {
        name: Attack(url, f"127.0.0.{20 + index}", stop, level, stall_url)
        for index, (name, level) in enumerate(levels.items())
    }
    tasks = [asyncio.create_task(ATTACKS[name](a)) for name, a in running.items()]
    try:
        result = await during()
        for _ in range(300):  # then until every attack has had an answer (30 s at most)
            if all(a.outcomes for a in running.values()):
                break
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)
    return result, {name: a.outcomes for name, a in running.items()}


__all__ = [
    "ATTACKS",
    "FLOOD",
    "MIX",
    "Attack",
    "GoodRun",
    "StallingOrigin",
    "good_requests",
    "poll_health",
    "run_attacks",
    "run_good_traffic",
]
