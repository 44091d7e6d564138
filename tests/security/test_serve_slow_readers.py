"""A client must take its response: one that stops reading loses the connection.

A render response carries the processed tensors: megabytes for one image (~17 MB for 1080p).
Written to a client that reads nothing, it used to wait forever, holding its bytes, its handler
and its connection; a client's share of connections (256) times that was gigabytes held for as
long as it liked. Each write is now held to ``--min-send-rate-kb`` after the header grace and
to ``--send-timeout`` overall (:class:`mediaref.serve.client_limits.TransferPace`).

The clients here keep their receive buffers small, so the kernel's buffers cannot take a whole
response on their behalf.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import pytest

from _front_door import WAIT_S, Server, running, session_from, warmed
from _serve_attacks import chat, image, jpeg_url
from mediaref.serve.app import CHAT_ROUTE, STATE_KEY
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService

OPTIONS = ServeOptions(
    port=0,
    max_concurrency=4,
    header_timeout=1.0,
    max_request_body_mb=8.0,
    min_send_rate_kb=128.0,
    media_url_allow_private_ips=True,
    access_log=False,
)
# ~4 MB of response JSON (the image's tensors in vLLM's format): more than the kernel buffers
# of a client that reads nothing can take.
BODY = json.dumps({**chat(image(jpeg_url(7, (960, 720)))), "mm_payload": "tensors"}).encode()


@pytest.fixture(scope="module")
def service() -> Iterator[RenderService]:
    with warmed(OPTIONS) as service:
        yield service


async def small_window_connection(
    server: Server,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (server.host, server.port))
    return await asyncio.open_connection(sock=sock, limit=1 << 20)


async def send_request(writer: asyncio.StreamWriter) -> None:
    writer.write(
        f"POST {CHAT_ROUTE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n".encode()
        + BODY
    )
    await writer.drain()


async def read_head(reader: asyncio.StreamReader) -> int:
    """The status line and headers; returns the Content-Length."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    raise AssertionError(f"no Content-Length in {head!r}")


def cut_count(server: Server) -> float:
    return server.service.metrics.responses_cut._value.get()


async def until(predicate: object, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not predicate():  # type: ignore[operator]
        assert loop.time() < deadline, what
        await asyncio.sleep(0.05)


async def test_a_client_that_stops_reading_loses_the_connection(service: RenderService) -> None:
    async with running(service) as server:
        before = cut_count(server)
        reader, writer = await small_window_connection(server)
        await send_request(writer)
        length = await read_head(reader)
        assert length > 2_000_000
        # Reads nothing more: after the grace, the server must close the connection.
        await until(lambda: cut_count(server) > before, "the response waited on the client")
        received = 0
        try:
            while chunk := await asyncio.wait_for(reader.read(1 << 20), WAIT_S):
                received += len(chunk)
        except ConnectionResetError:
            pass  # the abort's RST
        assert received < length, "the whole response arrived"
        writer.close()
        await until(lambda: server.app[STATE_KEY].in_flight == 0, "a request still held")
        server.assert_holds_nothing()
        # Nobody else felt it.
        async with session_from("127.0.0.2") as session:
            async with session.post(server.url + CHAT_ROUTE, data=BODY) as response:
                assert response.status == 200
                assert len(await response.read()) == length


async def test_a_slow_reader_above_the_minimum_rate_gets_its_whole_response(
    service: RenderService,
) -> None:
    async with running(service) as server:
        before = cut_count(server)
        reader, writer = await small_window_connection(server)
        await send_request(writer)
        length = await read_head(reader)
        received = 0
        while received < length:  # 32 KiB every 20 ms: ~1.6 MB/s, over 128 KiB/s
            chunk = await asyncio.wait_for(reader.read(32 * 1024), WAIT_S)
            assert chunk, "the connection closed early"
            received += len(chunk)
            await asyncio.sleep(0.02)
        assert received == length
        assert cut_count(server) == before
        writer.close()
