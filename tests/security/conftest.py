"""Fixtures only the security tests request: a second origin, and a raw-socket origin."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from _http_server import MediaServer, RawOrigin


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
