"""Hostile origins: framing an HTTP server would never send, slow bodies, lying headers.

Every case ends in a mediaref error (or the body, where it is well-formed) within the fetch
timeout, is not retried unless a retry could cure it, and never reads more than the cap.
"""

from __future__ import annotations

import os

import pytest

from _http_server import MediaServer, RawOrigin
from _raw_media import RawMediaIO
from mediaref.exceptions import (
    MediaNotAllowedError,
    MediaServerError,
    MediaTimeoutError,
    MediaTooLargeError,
)
from mediaref.media.connector import MediaConnector

MIB = 1024 * 1024


def _response(head: bytes, body: bytes = b"") -> bytes:
    return b"HTTP/1.1 " + head + b"\r\n\r\n" + body


HOSTILE = {
    "huge-chunk-size": _response(
        b"200 OK\r\nTransfer-Encoding: chunked", b"F" * 100_000 + b"\r\nabc"
    ),
    "overflowing-chunk-size": _response(
        b"200 OK\r\nTransfer-Encoding: chunked", b"FFFFFFFFFFFFFFFFFFFFFFFF\r\nabc"
    ),
    "content-length-lie": _response(b"200 OK\r\nContent-Length: 100000", b"abc"),
    "negative-content-length": _response(b"200 OK\r\nContent-Length: -5", b"abc"),
    "two-content-lengths": _response(b"200 OK\r\nContent-Length: 3\r\nContent-Length: 5", b"abcde"),
    "megabyte-location": _response(b"302 Found\r\nLocation: /" + b"a" * MIB),
    "megabyte-status-line": _response(b"200 " + b"O" * MIB + b"\r\nContent-Length: 3", b"abc"),
    "thousands-of-headers": _response(b"200 OK\r\n" + b"X-A: b\r\n" * 100_000 + b"X-B: c"),
    "not-http": b"SSH-2.0-OpenSSH_9.6\r\n",
    # Found by the fuzzer: a bare other scheme ("https:") resolves to a hop without a host.
    "hostless-location": _response(b"302 Found\r\nLocation: https:\r\nContent-Length: 0"),
    "unparsable-location": _response(b"302 Found\r\nLocation: http://[::1\r\nContent-Length: 0"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_malformed_responses_are_final_server_errors(
    raw_origin: RawOrigin,
    connector: MediaConnector,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "3")
    url = raw_origin.add(name, HOSTILE[name])
    with pytest.raises(MediaServerError) as caught:
        connector.fetch_image(url, RawMediaIO(max_bytes=10 * MIB))
    assert type(caught.value) is MediaServerError
    assert len(str(caught.value)) < 1000  # no megabyte of the origin's bytes in the message
    assert raw_origin.requests[name] == 1  # a malformed response is not a transient failure


def test_a_declared_length_over_the_cap_is_refused_before_the_body(
    raw_origin: RawOrigin, connector: MediaConnector
) -> None:
    url = raw_origin.add("big", _response(b"200 OK\r\nContent-Length: 999999999999", b"abc"))
    with pytest.raises(MediaTooLargeError, match="Content-Length"):
        connector.fetch_image(url, RawMediaIO(max_bytes=MIB))


@pytest.mark.parametrize(
    ("name", "raw", "body"),
    [
        (  # llhttp skips chunk extensions as they stream: nothing accumulates
            "long-chunk-extension",
            _response(
                b"200 OK\r\nTransfer-Encoding: chunked",
                b"3;" + b"x" * MIB + b"\r\nabc\r\n0\r\n\r\n",
            ),
            b"abc",
        ),
        (  # a transfer coding we did not ask for is not decoded either: the decoder sees it
            "transfer-encoding-gzip",
            _response(b"200 OK\r\nTransfer-Encoding: gzip, chunked", b"3\r\nabc\r\n0\r\n\r\n"),
            b"abc",
        ),
        (  # no length, no chunks: the body runs to the end of the connection, under the cap
            "read-until-close",
            _response(b"200 OK\r\nConnection: close", b"abcdef"),
            b"abcdef",
        ),
    ],
)
def test_odd_but_well_formed_bodies(
    raw_origin: RawOrigin, connector: MediaConnector, name: str, raw: bytes, body: bytes
) -> None:
    url = raw_origin.add(name, raw)
    assert connector.fetch_image(url, RawMediaIO(max_bytes=MIB)).data == body


def test_a_body_running_to_close_is_cut_off_at_the_cap(
    raw_origin: RawOrigin, connector: MediaConnector
) -> None:
    url = raw_origin.add("endless", _response(b"200 OK\r\nConnection: close", bytes(4 * MIB)))
    with pytest.raises(MediaTooLargeError, match="body exceeds"):
        connector.fetch_image(url, RawMediaIO(max_bytes=MIB))


def test_a_trickling_body_ends_at_the_fetch_timeout(
    media_server: MediaServer, connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slowloris: one byte every 50 ms keeps any idle-read timeout happy; the total one is not.
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "0.5")
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "2")
    with pytest.raises(MediaTimeoutError):
        connector.fetch_image(media_server.url("/trickle"), RawMediaIO())
    records = media_server.wait_streams_finished()  # the client hung up on both attempts
    assert len(records) == 2


def test_a_redirect_chain_through_hostile_hops_is_capped(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    with pytest.raises(MediaNotAllowedError, match="more than 10 redirects"):
        connector.fetch_image(media_server.url("/loop"), RawMediaIO())
    assert media_server.count("/loop") == 11


def test_a_redirect_body_is_not_read(raw_origin: RawOrigin, connector: MediaConnector) -> None:
    # A redirect that also sends a large body: the hop's body is dropped, not buffered.
    target = raw_origin.add("target", _response(b"200 OK\r\nContent-Length: 3", b"abc"))
    raw = _response(
        b"302 Found\r\nLocation: " + target.encode() + b"\r\nContent-Length: " + b"%d" % (64 * MIB),
        os.urandom(MIB),
    )
    url = raw_origin.add("redirect", raw)
    assert connector.fetch_image(url, RawMediaIO(max_bytes=MIB)).data == b"abc"


def test_no_cookie_set_for_one_request_rides_on_another(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    # The sessions are shared by every request of the process; a cookie jar would carry one
    # client's session cookie (set by an origin, or by a redirect hop) into another's fetches.
    url = media_server.url("/cookie", host="localhost")  # a name: jars skip IP-address hosts
    assert connector.fetch_image(url, RawMediaIO()).data == b"cookie"
    assert connector.fetch_image(url, RawMediaIO()).data == b"cookie"
    assert media_server.cookies_received == [None, None]
