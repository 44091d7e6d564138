"""Stalled fetches must not starve healthy ones, to other origins or to the same origin.

Two holes, two fixes. First, the shared client had one pool of 100 connections and no per-host
limit: 100 stalled fetches to one origin held all of them, and fetches to healthy origins waited
for a free connection inside their own timeout until they failed. The limits moved in front of
the sessions (``connection_slots``), where waiting for another origin's hold is not charged.
Then a per-origin limit of 32 made stalled fetches starve good ones to the *same* origin: mixed
loads lost 9-50 of 50-120 good fetches. There is no per-origin limit by default now; a request's
own bound and deadline (``request_scope``) and the total limit what stalls can hold.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import pytest

from _http_server import MediaServer
from _raw_media import RawMediaIO
from mediaref.exceptions import MediaTimeoutError
from mediaref.media._transport.connection_slots import ConnectionSlots
from mediaref.media._transport.http_client import (
    DEFAULT_LIMIT,
    DEFAULT_LIMIT_PER_HOST,
    MediaHTTPClient,
)
from mediaref.media.connector import MediaConnector, MediaRequestFetchScope

PAYLOAD = os.urandom(3000)
STALLED_FETCHES = 120  # more than the old pool's 100 connections
OLD_LIMIT_PER_HOST = 32
NEVER_HANGS_SECONDS = 60.0


async def _wait_for_requests(server: MediaServer, path: str, count: int) -> None:
    async def poll() -> None:
        # The count lives on the server's thread, which has no event to await: poll it.
        while server.count(path) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), NEVER_HANGS_SECONDS)


async def _cancel(tasks: Sequence[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def test_the_defaults_limit_the_total_only() -> None:
    assert DEFAULT_LIMIT_PER_HOST is None
    assert DEFAULT_LIMIT >= 512


async def test_a_stalled_origin_does_not_starve_a_healthy_one(
    media_server: MediaServer,
    second_media_server: MediaServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "1")
    client = MediaHTTPClient()  # the defaults the process-wide client has
    connector = MediaConnector(client, allow_private_ips=True)
    stalled_url = media_server.url("/slow")
    stalled = [
        asyncio.create_task(
            connector.load_from_url_async(stalled_url, RawMediaIO(), fetch_timeout=120)
        )
        for _ in range(STALLED_FETCHES)
    ]
    try:
        # Every stalled fetch holds a connection (the total is far from full) ...
        await _wait_for_requests(media_server, "/slow", STALLED_FETCHES)
        healthy_url = second_media_server.add_file("a.bin", PAYLOAD)
        # ... and a healthy origin is served all the same.
        ref = await connector.load_from_url_async(healthy_url, RawMediaIO(), fetch_timeout=10)
        assert ref.data == PAYLOAD
        assert not any(task.done() for task in stalled)
    finally:
        await _cancel(stalled)
        await client.close()


async def test_stalled_fetches_do_not_starve_healthy_ones_to_the_same_origin(
    media_server: MediaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four requests stall 16 connections each on one origin (more than the old per-origin
    # limit of 32 in all); two other requests fetch a healthy path of that same origin.
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "1")
    client = MediaHTTPClient()

    def request() -> MediaConnector:
        return MediaConnector(client, allow_private_ips=True, fetch_scope=MediaRequestFetchScope())

    stalled_url = media_server.url("/slow")
    stalled = [
        asyncio.create_task(
            connector.load_from_url_async(stalled_url, RawMediaIO(), fetch_timeout=120)
        )
        for connector in (request() for _ in range(4))
        for _ in range(16)
    ]
    urls = [media_server.add_file(f"good-{i}.bin", PAYLOAD + bytes([i])) for i in range(20)]
    try:
        await _wait_for_requests(media_server, "/slow", OLD_LIMIT_PER_HOST)
        good = [request(), request()]
        refs = await asyncio.gather(
            *(
                good[i % 2].load_from_url_async(url, RawMediaIO(), fetch_timeout=10)
                for i, url in enumerate(urls)
            )
        )
        assert [ref.data for ref in refs] == [PAYLOAD + bytes([i]) for i in range(20)]
        assert not any(task.done() for task in stalled)  # still stalled, all of them
        assert all(media_server.count(f"/files/good-{i}.bin") == 1 for i in range(20))
    finally:
        await _cancel(stalled)
        await client.close()


async def test_fetches_queued_behind_their_own_origin_still_complete(
    media_server: MediaServer,
) -> None:
    client = MediaHTTPClient(limit=4, limit_per_host=2)
    connector = MediaConnector(client, allow_private_ips=True)
    urls = [media_server.add_file(f"f{i}.bin", PAYLOAD + bytes([i])) for i in range(20)]
    try:
        refs = await asyncio.gather(*(connector.fetch_image_async(u, RawMediaIO()) for u in urls))
    finally:
        await client.close()
    assert [ref.data for ref in refs] == [PAYLOAD + bytes([i]) for i in range(20)]


async def test_waiting_for_the_same_origin_counts_against_the_fetch_timeout(
    media_server: MediaServer,
) -> None:
    # With a per-origin limit set (none by default), the per-origin wait is the origin's own
    # doing, so it is charged: a fetch queued behind stalled fetches to the same origin times
    # out rather than waiting forever.
    client = MediaHTTPClient(limit=8, limit_per_host=1)
    connector = MediaConnector(client, allow_private_ips=True)
    holder = asyncio.create_task(
        connector.load_from_url_async(media_server.url("/slow"), RawMediaIO(), fetch_timeout=120)
    )
    try:
        await _wait_for_requests(media_server, "/slow", 1)
        media_server.add_file("a.bin", PAYLOAD)
        with pytest.raises(MediaTimeoutError):
            await connector.load_from_url_async(
                media_server.url("/files/a.bin"), RawMediaIO(), fetch_timeout=0.3
            )
        assert media_server.count("/files/a.bin") == 0  # it never got a connection
    finally:
        holder.cancel()
        await asyncio.gather(holder, return_exceptions=True)
        await client.close()


# --- the slots themselves ------------------------------------------------------------------


async def test_slots_bound_each_origin_and_the_total() -> None:
    slots = ConnectionSlots(per_origin=2, total=3)
    a, b = ("http", "a.example", 80), ("http", "b.example", 80)
    held: list[asyncio.Event] = []
    inside = {"a": 0, "b": 0, "max_a": 0, "max_total": 0}

    async def use(origin: tuple[str, str, int], name: str) -> None:
        release = asyncio.Event()
        held.append(release)
        async with slots.hold(origin, origin_wait_seconds=60, pool_wait_seconds=60):
            inside[name] += 1
            inside["max_a"] = max(inside["max_a"], inside["a"])
            inside["max_total"] = max(inside["max_total"], inside["a"] + inside["b"])
            await release.wait()
            inside[name] -= 1

    tasks = [asyncio.create_task(use(a, "a")) for _ in range(4)]
    tasks += [asyncio.create_task(use(b, "b")) for _ in range(4)]
    for _ in range(8):
        await asyncio.sleep(0)
        for release in held:
            release.set()
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*tasks), NEVER_HANGS_SECONDS)
    assert inside["max_a"] <= 2 and inside["max_total"] <= 3
    assert slots.origins_in_use() == 0


async def test_without_a_per_origin_limit_only_the_total_binds() -> None:
    slots = ConnectionSlots(per_origin=None, total=3)
    origin = ("http", "a.example", 80)
    async with slots.hold(origin, origin_wait_seconds=0, pool_wait_seconds=0):
        async with slots.hold(origin, origin_wait_seconds=0, pool_wait_seconds=0):
            async with slots.hold(origin, origin_wait_seconds=0, pool_wait_seconds=0):
                assert slots.origins_in_use() == 0  # no per-origin entries are kept
                with pytest.raises(asyncio.TimeoutError):
                    async with slots.hold(origin, origin_wait_seconds=60, pool_wait_seconds=0):
                        pass
    async with slots.hold(origin, origin_wait_seconds=0, pool_wait_seconds=0):
        pass  # the total slots came back


async def test_a_busy_origin_times_out_on_its_own_bound() -> None:
    slots = ConnectionSlots(per_origin=1, total=10)
    origin = ("https", "slow.example", 443)
    async with slots.hold(origin, origin_wait_seconds=1, pool_wait_seconds=1):
        with pytest.raises(asyncio.TimeoutError):
            async with slots.hold(origin, origin_wait_seconds=0, pool_wait_seconds=60):
                pass
        # Another origin is not affected.
        other = ("https", "other.example", 443)
        async with slots.hold(other, origin_wait_seconds=0, pool_wait_seconds=0) as waited:
            assert waited >= 0
    assert slots.origins_in_use() == 0


async def test_a_cancelled_wait_gives_everything_back() -> None:
    slots = ConnectionSlots(per_origin=1, total=1)
    origin = ("http", "a.example", 80)
    release = asyncio.Event()

    async def hold_until_released() -> None:
        async with slots.hold(origin, origin_wait_seconds=60, pool_wait_seconds=60):
            await release.wait()

    holder = asyncio.create_task(hold_until_released())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(hold_until_released())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    release.set()
    await holder
    assert slots.origins_in_use() == 0
    async with slots.hold(origin, origin_wait_seconds=0, pool_wait_seconds=0):
        pass  # both the origin slot and the total slot are free again


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        MediaHTTPClient(limit_per_host=0)
    with pytest.raises(ValueError):
        MediaHTTPClient(limit=0)
    with pytest.raises(ValueError):
        ConnectionSlots(per_origin=1, total=0)
    with pytest.raises(ValueError):
        ConnectionSlots(per_origin=None, total=0)
    MediaHTTPClient(limit_per_host=None)  # no per-origin limit: the default
