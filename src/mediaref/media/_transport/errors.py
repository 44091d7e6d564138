"""The one table that maps what the transport raises into :mod:`mediaref.exceptions`.

Transport modules raise a lower-level library error or one of the small private errors below;
nothing else decides what a client sees. What can reach the table (``TRANSPORT_ERROR_TYPES``):

=================================  ==========================================================
raised                             public error
=================================  ==========================================================
``RefusedError`` (policy)          ``MediaNotAllowedError`` 403 (``AddressRefusedError``: the
                                   host only, never the non-public address it resolved to)
``TooLargeError`` (caps, budget)   ``MediaTooLargeError`` 413
``MediaNotImplementedError``       itself, 501: a ``data:`` URL not in base64 (as vLLM)
``HTTPStatusError``                404/410 -> ``MediaNotFoundError``; 408 -> ``MediaTimeoutError``;
                                   other 4xx but 429 -> ``MediaClientError``; 429, 5xx ->
                                   ``MediaServerError``
``BadResponseError``               ``MediaServerError`` 502: a body that contradicts its headers,
                                   a content coding we did not ask for, a corrupt compressed body
``asyncio.TimeoutError``           ``MediaTimeoutError`` 504 (aiohttp's timeouts included)
``RequestDeadlineError``           ``MediaTimeoutError`` 504: the request's fetch deadline passed
aiohttp DNS error                  "no such host" -> ``MediaClientError`` 400, else 502
``aiohttp.InvalidURL``             ``MediaClientError`` 400
other ``aiohttp.ClientError``      ``MediaServerError`` 502 (connection, payload, TLS, parse)
``socket.gaierror``                like aiohttp's DNS error (the proxied-target check)
``FileNotFoundError``              ``MediaNotFoundError`` 404
``PermissionError``                ``MediaNotAllowedError`` 403
not a regular file, name too long  ``MediaClientError`` 400 (the client's URL)
``OSError`` EMFILE/ENFILE/ENOMEM   ``MediaServerError`` 502, "out of resources" (this server's)
other ``OSError``                  ``MediaServerError`` 502
``binascii.Error``                 ``MediaClientError`` 400 (malformed base64)
``UnicodeError``, ``ValueError``   ``MediaClientError`` 400 (malformed URL)
=================================  ==========================================================

:func:`map_transport_error` turns any of them into a public error that names the requested URL
(a ``data:`` URL shortened) and the reason; :func:`is_transient` says which failures a retry may
cure. Reasons never quote more than a short prefix of what an origin sent. Errors that are
already public pass through unchanged, and an exception the table does not know is a bug and
propagates as is.
"""

from __future__ import annotations

import asyncio
import binascii
import errno
import socket
from collections.abc import Callable
from typing import Any

import aiohttp

from mediaref.exceptions import (
    MediaClientError,
    MediaNotAllowedError,
    MediaNotFoundError,
    MediaNotImplementedError,
    MediaRefError,
    MediaServerError,
    MediaTimeoutError,
    MediaTooLargeError,
    describe_url,
)

# getaddrinfo's "no such name" answers: the URL names a host that does not exist (client's fault).
_NO_SUCH_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
# This server ran out of something: not the client's fault, and not the origin's either.
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
# A file: URL naming something that cannot be a media file is the client's mistake.
_BAD_LOCAL_NAME = {errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.ELOOP}
_MAX_REASON_CHARS = 200


class RefusedError(Exception):
    """The policy refuses the URL, a redirect hop, a resolved address or a local path."""


class AddressRefusedError(RefusedError):
    """A host is (or resolves to) an address that is not public.

    The message says which host, never which address a hostname resolved to: that would let a
    client map the internal network. ``address`` keeps it for logs.
    """

    def __init__(self, host: str, address: object) -> None:
        if str(address) == host.strip("[]"):
            message = f"{host} is a non-public address"
        else:
            message = f"{host} resolves to a non-public address"
        super().__init__(message)
        self.host = host
        self.address = address


class TooLargeError(Exception):
    """The payload is over a size cap or the request's download budget."""


class BadResponseError(Exception):
    """The origin's response is malformed in a way a retry will not cure."""


class RequestDeadlineError(Exception):
    """The request's fetch deadline passed (see ``request_scope``); never retried."""


class HTTPStatusError(Exception):
    """The origin answered with a status that carries no media."""

    def __init__(self, status: int, reason: str | None) -> None:
        super().__init__(f"the origin answered HTTP {status} {reason or ''}".rstrip())
        self.status = status


_Verdict = tuple[type[MediaRefError], str]


def _text(exc: object) -> str:
    """``str(exc)``, cut short; never raises (a half-built exception's __str__ may)."""
    try:
        text = str(exc)
    except Exception:  # the mapper must never replace the error it maps
        text = ""
    text = text or type(exc).__name__
    return text if len(text) <= _MAX_REASON_CHARS else text[:_MAX_REASON_CHARS] + "..."


def _os_reason(exc: BaseException) -> str:
    # strerror only: str(OSError) carries file names, which are this server's paths.
    return str(getattr(exc, "strerror", None) or type(exc).__name__)


def _status_error_type(status: int) -> type[MediaRefError]:
    if status in (404, 410):
        return MediaNotFoundError
    if status == 408:
        return MediaTimeoutError
    # 429 is the origin throttling this server, not a fault in the client's request.
    if 400 <= status < 500 and status != 429:
        return MediaClientError
    return MediaServerError


def _is_no_such_host(exc: BaseException) -> bool:
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        exc = getattr(exc, "_os_error", None)  # type: ignore[assignment]
    return isinstance(exc, socket.gaierror) and exc.errno in _NO_SUCH_HOST


def _dns(exc: Any) -> _Verdict:
    host = getattr(exc, "host", None) if isinstance(exc, aiohttp.ClientError) else None
    if _is_no_such_host(exc):
        return MediaClientError, f"host {host!r} does not exist" if host else "no such host"
    os_error = getattr(exc, "_os_error", exc)
    return MediaServerError, f"could not resolve {host or 'the host'!r}: {_os_reason(os_error)}"


def _os_error(exc: Any) -> _Verdict:
    code = getattr(exc, "errno", None)
    if code in _OUT_OF_RESOURCES:
        return MediaServerError, f"this server is out of resources: {_os_reason(exc)}"
    if code == errno.ENAMETOOLONG:
        return MediaClientError, "file name too long"
    if code in _BAD_LOCAL_NAME:
        return MediaClientError, "not a regular file"
    return MediaServerError, f"I/O error: {_os_reason(exc)}"


def _client_error(exc: Any) -> _Verdict:
    os_error = getattr(exc, "_os_error", None)
    if isinstance(os_error, OSError) and os_error.errno in _OUT_OF_RESOURCES:
        return _os_error(os_error)
    return MediaServerError, f"{type(exc).__name__}: {_text(exc)}"


# The table: the first row whose type matches wins, so narrower types come first.
_TABLE: tuple[tuple[type[BaseException], Callable[[Any], _Verdict]], ...] = (
    (RefusedError, lambda e: (MediaNotAllowedError, _text(e))),
    # Raised public by the data: URL parser (no longer a ValueError: vLLM answers it 501).
    (MediaNotImplementedError, lambda e: (MediaNotImplementedError, _text(e))),
    (TooLargeError, lambda e: (MediaTooLargeError, _text(e))),
    (
        HTTPStatusError,
        lambda e: (_status_error_type(getattr(e, "status", 0)), _text(e)),
    ),
    (BadResponseError, lambda e: (MediaServerError, _text(e))),
    # Before OSError and aiohttp.ClientError: TimeoutError is an OSError, and aiohttp's own
    # timeouts subclass both ClientError and asyncio.TimeoutError.
    (RequestDeadlineError, lambda e: (MediaTimeoutError, _text(e))),
    (asyncio.TimeoutError, lambda e: (MediaTimeoutError, "timed out")),
    (TimeoutError, lambda e: (MediaTimeoutError, "timed out")),
    (aiohttp.ClientConnectorDNSError, _dns),
    (aiohttp.ClientSSLError, lambda e: (MediaServerError, f"TLS failed: {_text(e)}")),
    (aiohttp.InvalidURL, lambda e: (MediaClientError, f"invalid URL: {_text(e)}")),
    (aiohttp.NonHttpUrlClientError, lambda e: (MediaClientError, f"invalid URL: {_text(e)}")),
    (aiohttp.ClientError, _client_error),
    (socket.gaierror, _dns),
    (FileNotFoundError, lambda e: (MediaNotFoundError, "no such file")),
    (PermissionError, lambda e: (MediaNotAllowedError, f"access refused: {_os_reason(e)}")),
    (IsADirectoryError, lambda e: (MediaClientError, "not a regular file")),
    (NotADirectoryError, lambda e: (MediaClientError, "not a regular file")),
    (OSError, _os_error),
    (binascii.Error, lambda e: (MediaClientError, f"invalid base64 payload: {_text(e)}")),
    (UnicodeError, lambda e: (MediaClientError, f"invalid URL: {type(e).__name__}")),
    (ValueError, lambda e: (MediaClientError, f"invalid URL: {_text(e)}")),
)

TRANSPORT_ERROR_TYPES: tuple[type[BaseException], ...] = tuple(row[0] for row in _TABLE)
"""Every exception type the transport raises on purpose or lets through from a lower library."""


def classify(exc: BaseException) -> _Verdict | None:
    """The public type and the reason for ``exc``; None when ``exc`` is not a transport error."""
    for exc_type, verdict in _TABLE:
        if isinstance(exc, exc_type):
            return verdict(exc)
    return None


def map_transport_error(exc: BaseException, url: str) -> BaseException:
    """The public error for ``exc`` raised while fetching ``url``; ``exc`` itself if it has none."""
    if isinstance(exc, MediaRefError):
        return exc
    classified = classify(exc)
    if classified is None:
        return exc
    error_type, reason = classified
    message = f"Failed to fetch {describe_url(url)}: {reason}"
    return error_type(message, url=url)  # type: ignore[call-arg]


def is_transient(exc: BaseException) -> bool:
    """Whether another attempt could succeed: timeouts, dropped connections, 5xx, 408 and 429.

    A body that is cut short or contradicts its ``Content-Length`` (``ClientPayloadError``), a
    cap or budget breach and a malformed response are final: retrying an origin that sends more
    or less than it declared only multiplies what it can make this server download. So is the
    request's passed deadline (``RequestDeadlineError``): no time is left for another attempt.
    """
    if isinstance(exc, HTTPStatusError):
        status = getattr(exc, "status", 0)
        return status >= 500 or status in (408, 429)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return True
    if isinstance(exc, (aiohttp.ClientConnectorDNSError, socket.gaierror)):
        return not _is_no_such_host(exc)
    if isinstance(exc, aiohttp.ClientSSLError):
        return False
    return isinstance(exc, aiohttp.ClientConnectionError)


class transport_errors:  # lower-case: used like a function, ``with transport_errors(url):``
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
    "TRANSPORT_ERROR_TYPES",
    "AddressRefusedError",
    "BadResponseError",
    "HTTPStatusError",
    "RefusedError",
    "RequestDeadlineError",
    "TooLargeError",
    "classify",
    "is_transient",
    "map_transport_error",
    "transport_errors",
]
