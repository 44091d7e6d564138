"""``mediaref serve`` under the standing attack mix: good traffic beside every attack at once.

The server runs as a subprocess (as deployed), the attackers and the good client in this process,
each from its own loopback address (``_serve_attacks``, at the ``MIX`` levels): 80 half-sent
bodies, dribbled headers, 64 requests of 32 URLs to a stalling origin, megabytes of text, deep and
wide JSON, bad types, and a client holding every connection it may. Pinned, against the same good
traffic run alone first:

- every good request succeeds, beside the attacks as alone;
- ``/health`` answers 200 throughout;
- each attack gets its documented answer (408, 400, 413, 504, or its connections closed);
- once the attacks stop, the server's descriptors, threads and memory come back to baseline.

How much the attacks slow the good requests (their p99 against the clean run's, ``/health``'s
latency) is measured by ``benchmarks/bench_serve_attacks.py``, not asserted here: tests assert
behaviour, never time.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pytest

from _serve_attacks import (
    MIX,
    GoodRun,
    StallingOrigin,
    good_requests,
    poll_health,
    run_attacks,
    run_good_traffic,
)
from _serve_process import ServerProcess

GOOD_REQUESTS = 48
GOOD_IN_FLIGHT = 4
FD_SLACK = 24  # pooled keep-alive connections and a few more
THREAD_SLACK = 8
RSS_SETTLED = 256 * 1024 * 1024
SETTLE_S = 60.0
SERVER_ARGS = (
    "--allowed-media-domains", "127.0.0.1",
    "--media-url-allow-private-ips",
    "--max-request-body-mb", "32",  # the wide JSON body (23 MB) is read, then refused
    "--header-timeout", "2",
    "--body-timeout", "10",
)  # fmt: skip
SERVER_ENV = {"VLLM_IMAGE_FETCH_TIMEOUT": "2", "VLLM_MEDIA_FETCH_MAX_RETRIES": "3"}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    server = ServerProcess(*SERVER_ARGS, env=SERVER_ENV)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(60)


ALLOWED = {
    "slow_bodies": {"408"},
    "header_dribble": {"closed", "reset"},
    "long_text": {"400"},
    "deep_json": {"400"},
    # Refused as its values are counted, while the attacker is still sending: the server answers
    # and closes unread (it reads no attacker's megabytes to deliver a refusal), so a client
    # still writing may meet the reset before it reads the 413 (docs/security.md).
    "wide_json": {"413", "ClientOSError"},
    "bad_types": {"400"},
    "connections": {"closed", "503"},
    "stalling_origin": {"504"},
}


async def settled(server: ServerProcess, fds: int, threads: int, rss: int) -> tuple[int, int, int]:
    """The server's descriptors, threads and RSS once back within their slack (or at the end)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_S
    while True:
        now = server.fds(), server.status("Threads"), server.status("VmRSS")
        back = now[0] <= fds + FD_SLACK and now[1] <= threads + THREAD_SLACK
        if (back and now[2] - rss < RSS_SETTLED) or loop.time() > deadline:
            return now
        await asyncio.sleep(0.5)


@pytest.mark.timeout(900)
async def test_good_traffic_beside_every_attack_at_once(server: ServerProcess) -> None:
    bodies = good_requests(GOOD_REQUESTS)
    clean = await run_good_traffic(server.url, bodies, GOOD_IN_FLIGHT)  # warms the caches too
    assert set(clean.statuses) == {200}, Counter(clean.statuses)
    fds, threads, rss = server.fds(), server.status("Threads"), server.status("VmRSS")

    with StallingOrigin() as origin:
        stop_polling = asyncio.Event()
        health: list[tuple[int, float]] = []
        poller = asyncio.create_task(poll_health(server.url, stop_polling, health))

        async def good_traffic_after_the_attacks_start() -> GoodRun:
            await asyncio.sleep(3)  # every attacker connected and sending
            return await run_good_traffic(server.url, bodies, GOOD_IN_FLIGHT)

        attacked, outcomes = await run_attacks(
            server.url, MIX, good_traffic_after_the_attacks_start, origin.url
        )
        stop_polling.set()
        await poller

    assert set(attacked.statuses) == {200}, Counter(attacked.statuses)
    assert health and {status for status, _ in health} == {200}
    for name, counts in outcomes.items():
        assert counts, f"{name} got no answer at all"
        assert set(counts) <= ALLOWED[name], (name, counts)
    assert outcomes["connections"]["503"] > 0  # past its share of connections

    after = await settled(server, fds, threads, rss)
    assert after[0] <= fds + FD_SLACK, (fds, after)
    assert after[1] <= threads + THREAD_SLACK, (threads, after)
    assert after[2] - rss < RSS_SETTLED, (after[2] - rss) / 2**20
    print(
        f"\ngood p50/p99 alone {clean.percentile(50) * 1e3:.0f}/{clean.percentile(99) * 1e3:.0f}"
        f" ms, under attack {attacked.percentile(50) * 1e3:.0f}/"
        f"{attacked.percentile(99) * 1e3:.0f} ms; /health max "
        f"{max(t for _, t in health) * 1e3:.0f} ms; {dict(outcomes)}"
    )
