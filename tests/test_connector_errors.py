"""Every transport failure reaches the caller as a mediaref error; nothing lower-level leaks."""

from __future__ import annotations

import asyncio
import binascii
import errno
import os
import socket
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from _http_server import MediaServer
from _raw_media import RawMediaIO
from mediaref.exceptions import (
    MediaClientError,
    MediaNotAllowedError,
    MediaNotFoundError,
    MediaNotImplementedError,
    MediaRefError,
    MediaServerError,
    MediaTimeoutError,
    MediaTooLargeError,
)
from mediaref.media._transport.errors import (
    AddressRefusedError,
    BadResponseError,
    HTTPStatusError,
    RefusedError,
    TooLargeError,
    is_transient,
    map_transport_error,
    transport_errors,
)
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.connector import MediaConnector

_KEY = ConnectionKey("media.example", 80, False, True, None, None, None)
_URL = "http://media.example/a.png"
_REQUEST_INFO = aiohttp.RequestInfo(URL(_URL), "GET", CIMultiDictProxy(CIMultiDict()), URL(_URL))


def _dns_error(code: int) -> aiohttp.ClientConnectorDNSError:
    return aiohttp.ClientConnectorDNSError(_KEY, socket.gaierror(code, "lookup failed"))


LOW_LEVEL = [
    # (exception, public type, transient)
    (asyncio.TimeoutError(), MediaTimeoutError, True),
    (aiohttp.ServerTimeoutError("read"), MediaTimeoutError, True),
    (aiohttp.ConnectionTimeoutError("connect"), MediaTimeoutError, True),
    (
        aiohttp.ClientConnectorError(_KEY, ConnectionRefusedError(errno.ECONNREFUSED, "refused")),
        MediaServerError,
        True,
    ),
    (_dns_error(socket.EAI_NONAME), MediaClientError, False),
    (_dns_error(socket.EAI_AGAIN), MediaServerError, True),
    (aiohttp.ServerDisconnectedError(), MediaServerError, True),
    (aiohttp.ClientPayloadError("short body"), MediaServerError, False),  # final, as in vLLM
    (aiohttp.ClientConnectionResetError("reset"), MediaServerError, True),
    (aiohttp.ClientOSError(errno.EPIPE, "broken pipe"), MediaServerError, True),
    (aiohttp.ClientSSLError(_KEY, OSError("bad handshake")), MediaServerError, False),
    (aiohttp.InvalidURL("http://[x"), MediaClientError, False),
    (aiohttp.ClientResponseError(_REQUEST_INFO, (), status=500), MediaServerError, False),
    (HTTPStatusError(404, "Not Found"), MediaNotFoundError, False),
    (HTTPStatusError(429, "Too Many Requests"), MediaServerError, True),
    (HTTPStatusError(408, "Request Timeout"), MediaTimeoutError, True),
    (HTTPStatusError(502, "Bad Gateway"), MediaServerError, True),
    (HTTPStatusError(418, "I'm a teapot"), MediaClientError, False),
    (RefusedError("domain"), MediaNotAllowedError, False),
    (AddressRefusedError("localhost", "127.0.0.1"), MediaNotAllowedError, False),
    (TooLargeError("big"), MediaTooLargeError, False),
    (BadResponseError("unsupported Content-Encoding"), MediaServerError, False),
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), MediaClientError, False),
    (socket.gaierror(socket.EAI_AGAIN, "Temporary failure"), MediaServerError, True),
    (OSError(errno.ENAMETOOLONG, "File name too long"), MediaClientError, False),
    (OSError(errno.EMFILE, "Too many open files"), MediaServerError, False),
    (OSError(errno.ELOOP, "Too many levels of symbolic links"), MediaClientError, False),
    (
        aiohttp.ClientConnectorError(_KEY, OSError(errno.EMFILE, "Too many open files")),
        MediaServerError,
        True,
    ),
    (FileNotFoundError(errno.ENOENT, "missing"), MediaNotFoundError, False),
    (PermissionError(errno.EACCES, "denied"), MediaNotAllowedError, False),
    (IsADirectoryError(errno.EISDIR, "dir"), MediaClientError, False),
    (OSError(errno.EIO, "I/O error"), MediaServerError, False),
    (ConnectionResetError(errno.ECONNRESET, "reset"), MediaServerError, False),
    (binascii.Error("Incorrect padding"), MediaClientError, False),
    (UnicodeError("label too long"), MediaClientError, False),
    (ValueError("Invalid URL"), MediaClientError, False),
]


@pytest.mark.parametrize(
    ("exc", "public_type", "transient"),
    LOW_LEVEL,
    ids=[f"{type(e).__name__}-{i}" for i, (e, _, _) in enumerate(LOW_LEVEL)],
)
def test_lower_level_exceptions_map_to_the_public_hierarchy(
    exc: BaseException, public_type: type[MediaRefError], transient: bool
) -> None:
    mapped = map_transport_error(exc, _URL)
    assert type(mapped) is public_type
    assert _URL in str(mapped) and mapped.url == _URL  # type: ignore[attr-defined]
    assert is_transient(exc) is transient


def test_public_errors_pass_through_and_unknown_ones_propagate() -> None:
    public = MediaNotFoundError("gone")
    assert map_transport_error(public, _URL) is public
    with pytest.raises(RuntimeError, match="a bug"), transport_errors(_URL):
        raise RuntimeError("a bug")  # not a transport failure: must not be disguised as one
    with pytest.raises(MediaClientError) as caught, transport_errors(_URL):
        raise binascii.Error("Incorrect padding")
    assert isinstance(caught.value.__cause__, binascii.Error)


def _failure_urls(
    server: MediaServer, tmp_path: Path
) -> dict[str, tuple[str, type[MediaRefError]]]:
    (tmp_path / "dir").mkdir()
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    free_port = free.getsockname()[1]
    free.close()
    return {
        "bad-base64": ("data:image/png;base64,***", MediaClientError),
        "no-comma": ("data:image/png;base64", MediaClientError),
        "not-base64": ("data:image/png,abc", MediaNotImplementedError),
        "file-missing": ("file://" + quote(str(tmp_path / "none.png")), MediaNotFoundError),
        "file-directory": ("file://" + quote(str(tmp_path / "dir")), MediaClientError),
        "file-outside": ("file:///etc/hostname", MediaNotAllowedError),
        "scheme": ("ftp://media.example/a.png", MediaNotAllowedError),
        "http-404": (server.url("/status/404"), MediaNotFoundError),
        "http-500": (server.url("/status/500"), MediaServerError),
        "http-truncated": (server.url("/truncated"), MediaServerError),
        "http-refused": (f"http://127.0.0.1:{free_port}/a.png", MediaServerError),
        "http-too-large": (server.url("/stream?total=100000"), MediaTooLargeError),
        "http-timeout": (server.url("/slow"), MediaTimeoutError),
        "no-such-host": ("http://no-such-host.invalid/a.png", MediaClientError),
        "bad-ipv6": ("http://[::1/a.png", MediaClientError),
        "idna": ("http://" + "ü" * 64 + ".example/a.png", MediaClientError),
        "bad-port": ("http://127.0.0.1:99999/a.png", MediaClientError),
        "redirect-loop": (server.url("/loop"), MediaNotAllowedError),
    }


FAILURES = [
    "bad-base64",
    "no-comma",
    "not-base64",
    "file-missing",
    "file-directory",
    "file-outside",
    "scheme",
    "http-404",
    "http-500",
    "http-truncated",
    "http-refused",
    "http-too-large",
    "http-timeout",
    "no-such-host",
    "bad-ipv6",
    "idna",
    "bad-port",
    "redirect-loop",
]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("failure", FAILURES)
def test_every_failure_mode_raises_a_mediaref_error(
    media_server: MediaServer,
    http_client: MediaHTTPClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
    mode: str,
) -> None:
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "0.2")
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "1")
    url, expected = _failure_urls(media_server, tmp_path)[failure]
    request = MediaConnector(
        http_client,
        allowed_local_media_path=str(tmp_path),
        allow_private_ips=True,
    )
    io_ = RawMediaIO(max_bytes=50_000)
    with pytest.raises(MediaRefError) as caught:
        if mode == "sync":
            request.fetch_image(url, io_)
        else:
            asyncio.run(request.fetch_image_async(url, io_))
    assert type(caught.value) is expected, repr(caught.value)
    assert os.fspath(url)[:40] in str(caught.value)
