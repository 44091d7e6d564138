"""The one table that maps what the transport raises into :mod:`mediaref.exceptions`.

Transport modules raise either a lower-level library error (aiohttp, asyncio, OSError, binascii,
yarl's ValueError, UnicodeError from IDNA) or one of the small private errors below; nothing else
decides what a client sees. :func:`map_transport_error` turns any of them into a public error that
names the requested URL (a ``data:`` URL shortened) and the reason, and :func:`is_transient` says
which failures a retry may cure. Errors that are already public pass through unchanged, and an
exception the table does not know is a bug and propagates as is.
"""

from __future__ import annotations

import asyncio
import binascii
import socket

import aiohttp

from mediaref.exceptions import (
    MediaClientError,
    MediaNotAllowedError,
    MediaNotFoundError,
    MediaRefError,
    MediaServerError,
    MediaTimeoutError,
    MediaTooLargeError,
    describe_url,
)

# getaddrinfo's "no such name" answers: the URL names a host that does not exist (client's fault).
_NO_SUCH_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


class RefusedError(Exception):
    """The policy refuses the URL, a redirect hop, a resolved address or a local path."""


class AddressRefusedError(RefusedError):
    """A host is (or resolves to) an address that is not public."""

    def __init__(self, host: str, address: object) -> None:
        what = "is" if str(address) == host else "resolves to"
        super().__init__(f"{host} {what} non-public address {address}")
        self.host = host
        self.address = address


class TooLargeError(Exception):
    """The payload is over the decoder's encoded-size cap or the request's download budget."""


class HTTPStatusError(Exception):
    """The origin answered with a status that carries no media."""

    def __init__(self, status: int, reason: str | None) -> None:
        super().__init__(f"the origin answered HTTP {status} {reason or ''}".rstrip())
        self.status = status


def _status_error_type(status: int) -> type[MediaRefError]:
    if status in (404, 410):
        return MediaNotFoundError
    if status == 408:
        return MediaTimeoutError
    # 429 is the origin throttling this server, not a fault in the client's request.
    if 400 <= status < 500 and status != 429:
        return MediaClientError
    return MediaServerError


def _is_no_such_host(exc: aiohttp.ClientConnectorDNSError) -> bool:
    return isinstance(exc.os_error, socket.gaierror) and exc.os_error.errno in _NO_SUCH_HOST


def _classify(exc: BaseException) -> tuple[type[MediaRefError], str] | None:
    """The public type and the reason for ``exc``; None when ``exc`` is not a transport error."""
    if isinstance(exc, RefusedError):
        return MediaNotAllowedError, str(exc)
    if isinstance(exc, TooLargeError):
        return MediaTooLargeError, str(exc)
    if isinstance(exc, HTTPStatusError):
        return _status_error_type(exc.status), str(exc)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return MediaTimeoutError, "timed out"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        if _is_no_such_host(exc):
            return MediaClientError, f"host {exc.host!r} does not exist"
        return MediaServerError, f"could not resolve {exc.host!r}: {exc.os_error}"
    if isinstance(exc, aiohttp.ClientSSLError):
        return MediaServerError, f"TLS failed: {exc}"
    if isinstance(exc, (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError)):
        return MediaClientError, f"invalid URL: {exc}"
    if isinstance(exc, aiohttp.ClientError):
        return MediaServerError, f"{type(exc).__name__}: {exc}"
    if isinstance(exc, FileNotFoundError):
        return MediaNotFoundError, "no such file"
    if isinstance(exc, PermissionError):
        return MediaNotAllowedError, f"access refused: {exc.strerror or exc}"
    if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
        return MediaClientError, "not a regular file"
    if isinstance(exc, OSError):
        return MediaServerError, f"I/O error: {exc.strerror or exc}"
    if isinstance(exc, binascii.Error):
        return MediaClientError, f"invalid base64 payload: {exc}"
    if isinstance(exc, UnicodeError):
        return MediaClientError, f"invalid URL: {exc.__class__.__name__}"
    if isinstance(exc, ValueError):
        return MediaClientError, f"invalid URL: {exc}"
    return None


def map_transport_error(exc: BaseException, url: str) -> BaseException:
    """The public error for ``exc`` raised while fetching ``url``; ``exc`` itself if it has none."""
    if isinstance(exc, MediaRefError):
        return exc
    classified = _classify(exc)
    if classified is None:
        return exc
    error_type, reason = classified
    return error_type(f"Failed to fetch {describe_url(url)}: {reason}", url=url)  # type: ignore[call-arg]


def is_transient(exc: BaseException) -> bool:
    """Whether another attempt could succeed: timeouts, dropped connections, 5xx, 408 and 429."""
    if isinstance(exc, HTTPStatusError):
        return exc.status >= 500 or exc.status in (408, 429)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return True
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return not _is_no_such_host(exc)
    if isinstance(exc, aiohttp.ClientSSLError):
        return False
    return isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError))


class transport_errors:  # noqa: N801  (used like a function: ``with transport_errors(url):``)
    """Map any transport exception raised inside the block; leave others untouched.

    A class rather than ``@contextmanager``: it wraps every fetch, and a generator-based context
    manager costs several times more per use.
    """

    __slots__ = ("_url",)

    def __init__(self, url: str) -> None:
        self._url = url

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
        mapped = map_transport_error(exc, self._url)
        if mapped is not exc:
            raise mapped from exc


__all__ = [
    "AddressRefusedError",
    "HTTPStatusError",
    "RefusedError",
    "TooLargeError",
    "is_transient",
    "map_transport_error",
    "transport_errors",
]
