"""A request's downloads share one fetch deadline and at most 16 connections at once.

Before the fix a request's fetch time and connections grew with the URLs it named: every
download had its modality's timeout for each of its attempts (5 s x 3 for an image), all of them
at once. 64 requests of 32 URLs each to one stalling origin held every server slot ~15 s, and
that origin saw 1,640 connections in 16 s. Now a request in a scope (``MediaRequestFetchScope``,
which the chat item tracker and the render server make per request) fetches for at most its
deadline, retrying only while time remains, with at most 16 of its downloads connected at once.
A connector without a scope keeps vLLM 0.33's clock: the timeout per attempt, times the retries.

The origins count what they were sent; nothing here asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import pytest
from aiohttp import web

from _http_server import MediaServer
from _raw_media import RawMediaIO
from mediaref.exceptions import MediaTimeoutError, release_frames
from mediaref.media._transport.errors import (
    RequestDeadlineError,
    is_transient,
    map_transport_error,
)
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media._transport.request_scope import RequestDeadline
from mediaref.media.connector import MediaConnector, MediaRequestFetchScope
from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import ModelConfig
from mediaref.renderers.chat_utils.item_tracker import AsyncMultiModalItemTracker

PAYLOAD = os.urandom(2000)
NEVER_HANGS_SECONDS = 60.0
REQUEST_URLS = 32
SLOW_ANSWERS_SECONDS = 30.0  # when the test server's /slow finally answers


@pytest.fixture(autouse=True)
def scope_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "3")


@pytest.fixture
async def client() -> AsyncIterator[MediaHTTPClient]:
    client = MediaHTTPClient()
    yield client
    await client.close()  # the sessions of the test's loop


def _scoped(client: MediaHTTPClient, scope: MediaRequestFetchScope | None) -> MediaConnector:
    return MediaConnector(client, allow_private_ips=True, fetch_scope=scope)


async def _fetch_all(connector: MediaConnector, urls: list[str]) -> list[object]:
    fetches = (connector.fetch_image_async(url, RawMediaIO()) for url in urls)
    return await asyncio.wait_for(
        asyncio.gather(*fetches, return_exceptions=True), NEVER_HANGS_SECONDS
    )


async def _wait_for_requests(
    server: MediaServer, path: str, count: int, *, seconds: float = NEVER_HANGS_SECONDS
) -> None:
    async def poll() -> None:
        while server.count(path) < count:  # noqa: ASYNC110  (the count lives on another thread)
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), seconds)


# --- (a) one deadline for the whole request ---------------------------------------------------


async def test_a_stalled_download_is_not_retried_past_the_request_deadline(
    media_server: MediaServer, client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deadline is the image timeout, which the first attempt uses up: no second attempt.
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "1")
    connector = _scoped(client, MediaRequestFetchScope())
    with pytest.raises(MediaTimeoutError, match="1 s fetch deadline passed") as caught:
        await asyncio.wait_for(
            connector.fetch_image_async(media_server.url("/slow"), RawMediaIO()),
            NEVER_HANGS_SECONDS,
        )
    assert caught.value.status_code == 504
    assert media_server.count("/slow") == 1  # vLLM's clock: 3 attempts


async def test_a_request_of_many_stalled_urls_ends_with_its_deadline(
    media_server: MediaServer, client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "1")
    connector = _scoped(client, MediaRequestFetchScope())
    urls = [media_server.url("/slow")] * REQUEST_URLS
    results = await _fetch_all(connector, urls)
    assert all(isinstance(r, MediaTimeoutError) for r in results), results
    assert all("fetch deadline passed" in str(r) for r in results)
    # 16 downloads connected and stalled until the deadline; the other 16 waited for the
    # request's slots until then and never connected. Without a scope: 32 x 3 attempts.
    assert 1 <= media_server.count("/slow") <= 16


async def test_retries_run_while_the_deadline_leaves_time(
    media_server: MediaServer, client: MediaHTTPClient
) -> None:
    media_server.add_file("a.bin", PAYLOAD)
    connector = _scoped(client, MediaRequestFetchScope())
    ref = await connector.fetch_image_async(media_server.url("/flaky/1/a.bin"), RawMediaIO())
    assert ref.data == PAYLOAD
    assert media_server.count("/flaky/1/a.bin") == 2


async def test_an_explicit_request_deadline_cuts_the_retries(
    media_server: MediaServer, client: MediaHTTPClient
) -> None:
    # Three 0.5 s attempts and their backoffs take over 1.15 s: a 0.8 s deadline leaves room
    # for two at most, whatever the machine's speed.
    connector = _scoped(client, MediaRequestFetchScope(deadline_seconds=0.8))
    with pytest.raises(MediaTimeoutError, match=r"0\.8 s fetch deadline passed"):
        await asyncio.wait_for(
            connector.load_from_url_async(
                media_server.url("/slow"), RawMediaIO(), fetch_timeout=0.5
            ),
            NEVER_HANGS_SECONDS,
        )
    assert 1 <= media_server.count("/slow") <= 2


def test_the_synchronous_api_keeps_the_request_deadline(
    media_server: MediaServer, http_client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "1")
    connector = _scoped(http_client, MediaRequestFetchScope())
    with pytest.raises(MediaTimeoutError, match="fetch deadline passed"):
        connector.fetch_image(media_server.url("/slow"), RawMediaIO())
    assert media_server.count("/slow") == 1


# --- (b) at most 16 connections at once ----------------------------------------------------


class PeakOrigin(MediaServer):
    """A MediaServer whose /files/ responses take a moment, counting how many it serves at once."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.peak = 0

    async def _file(self, request: web.Request) -> web.StreamResponse:
        # The server's own loop runs every handler, so the counters need no lock.
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.05)  # long enough for concurrent downloads to overlap here
            return await super()._file(request)
        finally:
            self.in_flight -= 1


@pytest.fixture
def peak_origin() -> Iterator[PeakOrigin]:
    origin = PeakOrigin()
    origin.start()
    try:
        yield origin
    finally:
        origin.stop()


async def test_one_request_holds_at_most_16_connections(
    peak_origin: PeakOrigin, client: MediaHTTPClient
) -> None:
    urls = [peak_origin.add_file(f"{i}.bin", PAYLOAD + bytes([i])) for i in range(REQUEST_URLS + 8)]
    results = await _fetch_all(_scoped(client, MediaRequestFetchScope()), urls)
    assert [getattr(r, "data", r) for r in results] == [
        PAYLOAD + bytes([i]) for i in range(len(urls))
    ]
    assert peak_origin.peak <= 16  # without a scope: all 40 at once


async def test_the_bound_is_per_request(peak_origin: PeakOrigin, client: MediaHTTPClient) -> None:
    # Two requests, each bounded to 2: together they may hold 4, and neither waits for the other.
    urls = [peak_origin.add_file(f"{i}.bin", PAYLOAD) for i in range(12)]
    first = _scoped(client, MediaRequestFetchScope(max_connections=2))
    second = _scoped(client, MediaRequestFetchScope(max_connections=2))
    results = await asyncio.gather(_fetch_all(first, urls[:6]), _fetch_all(second, urls[6:]))
    assert all(getattr(r, "data", None) == PAYLOAD for batch in results for r in batch)
    assert peak_origin.peak <= 4


async def test_the_setting_sets_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS", "3")
    assert MediaRequestFetchScope().max_connections == 3
    assert MediaRequestFetchScope(max_connections=5).max_connections == 5


def _stalled_chat(
    media_server: MediaServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncMultiModalItemTracker:
    """A chat request's tracker holding 32 images from the origin that never answers (1 s)."""
    monkeypatch.setenv("MEDIAREF_MEDIA_URL_ALLOW_PRIVATE_IPS", "1")
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "1")
    tracker = AsyncMultiModalItemTracker(ModelConfig(model=str(builtin_model_path("qwen2_vl"))))
    parser = tracker.create_parser()
    for _ in range(REQUEST_URLS):
        parser.parse_image(media_server.url("/slow"))
    return tracker


async def test_a_chat_request_gets_its_own_scope(
    media_server: MediaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The library's request path: the tracker makes the scope, so 32 stalled images of one
    # chat request end with the request's deadline, 16 connections at most.
    tracker = _stalled_chat(media_server, monkeypatch)
    other = AsyncMultiModalItemTracker(ModelConfig(model=str(builtin_model_path("qwen2_vl"))))
    assert tracker.connector.fetch_scope is tracker.fetch_scope
    assert tracker.fetch_scope is not other.fetch_scope
    with pytest.raises(MediaTimeoutError, match="fetch deadline passed"):
        await asyncio.wait_for(tracker.resolve_items(), NEVER_HANGS_SECONDS)
    assert 1 <= media_server.count("/slow") <= 16


# --- (d) without a scope: vLLM 0.33's clock -------------------------------------------------


async def test_without_a_scope_each_attempt_has_the_full_timeout(
    media_server: MediaServer, client: MediaHTTPClient
) -> None:
    connector = _scoped(client, None)
    with pytest.raises(MediaTimeoutError) as caught:
        await asyncio.wait_for(
            connector.load_from_url_async(
                media_server.url("/slow"), RawMediaIO(), fetch_timeout=0.3
            ),
            NEVER_HANGS_SECONDS,
        )
    assert "deadline" not in str(caught.value)
    assert media_server.count("/slow") == 3  # every attempt of VLLM_MEDIA_FETCH_MAX_RETRIES


async def test_without_a_scope_a_connectors_downloads_are_not_bounded_per_request(
    media_server: MediaServer, client: MediaHTTPClient
) -> None:
    connector = _scoped(client, None)
    url = media_server.url("/slow")
    stalled = [
        asyncio.create_task(connector.load_from_url_async(url, RawMediaIO(), fetch_timeout=120))
        for _ in range(REQUEST_URLS)
    ]
    try:
        # All of them at once. (Under a bound of 16, the rest would arrive only when /slow
        # answers, after 30 s: the wait stays short of that.)
        await _wait_for_requests(
            media_server, "/slow", REQUEST_URLS, seconds=SLOW_ANSWERS_SECONDS / 2
        )
    finally:
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)


# --- the scope itself ----------------------------------------------------------------------


async def test_every_download_counts_from_the_requests_first_connection() -> None:
    scope = MediaRequestFetchScope()
    image, video = scope.deadline(5.0), scope.deadline(30.0)
    # Before the request holds a connection its clock has not started: waiting costs nothing.
    assert image.at == video.at == math.inf and image.allows(1e9)
    async with scope.connection(image):
        started = time.monotonic()
    # One clock: the longest timeout is the request's (approx: the clock's value is a float).
    assert video.at - image.at == pytest.approx(25.0)
    assert image.at == pytest.approx(started + 5.0, abs=0.5)
    assert scope.deadline(5.0).at == image.at  # a later download shares the clock
    assert (image.seconds, video.seconds) == (5.0, 30.0)
    fixed = MediaRequestFetchScope(deadline_seconds=7.0)
    assert fixed.deadline(5.0).seconds == fixed.deadline(30.0).seconds == 7.0


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("inf"), float("nan")])
def test_a_deadline_must_be_positive(seconds: float) -> None:
    with pytest.raises(ValueError):
        MediaRequestFetchScope(deadline_seconds=seconds)


def test_a_bound_of_zero_or_less_is_no_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # As for every cap setting (docs/security.md): a non-positive value disables it.
    assert MediaRequestFetchScope(max_connections=0).max_connections is None
    monkeypatch.setenv("MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS", "0")
    assert MediaRequestFetchScope().max_connections is None


async def test_without_a_bound_every_download_connects_at_once() -> None:
    scope = MediaRequestFetchScope(max_connections=0)
    deadline = RequestDeadline(time.monotonic() + 60, 60)
    async with AsyncExitStack() as stack:
        for _ in range(100):
            await stack.enter_async_context(scope.connection(deadline))


async def test_waiting_for_a_slot_ends_at_the_deadline() -> None:
    scope = MediaRequestFetchScope(max_connections=1)
    deadline = RequestDeadline(time.monotonic() + 0.2, 0.2)
    async with scope.connection(deadline):
        with pytest.raises(RequestDeadlineError):
            await asyncio.wait_for(scope.connection(deadline).__aenter__(), NEVER_HANGS_SECONDS)
    async with scope.connection(RequestDeadline(time.monotonic() + 60, 60)):
        pass  # the slot came back


async def test_a_passed_deadline_refuses_even_a_free_slot() -> None:
    scope = MediaRequestFetchScope()
    with pytest.raises(RequestDeadlineError):
        async with scope.connection(RequestDeadline(time.monotonic() - 1, 1)):
            pass


def test_a_scope_serves_the_synchronous_and_the_async_api(
    media_server: MediaServer, http_client: MediaHTTPClient
) -> None:
    # The sync API downloads on a private loop; the same scope works there and on a caller's.
    connector = _scoped(http_client, MediaRequestFetchScope())
    url = media_server.add_file("a.bin", PAYLOAD)
    assert connector.fetch_image(url, RawMediaIO()).data == PAYLOAD

    async def on_this_loop() -> bytes:
        try:
            return (await connector.fetch_image_async(url, RawMediaIO())).data
        finally:
            await http_client.close()

    assert asyncio.run(on_this_loop()) == PAYLOAD


def test_the_deadline_is_a_final_504() -> None:
    exc = RequestDeadline(0.0, 5.0).passed()
    assert not is_transient(exc)
    mapped = map_transport_error(exc, "http://media.example/a.png")
    assert isinstance(mapped, MediaTimeoutError) and mapped.status_code == 504
    assert "5 s fetch deadline passed" in str(mapped)


async def test_waiting_for_the_clients_shared_slots_costs_no_deadline() -> None:
    # One client's requests share its connections: the one that waits for another to finish
    # starts its clock when it connects, so a client's requests fetch in turn instead of all
    # timing out together (and all failing at the same moment, a burst the server feels).
    shared = asyncio.Semaphore(1)
    first = MediaRequestFetchScope(deadline_seconds=0.3, shared_slots=shared)
    second = MediaRequestFetchScope(deadline_seconds=0.3, shared_slots=shared)
    waiting = second.deadline(5.0)
    async with first.connection(first.deadline(5.0)):
        task = asyncio.create_task(_hold(second, waiting))
        await asyncio.sleep(0.5)  # longer than the second request's whole deadline
    assert await asyncio.wait_for(task, NEVER_HANGS_SECONDS) > 0.1  # connected, time to spare
    late = first.deadline(5.0)
    with pytest.raises(RequestDeadlineError):  # once begun, a request's clock runs as before
        await asyncio.sleep(0.35)
        late.remaining()


async def _hold(scope: MediaRequestFetchScope, deadline: RequestDeadline) -> float:
    async with scope.connection(deadline):
        return deadline.remaining()


async def test_a_failed_request_leaves_no_frames_to_the_garbage_collector(
    media_server: MediaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each of the 32 failed fetches raised through a chain whose tracebacks held their frames,
    # and the frames the exceptions: cycles only a full collection freed, which a client's
    # stalled requests piled up by the thousand (a collection of 100-300 ms every request felt).
    # The tracker lets go of the failures it drops; the server's error boundary, of the one it
    # answers (release_frames).
    tracker = _stalled_chat(media_server, monkeypatch)
    gc.collect()
    gc.disable()
    try:
        with pytest.raises(MediaTimeoutError) as caught:
            await asyncio.wait_for(tracker.resolve_items(), NEVER_HANGS_SECONDS)
        release_frames(caught.value)
        del caught
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = Counter(type(thing).__name__ for thing in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left["frame"] == 0 and left["traceback"] == 0, left.most_common(8)


def test_release_frames_lets_go_of_every_chained_traceback() -> None:
    def fail() -> None:
        try:
            raise ConnectionResetError("origin reset")
        except ConnectionResetError as reset:
            try:
                raise TimeoutError("slow") from reset
            except TimeoutError:
                raise MediaTimeoutError("deadline") from None

    with pytest.raises(MediaTimeoutError) as caught:
        fail()
    error = caught.value
    chain = [error, error.__context__, error.__context__.__cause__]  # type: ignore[union-attr]
    assert all(e is not None and e.__traceback__ is not None for e in chain)
    release_frames(error)
    assert all(e.__traceback__ is None for e in chain if e is not None)
    assert str(error) == "deadline"  # the error itself is untouched
