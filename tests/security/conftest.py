"""Fixtures only the security tests request: a second origin, a raw-socket origin, and a render
server on a loopback port for the modules that define a ``service`` fixture."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from _front_door import Server, running
from _http_server import MediaServer, RawOrigin
from mediaref.serve.service import RenderService


@pytest.fixture
def second_media_server() -> Iterator[MediaServer]:
    """Another origin: same host, its own port."""
    server = MediaServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def raw_origin() -> Iterator[RawOrigin]:
    """A socket server answering with registered raw bytes, for what aiohttp will not send."""
    origin = RawOrigin().start()
    try:
        yield origin
    finally:
        origin.stop()


@pytest.fixture
async def server(service: RenderService) -> AsyncIterator[Server]:
    """The module's ``service`` behind the real front door (``mediaref serve``'s stack)."""
    async with running(service) as server:
        yield server
