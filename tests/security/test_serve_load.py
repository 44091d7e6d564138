"""The render server under load and faults: ``mediaref serve`` as a subprocess, loopback only.

300 chat requests, 32 in flight, against a media origin on 127.0.0.1 (``_fault_mix.FaultOrigin``):
repeated and unique images, a video, audio (a second model), corrupt bytes, oversized media and
oversized request bodies, malformed JSON, too many items, a stalling origin, a dropping origin, a
redirect to a refused host, gzip/deflate bombs and decode bombs. Pinned:

- every good request answers 200 with exactly the response its serial run gave (tokens, hashes,
  tensors); every bad one its documented status (``docs/security.md``) in OpenAI's error shape;
- ``/health`` answers 200 throughout the load;
- afterwards the server process has leaked no descriptor or thread beyond its bounded pools, its
  RSS is back near its baseline, and its peak stayed under a bound one unbounded bomb breaks;
- SIGTERM while requests are in flight: the server stops accepting, finishes every request it
  accepted (each 200), and exits 0.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from _fault_mix import MIX_ENV, FaultOrigin, MixRequest, build_mix, jpeg
from _serve_process import ServerProcess

TOTAL = 300
CONCURRENCY = 32
WAIT_S = 120.0
BODY_CAP_MB = 2
MAX_ITEMS = 4
# The server's pools that grow on demand up to a fixed size (media pool 8, asyncio's default
# executor min(32, cores + 4), aiohttp's resolver): growth past this is a leak, per request.
THREAD_SLACK = 16
FD_SLACK = 40  # pooled keep-alive connections to the origin (32 per origin) and a few more
RSS_HEADROOM = 768 * 1024 * 1024
RSS_SETTLED = 256 * 1024 * 1024
MODELS = {"vl": "qwen2_vl", "audio": "qwen2_audio"}


@dataclass(frozen=True)
class Call:
    kind: str
    body: bytes
    expected_status: int
    key: str  # requests with one key give one output

    @property
    def good(self) -> bool:
        return self.expected_status == 200


def mix_call(request: MixRequest) -> Call:
    body = {"model": MODELS[request.model], "messages": request.messages()}
    return Call(request.kind, json.dumps(body).encode(), request.expected_status, request.url)


def http_level_calls(origin: FaultOrigin) -> list[Call]:
    """Refusals the server itself makes before anything is fetched."""
    image = origin.url("/files/good-0.jpg")
    part = {"type": "image_url", "image_url": {"url": image}}
    too_many = {"messages": [{"role": "user", "content": [part] * (MAX_ITEMS + 1)}]}
    padding = "A" * (BODY_CAP_MB * 1024 * 1024)
    oversized = {"messages": [{"role": "user", "content": "x"}], "padding": padding}
    return [
        Call("too_many_items", json.dumps(too_many).encode(), 413, ""),
        Call("oversized_body", json.dumps(oversized).encode(), 413, ""),
        Call("malformed_json", b'{"messages": [', 400, ""),
    ]


def build_calls(origin: FaultOrigin) -> list[Call]:
    calls = [mix_call(r) for r in build_mix(origin, TOTAL - 15, bad_fraction=0.5)]
    extra = http_level_calls(origin) * 5
    # Spread the server-level refusals through the mix.
    for index, call in enumerate(extra):
        calls.insert((index * 37) % len(calls), call)
    assert len(calls) == TOTAL
    return calls


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    server = ServerProcess(
        "--model", "qwen2_vl",
        "--model", "qwen2_audio",
        "--allowed-media-domains", "127.0.0.1",
        "--media-url-allow-private-ips",
        "--max-request-body-mb", str(BODY_CAP_MB),
        "--max-items-per-request", str(MAX_ITEMS),
        "--shutdown-timeout", "60",
        env=MIX_ENV,
    )  # fmt: skip
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(WAIT_S)


@dataclass
class Answer:
    status: int
    body: Any


async def send(session: aiohttp.ClientSession, url: str, call: Call) -> Answer:
    async with session.post(
        url + "/v1/chat/completions/render",
        data=call.body,
        headers={"Content-Type": "application/json"},
    ) as response:
        return Answer(response.status, await response.json())


def output_of(body: dict[str, Any]) -> Any:
    return body["token_ids"], body["features"]


async def poll_health(session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> list[int]:
    statuses = []
    while not stop.is_set():
        async with session.get(url + "/health") as response:
            statuses.append(response.status)
        await asyncio.sleep(0.05)
    return statuses


@pytest.mark.timeout(600)
async def test_server_under_a_fault_mix_then_sigterm(server: ServerProcess) -> None:
    with FaultOrigin() as origin:
        calls = build_calls(origin)
        assert {c.kind for c in calls} >= {"gzip_bomb", "stalled_origin", "oversized_body"}
        timeout = aiohttp.ClientTimeout(total=WAIT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            # The serial run: each distinct good request alone.
            expected = {}
            for call in {c.key: c for c in calls if c.good}.values():
                answer = await send(session, server.url, call)
                assert answer.status == 200, answer.body
                expected[call.key] = output_of(answer.body)
            fds_before, threads_before = server.fds(), server.status("Threads")
            rss_before = server.status("VmRSS")

            gate = asyncio.Semaphore(CONCURRENCY)

            async def bounded(call: Call) -> Answer:
                async with gate:
                    return await send(session, server.url, call)

            stop_polling = asyncio.Event()
            health = asyncio.create_task(poll_health(session, server.url, stop_polling))
            answers = await asyncio.wait_for(asyncio.gather(*map(bounded, calls)), 480)
            stop_polling.set()
            health_statuses = await health
            await asyncio.sleep(0.5)  # let closed connections finish closing
            fds_after, threads_after = server.fds(), server.status("Threads")
            rss_after, rss_peak = server.status("VmRSS"), server.status("VmHWM")

        wrong = [
            (c.kind, a.status, a.body)
            for c, a in zip(calls, answers, strict=True)
            if a.status != c.expected_status
        ]
        assert not wrong, Counter((kind, status) for kind, status, _ in wrong).most_common()
        for call, answer in zip(calls, answers, strict=True):
            if call.good:
                assert output_of(answer.body) == expected[call.key], call.kind
            else:
                error = answer.body["error"]
                assert error["code"] == call.expected_status and error["message"]
        assert health_statuses and set(health_statuses) == {200}
        assert fds_after <= fds_before + FD_SLACK
        assert threads_after <= threads_before + THREAD_SLACK
        assert rss_peak - rss_before < RSS_HEADROOM, (rss_peak - rss_before) / 2**20
        assert rss_after - rss_before < RSS_SETTLED, (rss_after - rss_before) / 2**20

        await sigterm_during_load(server, origin)


async def sigterm_during_load(server: ServerProcess, origin: FaultOrigin) -> None:
    """SIGTERM with requests in flight: every accepted one is answered in full, then exit 0."""
    calls = []
    for index in range(48):  # unique, larger images: cache misses that take a while
        url = origin.add(f"drain-{index}.jpg", jpeg(5000 + index, (640, 480)), "image/jpeg")
        part = {"type": "image_url", "image_url": {"url": url}}
        body = {"messages": [{"role": "user", "content": [part]}], "mm_payload": "none"}
        calls.append(Call("drain", json.dumps(body).encode(), 200, url))
    connector = aiohttp.TCPConnector(limit=len(calls), force_close=True)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=WAIT_S)
    ) as session:
        tasks = [asyncio.create_task(send(session, server.url, c)) for c in calls]
        async with aiohttp.ClientSession() as probe:
            for _ in range(400):  # until the server is rendering several of them
                async with probe.get(server.url + "/metrics") as response:
                    text = await response.text()
                (in_flight,) = re.findall(r"^mediaref_requests_in_flight (\S+)$", text, re.M)
                if float(in_flight) >= 4:
                    break
                await asyncio.sleep(0.01)
        server.process.send_signal(signal.SIGTERM)
        results = await asyncio.gather(*tasks, return_exceptions=True)
    code = await asyncio.to_thread(server.process.wait, WAIT_S)
    await asyncio.to_thread(server.stop)
    log = "".join(server.lines)
    assert code == 0, log
    (drained,) = re.findall(r"draining (\d+) in-flight requests", log)
    answered = [r for r in results if isinstance(r, Answer)]
    # Every answer is a full success; a request can only have missed the server entirely.
    assert all(a.status == 200 and a.body["token_ids"] for a in answered), log
    refused = [r for r in results if not isinstance(r, Answer)]
    assert all(isinstance(r, aiohttp.ClientConnectionError) for r in refused), refused
    assert int(drained) >= 4 and len(answered) >= int(drained)
