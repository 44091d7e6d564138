"""A render server on a loopback port, as ``mediaref serve`` runs it, and clients for it.

Clients are told apart by their source address: every 127.0.0.x reaches the server, and the
server counts each as a client of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
from aiohttp import web

from mediaref.serve.app import CHAT_ROUTE, STATE_KEY
from mediaref.serve.options import ServeOptions
from mediaref.serve.server import listening
from mediaref.serve.service import RenderService

WAIT_S = 30.0


@dataclasses.dataclass
class Server:
    host: str
    port: int
    service: RenderService
    app: web.Application

    def assert_holds_nothing(self) -> None:
        state = self.app[STATE_KEY]
        assert (state.in_flight, state.gate.in_use, state.gate.waiting()) == (0, 0, 0)
        assert state.bodies.used == 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@contextlib.contextmanager
def warmed(options: ServeOptions) -> Iterator[RenderService]:
    """A service for ``options``, its models loaded and warmed up (a module fixture's body)."""
    service = RenderService(options)
    try:
        service.warmup()
        yield service
    finally:
        service.close()


@contextlib.asynccontextmanager
async def running(service: RenderService, **changes: Any) -> AsyncIterator[Server]:
    original = service.options
    service.options = dataclasses.replace(original, **changes)
    try:
        async with listening(service) as (app, _site, host, port):
            yield Server(host, port, service, app)
    finally:
        service.options = original


def session_from(source: str) -> aiohttp.ClientSession:
    """A client session whose connections come from ``source`` (a 127.0.0.x address)."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(WAIT_S))


async def post(
    session: aiohttp.ClientSession, server: Server, body: Any, route: str = CHAT_ROUTE
) -> tuple[int, Any]:
    async with session.post(server.url + route, json=body) as response:
        return response.status, await response.json()


async def raw_connection(
    server: Server, source: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(server.host, server.port, local_addr=(source, 0))


def request_head(length: int, route: str = CHAT_ROUTE) -> bytes:
    return (
        f"POST {route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def status_line(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.readline(), WAIT_S)
