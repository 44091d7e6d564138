"""The server's listening socket, with a bound on the connections it keeps open.

Every connection costs a descriptor and a little memory whatever it sends, and aiohttp accepts
as many as arrive. :class:`GuardedTCPSite` is aiohttp's ``TCPSite`` whose protocol factory first
counts the connection against :class:`~mediaref.serve.client_limits.ConnectionCounts` (a total
and a per-client share): a connection over either bound is answered ``503`` and closed before a
byte of it is read, so a client opening thousands of idle connections runs into its own share and
nobody else's.

The time a connection may take to send a request's headers is aiohttp's keep-alive timer
(``keepalive_timeout``, which the server sets to ``--header-timeout``): it is armed when the
connection opens and after each response, and closes a connection still waiting for a whole
request line and headers when it fires, however many bytes have trickled in meanwhile
(``tests/security/test_serve_front_door.py`` pins this).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

from aiohttp import web

from mediaref.serve.client_limits import UNKNOWN_CLIENT, ConnectionCounts
from mediaref.serve.errors import error_body


def _refusal() -> bytes:
    body = json.dumps(
        error_body(503, "too many connections from this client or to this server; retry later")
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


_REFUSAL = _refusal()


class _CountedProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the count (see the module docstring)."""

    def __init__(self, make_inner: Callable[[], Any], counts: ConnectionCounts) -> None:
        self._make_inner = make_inner
        self._inner: Any = None
        self._counts = counts
        self._client: str | None = None  # set once the connection is counted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        client = str(peer[0]) if peer else UNKNOWN_CLIENT
        if not self._counts.try_open(client):
            # Refused before aiohttp's protocol for it is even made: a flood of connections
            # costs an accept and a write each, nothing more.
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(_REFUSAL)
            transport.close()
            return
        self._client = client
        self._inner = self._make_inner()
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._client is None:
            return
        self._counts.close(self._client)
        self._client = None
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._client is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._client is not None else None

    def pause_writing(self) -> None:
        if self._client is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._client is not None:
            self._inner.resume_writing()


class GuardedTCPSite(web.TCPSite):
    """``web.TCPSite`` whose connections are counted against ``counts`` (module docstring)."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        counts: ConnectionCounts,
        *,
        sock: socket.socket | None = None,
    ):
        super().__init__(runner, host, port)
        self.counts = counts
        self.sock = sock
        """A listening socket to accept on (a worker's, shared with its siblings) instead of
        binding ``host:port``."""

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site; TCPSite.start would bind unguarded
        server = self._runner.server
        assert server is not None
        factory: Callable[[], asyncio.Protocol] = lambda: _CountedProtocol(server, self.counts)  # noqa: E731
        loop = asyncio.get_running_loop()
        if self.sock is not None:
            self._server = await loop.create_server(factory, sock=self.sock)
        else:
            self._server = await loop.create_server(
                factory, self._host, self._port, backlog=self._backlog
            )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


__all__ = ["GuardedTCPSite"]
