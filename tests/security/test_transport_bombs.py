"""Compression bombs over HTTP: the cap bounds the decoded bytes, and nothing is retried.

The origin ignores ``Accept-Encoding: identity`` and sends a small gzip/deflate body with an
honest ``Content-Length`` that inflates to 64 MiB. Before the fix aiohttp inflated it whole (the
length check ran after the body was in memory) and the mismatch was retried three times.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import tracemalloc
import zlib

import pytest

from _http_server import MediaServer
from _raw_media import RawMediaIO
from mediaref.exceptions import MediaServerError, MediaTooLargeError
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.connector import MediaConnector, MediaRequestDownloadBudget

MIB = 1024 * 1024
BOMB_DECODED = 64 * MIB
CAP = 1 * MIB


def _compress(data_chunks: int, wbits: int) -> bytes:
    """64 MiB of zeros, streamed through zlib (the test never holds the decoded form)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(MIB)
    parts = [compressor.compress(zeros) for _ in range(data_chunks)]
    parts.append(compressor.flush())
    return b"".join(parts)


BOMBS = {
    "gzip": _compress(BOMB_DECODED // MIB, 16 + zlib.MAX_WBITS),
    "x-gzip": _compress(BOMB_DECODED // MIB, 16 + zlib.MAX_WBITS),
    "deflate": _compress(BOMB_DECODED // MIB, zlib.MAX_WBITS),  # zlib-wrapped, per the RFC
    "raw-deflate": _compress(BOMB_DECODED // MIB, -zlib.MAX_WBITS),  # as some servers send it
}


def _coding(name: str) -> str:
    return "deflate" if name == "raw-deflate" else name


@pytest.mark.parametrize("name", sorted(BOMBS))
async def test_a_bomb_is_cut_off_at_the_cap_without_inflating_it(
    media_server: MediaServer, connector: MediaConnector, name: str
) -> None:
    body = BOMBS[name]
    assert len(body) < CAP  # the honest Content-Length passes the cap: only decoding can tell
    url = media_server.add_encoded(name, body, _coding(name))
    tracemalloc.start()
    try:
        with pytest.raises(MediaTooLargeError, match="decoded body exceeds"):
            await connector.fetch_image_async(url, RawMediaIO(max_bytes=CAP))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The cap plus what is in flight; inflating the bomb would take 64 MiB.
    assert peak < 4 * CAP, peak
    assert media_server.count(f"/encoded/{name}") == 1  # a cap breach is final


def test_the_download_cap_bounds_a_bomb_when_the_decoder_has_no_cap(
    media_server: MediaServer, connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "1")
    url = media_server.add_encoded("gzip", BOMBS["gzip"], "gzip")
    with pytest.raises(MediaTooLargeError, match=f"{MIB}-byte limit"):
        connector.fetch_image(url, RawMediaIO())  # uncapped decoder


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_compressed_body_within_the_cap_is_decoded(
    media_server: MediaServer, connector: MediaConnector, name: str
) -> None:
    payload = os.urandom(5000) + bytes(50_000)
    wbits = {"raw-deflate": -zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}.get(name, 31)
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    body = compressor.compress(payload) + compressor.flush()
    url = media_server.add_encoded(name, body, _coding(name))
    assert connector.fetch_image(url, RawMediaIO(max_bytes=len(payload))).data == payload
    with pytest.raises(MediaTooLargeError):
        connector.fetch_image(url, RawMediaIO(max_bytes=len(payload) - 1))


def test_the_budget_is_charged_the_decoded_size(
    media_server: MediaServer, http_client: MediaHTTPClient
) -> None:
    payload = bytes(20_000)
    url = media_server.add_encoded("small", gzip.compress(payload), "gzip")
    budget = MediaRequestDownloadBudget(30_000)
    request = MediaConnector(http_client, allow_private_ips=True, download_budget=budget)
    assert request.fetch_image(url, RawMediaIO()).data == payload
    assert budget.used == len(payload)  # not the ~60 bytes that crossed the wire
    with pytest.raises(MediaTooLargeError, match="VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB"):
        request.fetch_image(url, RawMediaIO())


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        ("br", b"\x0b\x02\x80hello\x03"),
        ("zstd", b"\x28\xb5\x2f\xfd\x00\x58\x29\x00\x00hello"),
        ("compress", b"\x1f\x9d\x90hello"),
        # Stacked: a bomb of bombs. mtime=0 keeps the bytes, hence the test's id, the same per run.
        ("gzip, gzip", gzip.compress(gzip.compress(b"hello", mtime=0), mtime=0)),
        ("made-up", b"hello"),
    ],
)
def test_a_coding_we_did_not_ask_for_is_refused_and_not_retried(
    media_server: MediaServer, connector: MediaConnector, coding: str, body: bytes
) -> None:
    url = media_server.add_encoded("x", body, coding)
    with pytest.raises(MediaServerError, match="unsupported Content-Encoding"):
        connector.fetch_image(url, RawMediaIO())
    assert media_server.count("/encoded/x") == 1


def test_identity_coding_is_the_body_as_sent(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_encoded("x", b"plain", "identity")
    assert connector.fetch_image(url, RawMediaIO()).data == b"plain"


@pytest.mark.parametrize(
    "body",
    [
        gzip.compress(b"hello" * 100)[:-12],  # the stream stops before its end
        b"\x1f\x8b\x08\x00garbage that is not deflate",
        gzip.compress(b"hello") + b"trailing bytes",
        gzip.compress(b"hello") + gzip.compress(b"more"),  # a second member: not supported
    ],
    ids=["truncated-stream", "corrupt", "trailing-data", "two-members"],
)
def test_a_malformed_compressed_body_is_a_server_error_and_not_retried(
    media_server: MediaServer, connector: MediaConnector, body: bytes
) -> None:
    url = media_server.add_encoded("x", body, "gzip")
    with pytest.raises(MediaServerError) as caught:
        connector.fetch_image(url, RawMediaIO())
    assert type(caught.value) is MediaServerError
    assert media_server.count("/encoded/x") == 1


def test_sessions_do_not_decode(media_server: MediaServer, http_client: MediaHTTPClient) -> None:
    async def session_decodes() -> bool:
        session = await http_client.session(check_addresses=False)
        return bool(session.auto_decompress)

    assert asyncio.run(session_decodes()) is False
