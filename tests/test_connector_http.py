"""http(s) fetches against a real aiohttp server.

Success, statuses and retries, timeouts, size caps, the per-request budget, concurrency, the sync
bridge and session lifetime.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest

from _http_server import MediaServer
from _raw_media import RawAudioIO, RawMediaIO, RawVideoIO
from mediaref.exceptions import (
    MediaClientError,
    MediaNotFoundError,
    MediaServerError,
    MediaTimeoutError,
    MediaTooLargeError,
)
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media._transport.loop_thread import run_sync
from mediaref.media.connector import MediaConnector, MediaRequestDownloadBudget

PAYLOAD = os.urandom(4000)
MIB = 1024 * 1024


def test_sync_and_async_fetch_return_the_same_ref(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)

    sync_ref = connector.fetch_image(url, RawMediaIO())
    async_ref = asyncio.run(connector.fetch_image_async(url, RawMediaIO()))

    assert sync_ref.data == async_ref.data == PAYLOAD
    assert sync_ref.key == async_ref.key
    assert async_ref.decode() == PAYLOAD
    assert media_server.count("/files/a.bin") == 2


async def test_async_fetch_builds_refs_on_the_media_pool(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    threads: list[str] = []

    class ThreadRecordingIO(RawMediaIO):
        def load_bytes_ref(self, data: bytes):  # type: ignore[no-untyped-def]
            threads.append(threading.current_thread().name)
            return super().load_bytes_ref(data)

    url = media_server.add_file("a.bin", PAYLOAD)
    await connector.fetch_image_async(url, ThreadRecordingIO())
    assert threads and threads[0].startswith("mediaref-media")


async def test_sync_fetch_works_from_a_thread_whose_loop_is_running(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    assert connector.fetch_image(url, RawMediaIO()).data == PAYLOAD


def test_sync_fetch_on_the_private_fetch_loop_raises_instead_of_deadlocking(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)

    async def sync_fetch_inside_the_private_loop() -> object:
        return connector.fetch_image(url, RawMediaIO())

    with pytest.raises(RuntimeError, match="_async variant"):
        run_sync(sync_fetch_inside_the_private_loop())


async def test_two_hundred_concurrent_async_fetches(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    urls = [media_server.add_file(f"f{i}.bin", PAYLOAD + i.to_bytes(2, "big")) for i in range(200)]
    refs = await asyncio.gather(*(connector.fetch_image_async(u, RawMediaIO()) for u in urls))
    assert [ref.data for ref in refs] == [PAYLOAD + i.to_bytes(2, "big") for i in range(200)]
    assert media_server.total_requests() == 200


@pytest.mark.parametrize(
    ("status", "error_type", "attempts"),
    [
        (404, MediaNotFoundError, 1),
        (410, MediaNotFoundError, 1),
        (403, MediaClientError, 1),
        (400, MediaClientError, 1),
        (429, MediaServerError, 3),  # the origin throttling us is not the client's fault
        (408, MediaTimeoutError, 3),
        (500, MediaServerError, 3),
        (503, MediaServerError, 3),
    ],
)
def test_status_maps_to_error_type_and_transient_ones_are_retried(
    media_server: MediaServer,
    connector: MediaConnector,
    monkeypatch: pytest.MonkeyPatch,
    status: int,
    error_type: type[Exception],
    attempts: int,
) -> None:
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "3")
    url = media_server.url(f"/status/{status}")
    with pytest.raises(error_type) as caught:
        connector.fetch_image(url, RawMediaIO())
    assert type(caught.value) is error_type
    assert url in str(caught.value) and str(status) in str(caught.value)
    assert media_server.count(f"/status/{status}") == attempts


@pytest.mark.parametrize(("setting", "attempts"), [("1", 1), ("0", 1), ("-3", 1), ("4", 4)])
def test_retries_follow_the_setting(
    media_server: MediaServer,
    connector: MediaConnector,
    monkeypatch: pytest.MonkeyPatch,
    setting: str,
    attempts: int,
) -> None:
    # As in vLLM, VLLM_MEDIA_FETCH_MAX_RETRIES counts attempts in all, and there is always one.
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", setting)
    with pytest.raises(MediaServerError):
        connector.fetch_image(media_server.url("/status/500"), RawMediaIO())
    assert media_server.count("/status/500") == attempts


def test_a_transient_failure_is_cured_by_a_retry(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    media_server.add_file("a.bin", PAYLOAD)
    ref = connector.fetch_image(media_server.url("/flaky/2/a.bin"), RawMediaIO())
    assert ref.data == PAYLOAD
    assert media_server.count("/flaky/2/a.bin") == 3


@pytest.mark.parametrize(
    ("fetch", "setting"),
    [
        ("fetch_image", "VLLM_IMAGE_FETCH_TIMEOUT"),
        ("fetch_video", "VLLM_VIDEO_FETCH_TIMEOUT"),
        ("fetch_audio", "VLLM_AUDIO_FETCH_TIMEOUT"),
    ],
)
def test_slow_origin_times_out_with_the_modality_timeout(
    media_server: MediaServer,
    connector: MediaConnector,
    monkeypatch: pytest.MonkeyPatch,
    fetch: str,
    setting: str,
) -> None:
    # Only this modality's timeout is short: if another one applied, the fetch would wait for
    # the slow origin (30 s) and the test's own timeout would fail it.
    for other in (
        "VLLM_IMAGE_FETCH_TIMEOUT",
        "VLLM_VIDEO_FETCH_TIMEOUT",
        "VLLM_AUDIO_FETCH_TIMEOUT",
    ):
        monkeypatch.setenv(other, "60")
    monkeypatch.setenv(setting, "0.3")
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "2")
    io = {"fetch_image": RawMediaIO, "fetch_video": RawVideoIO, "fetch_audio": RawAudioIO}[fetch]()
    with pytest.raises(MediaTimeoutError, match="timed out"):
        getattr(connector, fetch)(media_server.url("/slow"), io)
    assert media_server.count("/slow") == 2  # timeouts are retried


def test_explicit_fetch_timeout_overrides_the_modality_setting(
    media_server: MediaServer, connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "60")
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "1")
    with pytest.raises(MediaTimeoutError):
        connector.load_from_url(media_server.url("/slow"), RawMediaIO(), fetch_timeout=0.3)


@pytest.mark.parametrize("declare_length", [True, False], ids=["content-length", "chunked"])
def test_oversized_body_is_cut_off_near_the_cap(
    media_server: MediaServer, connector: MediaConnector, declare_length: bool
) -> None:
    total = 256 * MIB
    url = media_server.url(f"/stream?total={total}" + ("&declare=1" if declare_length else ""))
    with pytest.raises(MediaTooLargeError) as caught:
        connector.fetch_image(url, RawMediaIO(max_bytes=1 * MIB))
    assert ("Content-Length" in str(caught.value)) is declare_length
    (record,) = media_server.wait_streams_finished()
    # The server can only get ahead of the reader by what the socket buffers hold; a download
    # that was not cut off would have sent all 256 MiB.
    assert record.sent_bytes < 64 * MIB
    assert media_server.count("/stream") == 1  # a size refusal is final, not retried


@pytest.mark.parametrize("chunked", [True, False])
def test_body_at_the_cap_is_accepted(
    media_server: MediaServer, connector: MediaConnector, chunked: bool
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD) + ("?chunked=1" if chunked else "")
    assert connector.fetch_image(url, RawMediaIO(max_bytes=len(PAYLOAD))).data == PAYLOAD
    with pytest.raises(MediaTooLargeError):
        connector.fetch_image(url, RawMediaIO(max_bytes=len(PAYLOAD) - 1))


def test_truncated_body_is_a_server_error_and_not_retried(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    # A body shorter than its Content-Length is final: retrying an origin that sends other than
    # it declares only multiplies what it can make us download.
    with pytest.raises(MediaServerError):
        connector.fetch_image(media_server.url("/truncated"), RawMediaIO())
    assert media_server.count("/truncated") == 1


def test_connection_refused_is_a_server_error(connector: MediaConnector) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    with pytest.raises(MediaServerError):
        connector.fetch_image(f"http://127.0.0.1:{free_port}/x", RawMediaIO())


def test_request_budget_spans_the_requests_downloads(
    media_server: MediaServer, http_client: MediaHTTPClient
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    budget = MediaRequestDownloadBudget(10_000)
    request = MediaConnector(http_client, allow_private_ips=True, download_budget=budget)
    request.fetch_image(url, RawMediaIO())
    request.fetch_image(url, RawMediaIO())
    with pytest.raises(MediaTooLargeError, match="VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB"):
        request.fetch_image(url, RawMediaIO())
    assert budget.used == 2 * len(PAYLOAD)
    # The next request has a budget of its own.
    next_request = MediaConnector(
        http_client, allow_private_ips=True, download_budget=MediaRequestDownloadBudget(10_000)
    )
    assert next_request.fetch_image(url, RawMediaIO()).data == PAYLOAD


def test_budget_limit_defaults_to_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MediaRequestDownloadBudget().limit_bytes == 256 * MIB  # vLLM's default
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB", "0")
    assert MediaRequestDownloadBudget().limit_bytes is None
    unlimited = MediaRequestDownloadBudget()
    unlimited.charge(10**12)
    assert unlimited.used == 10**12


def test_a_long_lived_connector_never_runs_out(
    media_server: MediaServer, http_client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The README's pattern: one connector reused for many fetches. The budget belongs to a
    # request, so a connector built without one has no request-wide limit.
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB", "0.25")
    url = media_server.add_file("a.bin", os.urandom(100 * 1024))
    reused = MediaConnector(http_client, allow_private_ips=True)
    for _ in range(5):
        reused.fetch_image(url, RawMediaIO())
    assert media_server.count("/files/a.bin") == 5


def test_retried_attempts_count_against_the_budget(
    media_server: MediaServer, http_client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As in vLLM, "including retried attempts": bytes received are charged even when the
    # attempt that received them failed and was retried.
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "3")
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "0.5")
    budget = MediaRequestDownloadBudget(10_000)
    request = MediaConnector(http_client, allow_private_ips=True, download_budget=budget)
    url = media_server.add_file("a.bin", PAYLOAD)
    assert request.fetch_image(media_server.url("/flaky/2/a.bin"), RawMediaIO()).data == PAYLOAD
    assert budget.used == len(PAYLOAD)  # 500s carry no body
    with pytest.raises(MediaTimeoutError):  # 1000 bytes, then silence: a timeout, retried
        request.fetch_image(media_server.url("/stall?after=1000"), RawMediaIO())
    assert media_server.count("/stall") == 3
    assert budget.used == len(PAYLOAD) + 3 * 1000
    with pytest.raises(MediaTooLargeError):
        request.fetch_image(url, RawMediaIO())


async def test_concurrent_downloads_share_one_budget(
    media_server: MediaServer, http_client: MediaHTTPClient
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    request = MediaConnector(
        http_client, allow_private_ips=True, download_budget=MediaRequestDownloadBudget(10_000)
    )
    results = await asyncio.gather(
        *(request.fetch_image_async(url, RawMediaIO()) for _ in range(6)), return_exceptions=True
    )
    fetched = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, MediaTooLargeError)]
    assert len(fetched) + len(refused) == 6
    assert 1 <= len(fetched) <= 2 and len(fetched) * len(PAYLOAD) <= 10_000


def test_sessions_close_when_their_event_loop_shuts_down(media_server: MediaServer) -> None:
    client = MediaHTTPClient()
    request = MediaConnector(client, allow_private_ips=True)
    url = media_server.add_file("a.bin", PAYLOAD)
    opened = []

    async def fetch_and_keep_the_session() -> None:
        await request.fetch_image_async(url, RawMediaIO())
        opened.append(await client.session(check_addresses=False))

    asyncio.run(fetch_and_keep_the_session())
    assert opened[0].closed
    assert not client._by_loop  # no entry left behind for the finished loop


async def test_client_close_closes_the_running_loops_sessions(
    media_server: MediaServer, connector: MediaConnector, http_client: MediaHTTPClient
) -> None:
    await connector.fetch_image_async(media_server.add_file("a.bin", PAYLOAD), RawMediaIO())
    session = await http_client.session(check_addresses=False)
    await http_client.close()
    assert session.closed
    # A later fetch on the same loop opens a fresh session.
    assert (
        await connector.fetch_image_async(media_server.url("/files/a.bin"), RawMediaIO())
    ).data == PAYLOAD


def test_environment_proxy_carries_the_request(
    media_server: MediaServer, connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    media_server.add_file("a.bin", PAYLOAD)
    monkeypatch.setenv("http_proxy", media_server.url(""))
    ref = connector.fetch_image("http://media.example/files/a.bin", RawMediaIO())
    assert ref.data == PAYLOAD
    assert media_server.count("/files/a.bin", host="media.example") == 1


def test_no_proxy_bypasses_the_proxy(
    media_server: MediaServer, connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    assert connector.fetch_image(url, RawMediaIO()).data == PAYLOAD
