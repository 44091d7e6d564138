"""``data:`` URLs: RFC 2397 base64 only, parameters accepted, errors clear, size checked first."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pybase64
import pytest

from _raw_media import RawMediaIO
from mediaref.exceptions import (
    MediaClientError,
    MediaNotAllowedError,
    MediaNotImplementedError,
    MediaTooLargeError,
    describe_url,
)
from mediaref.media._transport import data_url
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.connector import MediaConnector

PAYLOAD = os.urandom(3000)
B64 = pybase64.b64encode(PAYLOAD).decode("ascii")


@pytest.mark.parametrize(
    "header",
    [
        "image/png;base64",
        "image/png;charset=utf-8;base64",
        "IMAGE/PNG;name=a.png;base64",
        "image/png;nonsense;base64",  # parameters before ";base64" are ignored, as vLLM does
        ";base64",  # no media type: RFC 2397's text/plain
    ],
)
def test_base64_data_url_round_trips(connector: MediaConnector, header: str) -> None:
    ref = connector.fetch_image(f"data:{header},{B64}", RawMediaIO())
    assert ref.data == PAYLOAD and ref.decode() == PAYLOAD


def test_sync_and_async_agree(connector: MediaConnector) -> None:
    url = f"data:image/png;base64,{B64}"
    sync_ref = connector.fetch_image(url, RawMediaIO())
    async_ref = asyncio.run(connector.fetch_image_async(url, RawMediaIO()))
    assert sync_ref.key == async_ref.key and async_ref.data == PAYLOAD


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (f"data:image/png;base64{B64}", "missing ','"),
        ("data:image/png;base64,****", "invalid base64"),
        (f"data:image/png;base64,{B64[:-1]}", "invalid base64"),  # bad padding
        (f"data:image/png;base64,{B64[:100]}\n{B64[100:]}", "invalid base64"),  # no whitespace
        ("data:image/png;base64,ÿÿÿÿ", "invalid base64"),
    ],
)
def test_malformed_data_url_is_a_client_error(
    connector: MediaConnector, url: str, reason: str
) -> None:
    with pytest.raises(MediaClientError, match=reason) as caught:
        connector.fetch_image(url, RawMediaIO())
    assert type(caught.value) is MediaClientError


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png,hello%20world",
        f"data:image/png;charset=utf-8,{B64}",
        f"data:image/png;BASE64,{B64}",  # vLLM's strict grammar: lower case
        f"data:image/png; base64,{B64}",
        f"data:base64,{B64}",  # "base64" as a media type, not the encoding
    ],
)
def test_a_data_url_not_in_base64_is_not_implemented_as_in_vllm(
    connector: MediaConnector, url: str
) -> None:
    # vLLM raises NotImplementedError (its server answers 501); here it is also a client error.
    with pytest.raises(NotImplementedError, match="Only base64") as caught:
        connector.fetch_image(url, RawMediaIO())
    assert isinstance(caught.value, MediaNotImplementedError)
    assert caught.value.status_code == 501


def test_error_message_names_a_shortened_data_url(connector: MediaConnector) -> None:
    url = f"data:image/png;base64,{B64}*"
    with pytest.raises(MediaClientError) as caught:
        connector.fetch_image(url, RawMediaIO())
    message = str(caught.value)
    assert describe_url(url) in message
    assert B64 not in message and len(message) < 300


def test_oversized_payload_is_refused_before_decoding(
    connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    decodes = []
    real_decode = pybase64.b64decode

    def counting_decode(*args: Any, **kwargs: Any) -> bytes:
        decodes.append(1)
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(data_url.pybase64, "b64decode", counting_decode)
    url = f"data:image/png;base64,{B64}"
    with pytest.raises(MediaTooLargeError):
        connector.fetch_image(url, RawMediaIO(max_bytes=len(PAYLOAD) - 1))
    assert decodes == []
    assert connector.fetch_image(url, RawMediaIO(max_bytes=len(PAYLOAD))).data == PAYLOAD
    assert decodes == [1]


def test_video_jpeg_data_url_goes_to_the_decoders_base64_form(connector: MediaConnector) -> None:
    frames = ",".join(pybase64.b64encode(f"frame{i}".encode()).decode() for i in range(3))
    io = RawMediaIO()
    # RawMediaIO's inherited load_base64_ref would reject the comma-joined frames: the
    # connector must hand the text over untouched rather than decode it itself.
    with pytest.raises(ValueError):
        connector.fetch_video(f"data:video/jpeg;base64,{frames}", io)
    assert (io.base64_refs, io.bytes_refs) == (1, 0)


def test_data_urls_are_not_subject_to_domain_or_address_policy(
    http_client: MediaHTTPClient,
) -> None:
    request = MediaConnector(
        http_client, allowed_media_domains=["example.com"], allow_private_ips=False
    )
    assert request.fetch_image(f"data:image/png;base64,{B64}", RawMediaIO()).data == PAYLOAD


@pytest.mark.parametrize(
    "url", ["gopher://x/y", "javascript:alert(1)", "/etc/passwd", "C:\\media\\a.png"]
)
def test_unsupported_schemes_are_refused(connector: MediaConnector, url: str) -> None:
    with pytest.raises(MediaNotAllowedError, match="unsupported URL scheme"):
        connector.fetch_image(url, RawMediaIO())


async def test_a_short_data_url_is_read_on_the_loop_a_long_one_on_the_pool(
    connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A short one costs less to read than the media pool's round trip; a long one must never
    # hold the loop (the media pool takes it, as vLLM's thread pool takes every one).
    from mediaref.media import _fetch_drivers as drivers_module

    pooled: list[object] = []
    real_executor = drivers_module.get_media_executor

    def recording_executor() -> Any:
        pooled.append(None)
        return real_executor()

    monkeypatch.setattr(drivers_module, "get_media_executor", recording_executor)
    io = RawMediaIO()
    short = "data:application/octet-stream;base64," + pybase64.b64encode(b"x" * 1000).decode()
    ref = await connector.load_from_url_async(short, io)
    assert ref.data == b"x" * 1000 and pooled == []
    size = drivers_module.INLINE_DATA_URL_CHARS  # its base64 is a third longer: over the bound
    long = "data:application/octet-stream;base64," + pybase64.b64encode(b"y" * size).decode()
    ref = await connector.load_from_url_async(long, io)
    assert ref.data == b"y" * size and pooled == [None]
