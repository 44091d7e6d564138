"""The render server's front door against hostile clients: one client never stalls the others.

The real stack (``mediaref.serve.server.listening``: the guarded site, aiohttp's runner as
``mediaref serve`` configures it, the application) on a loopback port, small limits so each one
binds quickly. Clients are told apart by their source address (127.0.0.x all reach the server).
Each test pins one finding of the outside attack and fails on the code before its fix:

- half-sent bodies held every render slot (the body was read inside the gate, with no timeout);
- a connection could dribble its headers forever, and a client could open any number;
- one client could take every slot;
- a body of deep, wide or huge-integer JSON was parsed on the event loop, or failed with a 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web

from _front_door import (
    WAIT_S,
    Server,
    post,
    raw_connection,
    request_head,
    running,
    session_from,
    status_line,
    warmed,
)
from _http_server import MediaServer
from _serve_attacks import StallingOrigin
from mediaref.serve import request_body
from mediaref.serve.app import CHAT_ROUTE, HEALTH_ROUTE, INLINE_PARSE_BYTES, STATE_KEY
from mediaref.serve.client_limits import ClientSemaphores
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService

OPTIONS = ServeOptions(
    port=0,
    max_concurrency=4,
    max_concurrency_per_client=2,
    max_connections=40,
    max_connections_per_client=12,
    header_timeout=1.0,
    body_timeout=4.0,
    min_body_rate_kb=4.0,
    max_request_body_mb=4.0,
    max_buffered_body_mb=32.0,
    media_url_allow_private_ips=True,
    access_log=False,
)
TEXT_ONLY = {"messages": [{"role": "user", "content": "Hello there."}], "mm_payload": "none"}


@pytest.fixture(scope="module")
def service() -> Iterator[RenderService]:
    with warmed(OPTIONS) as service:
        yield service


# -- bodies: received whole, within their limits, before a slot ----------------------------------


async def open_half_sent(server: Server, count: int) -> list[Any]:
    """``count`` connections that send a request's headers and one byte of its body."""
    slow = []
    for _ in range(count):
        reader, writer = await raw_connection(server)
        writer.write(request_head(1000) + b"{")
        await writer.drain()
        slow.append((reader, writer, asyncio.create_task(status_line(reader))))
    return slow


async def test_half_sent_bodies_hold_no_render_slot(service: RenderService) -> None:
    # Long timeouts: the half-sent bodies are still arriving while the good request runs.
    async with running(service, header_timeout=20.0, body_timeout=20.0) as server:
        slow = await open_half_sent(server, 8)  # twice the server's render slots
        async with session_from("127.0.0.1") as session:
            status, body = await post(session, server, TEXT_ONLY)
        assert status == 200, body
        assert not any(answered.done() for _, _, answered in slow)
        for _, writer, answered in slow:
            answered.cancel()
            writer.close()


async def test_half_sent_bodies_are_cut_off_with_408(server: Server) -> None:
    for reader, writer, answered in await open_half_sent(server, 8):
        assert (await answered).startswith(b"HTTP/1.1 408"), "slow body not cut off"
        assert await asyncio.wait_for(reader.read(), WAIT_S)  # the error body, then EOF
        writer.close()


async def test_a_body_trickling_under_the_minimum_rate_is_cut_off(server: Server) -> None:
    reader, writer = await raw_connection(server)
    writer.write(request_head(100_000))
    read = asyncio.create_task(status_line(reader))
    sent = 0
    while not read.done() and sent < 200:  # 10 bytes every 50 ms: 200 B/s, under 4 KiB/s
        writer.write(b" " * 10)
        sent += 1
        await asyncio.sleep(0.05)
    assert (await read).startswith(b"HTTP/1.1 408")
    assert sent < 200, "the trickle outlived its whole run"
    writer.close()


async def test_a_declared_body_over_the_cap_is_refused_unread(server: Server) -> None:
    reader, writer = await raw_connection(server)
    writer.write(request_head(64 * 1024 * 1024))  # and no body at all
    await writer.drain()
    assert (await status_line(reader)).startswith(b"HTTP/1.1 413")
    assert await asyncio.wait_for(reader.read(), WAIT_S)  # answered, then closed
    writer.close()


async def test_a_chunked_body_over_the_cap_is_cut_at_the_cap(server: Server) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(80):
            yield b" " * 65536  # 5 MiB in all, over the 4 MiB cap

    async with session_from("127.0.0.1") as session:
        async with session.post(server.url + CHAT_ROUTE, data=chunks()) as response:
            assert response.status == 413


async def test_a_chunked_body_arriving_chunk_by_chunk_is_read_whole(server: Server) -> None:
    # Each HTTP chunk's data read before its closing line end arrives: the parser then reports
    # the chunk's end with no data, which is not the body's end.
    body = json.dumps(TEXT_ONLY).encode()
    parts = [body[:10], body[10:11], body[11:40], body[40:]]
    reader, writer = await raw_connection(server)
    writer.write(
        f"POST {CHAT_ROUTE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode()
    )
    for part in parts:  # a chunk's data, then (apart) the line end that closes it
        for piece in (b"%x\r\n%s" % (len(part), part), b"\r\n"):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.05)
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), WAIT_S)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


async def test_bodies_past_the_clients_byte_share_are_shed_with_503(service: RenderService) -> None:
    # A 1 MiB budget: a client's quarter is 256 KiB, under this one body.
    async with running(service, max_buffered_body_mb=1.0) as server:
        body = {**TEXT_ONLY, "padding": "x" * (300 * 1024)}
        async with session_from("127.0.0.1") as session:
            async with session.post(server.url + CHAT_ROUTE, json=body) as response:
                assert response.status == 503
                assert response.headers["Retry-After"] == "1"
            status, _ = await post(session, server, TEXT_ONLY)  # nothing stayed charged
        assert status == 200


# -- connections ---------------------------------------------------------------------------------


async def test_a_connection_that_dribbles_its_headers_is_closed(server: Server) -> None:
    reader, writer = await raw_connection(server)
    writer.write(b"POST " + CHAT_ROUTE.encode() + b" HTTP/1.1\r\nHost: x\r\n")
    closed = asyncio.create_task(reader.read())
    sent = 0
    while not closed.done() and sent < 100:  # a header byte every 50 ms for up to 5 s
        writer.write(b"X")
        sent += 1
        await asyncio.sleep(0.05)
    assert closed.done(), "the connection outlived its header timeout"
    assert sent < 100
    writer.close()


async def test_connections_past_a_clients_share_are_refused_but_not_others(server: Server) -> None:
    held = [await raw_connection(server, "127.0.0.2") for _ in range(12)]
    reader, writer = await raw_connection(server, "127.0.0.2")
    assert (await status_line(reader)).startswith(b"HTTP/1.1 503")
    writer.close()
    async with session_from("127.0.0.3") as session:
        async with session.get(server.url + HEALTH_ROUTE) as response:
            assert response.status == 200
    for _, held_writer in held:
        held_writer.close()


# -- render slots: a share per client, turns for the waiting ---------------------------------------


@pytest.fixture
def stalling_origin() -> Iterator[MediaServer]:
    origin = MediaServer().start()
    try:
        yield origin
    finally:
        origin.stop()


async def test_one_client_cannot_take_every_render_slot(
    server: Server, stalling_origin: MediaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", str(WAIT_S))
    stalled_url = stalling_origin.url("/stall?after=10")
    stalled = {
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": stalled_url}}]}
        ]
    }
    async with session_from("127.0.0.2") as hog, session_from("127.0.0.3") as other:
        # Four stalled requests from one client: as many as there are slots.
        hogging = [asyncio.create_task(post(hog, server, stalled)) for _ in range(4)]
        for _ in range(200):  # until the hog's share of requests is fetching
            if stalling_origin.count("/stall") >= 2:
                break
            await asyncio.sleep(0.02)
        status, body = await post(other, server, TEXT_ONLY)
        assert status == 200, body
        assert not any(task.done() for task in hogging), "the stalled requests ended first"
        for task in hogging:
            task.cancel()
        await asyncio.gather(*hogging, return_exceptions=True)


# -- JSON: parsed off the loop, within bounds, never a 500 --------------------------------------


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"[" * 5000 + b"]" * 5000, 400),  # the parser's own recursion
        (b'{"messages": ' + b"[" * 70 + b"]" * 70 + b"}", 400),  # over the depth bound
        (b'{"max_tokens": ' + b"9" * 5000 + b"}", 400),  # over Python's integer-digit limit
        (b'{"a": "\xff"}', 400),  # not UTF-8
        (b'{"temperature": NaN}', 400),  # not JSON, though Python's parser takes it
        (b'{"kv_transfer_params": {"x": -Infinity}}', 400),
        (b"{" + b",".join(b'"k%d":0' % i for i in range(1_000_002)) + b"}", 413),
    ],
    ids=["deep-array", "deep-object", "huge-int", "bad-utf8", "nan", "infinity", "too-many-values"],
)
def test_json_bodies_beyond_the_bounds_are_client_errors(raw: bytes, status: int) -> None:
    with pytest.raises(Exception) as refused:
        request_body.parse_json_body(raw)
    assert getattr(refused.value, "status_code", getattr(refused.value, "status", None)) == status


def test_json_within_the_bounds_parses() -> None:
    nested: Any = 1
    for _ in range(request_body.MAX_JSON_DEPTH - 1):
        nested = [nested]
    assert request_body.parse_json_body(json.dumps(nested).encode()) == nested


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 1, "a": 2, "b": [-0, -0.0, 1E2, 5e-324, 1.7976931348623157e308]}',
        b'{"big": [18446744073709551616, -9223372036854775809, ' + b"9" * 4300 + b"]}",
        b' {"text": "\\u00e9\\n\\"\\ud83d\\ude00", "t": true, "f": false, "n": null} ',
        b'{"inf": 1e400}',  # msgspec refuses it; Python's parser reads inf, as before
        b'{"lone": "\\ud800"}',  # likewise a lone surrogate
        b"\xef\xbb\xbf{}",  # and a byte-order mark
    ],
    ids=["plain", "big-ints", "escapes", "overflowing-float", "lone-surrogate", "bom"],
)
def test_json_parses_to_what_pythons_parser_reads(raw: bytes) -> None:
    parsed = request_body.parse_json_body(raw)
    assert repr(parsed) == repr(json.loads(raw))


def test_a_plain_body_is_parsed_without_pythons_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    # msgspec's parser, twice as fast on a render request's megabyte of base64 strings.
    def slow(*args: object, **kwargs: object) -> object:
        raise AssertionError("Python's parser ran")

    monkeypatch.setattr(request_body.json, "loads", slow)
    assert request_body.parse_json_body(b'{"messages": [{"role": "user"}]}') == {
        "messages": [{"role": "user"}]
    }


@pytest.mark.parametrize(
    "size", [0, 1, 64 * 1024 - 1, 64 * 1024, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3_000_001]
)
def test_comma_count_is_exact_across_its_blocks(size: int) -> None:
    # A comma on either side of each block boundary, and the body's own last byte.
    data = bytearray((b'"k":1,' * (size // 6 + 1))[:size])
    for at in (size - 1, (1 << 20) - 1, 1 << 20):
        if 0 <= at < size:
            data[at] = ord(",")
    assert request_body.count_commas(bytes(data)) == bytes(data).count(b",")


def test_a_body_within_the_value_bound_by_its_length_is_not_scanned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A separator is a byte: a body of at most `limit` bytes cannot hold more.
    def no_scan(data: bytes) -> int:
        raise AssertionError("scanned")

    monkeypatch.setattr(request_body, "count_commas", no_scan)
    counted = request_body.JsonValueCount(lambda size: None, limit=10)
    counted(b"a,b,")
    counted(b"c,d,e,")
    assert counted.separators == 10  # the bound its length gives
    assert request_body.parse_json_body(b"[1,2]", max_separators=5) == [1, 2]


def test_values_are_counted_from_the_start_once_the_body_outgrows_the_bound() -> None:
    charged: list[int] = []
    counted = request_body.JsonValueCount(charged.append, limit=10)
    for chunk in (b"a,b,", b"c,d,e,", b",,"):  # 12 bytes: the first two chunks are counted late
        counted(chunk)
    assert counted.separators == 7
    with pytest.raises(web.HTTPRequestEntityTooLarge):
        counted(b",,,,")  # 11 separators
    assert charged == [4, 6, 2, 4]


async def test_a_body_of_too_many_values_is_a_413(server: Server) -> None:
    raw = b'{"messages":[' + b",".join([b"0"] * 1_000_002) + b"]}"
    async with session_from("127.0.0.1") as session:
        async with session.post(server.url + CHAT_ROUTE, data=raw) as response:
            assert response.status == 413
            assert "JSON values" in await response.text()


async def test_deep_chat_template_kwargs_are_a_400_not_a_500(server: Server) -> None:
    deep: Any = {}
    for _ in range(900):
        deep = {"k": deep}
    raw = json.dumps({**TEXT_ONLY, "chat_template_kwargs": deep}).encode()
    async with session_from("127.0.0.1") as session:
        async with session.post(
            server.url + CHAT_ROUTE, data=raw, headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 400
            assert "nests deeper" in (await response.json())["error"]["message"]


async def test_large_bodies_are_parsed_off_the_event_loop(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real_decode = request_body.msgspec.json.decode

    def spying_decode(raw: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real_decode(raw, **kwargs)

    monkeypatch.setattr(request_body.msgspec.json, "decode", spying_decode)
    async with session_from("127.0.0.1") as session:
        padding = "x" * (INLINE_PARSE_BYTES + 1)  # a body too large to parse in place
        status, _ = await post(session, server, {**TEXT_ONLY, "padding": padding})
    assert status == 200
    assert threads and threading.main_thread().name not in threads


async def test_refusals_leave_nothing_held(server: Server) -> None:
    async with session_from("127.0.0.1") as session:
        for raw in (b"[" * 5000, b"{}", b"not json"):
            async with session.post(server.url + CHAT_ROUTE, data=raw) as response:
                assert response.status == 400
        status, _ = await post(session, server, TEXT_ONLY)
        assert status == 200
    server.assert_holds_nothing()


# -- the log -------------------------------------------------------------------------------------


@pytest.mark.parametrize("on", [True, False])
async def test_the_access_log_writes_one_line_a_request_unless_disabled(
    service: RenderService, on: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "mediaref.serve.access"):
        async with running(service, access_log=on) as server:
            async with session_from("127.0.0.1") as session:
                async with session.post(
                    server.url + CHAT_ROUTE, json=TEXT_ONLY, headers={"X-Request-Id": "abc"}
                ) as response:
                    assert response.status == 200
                async with session.get(server.url + HEALTH_ROUTE) as response:
                    assert response.status == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "mediaref.serve.access"]
    if not on:
        assert lines == []
        return
    assert len(lines) == 2
    assert re.fullmatch(
        r"POST /v1/chat/completions/render 200 [\d.]+ms id=chatcmpl-abc client=127\.0\.0\.1",
        lines[0],
    )
    assert lines[1].startswith("GET /health 200 ")


def record_body_pauses(server: Server, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses the server's body pace hands out from now on, in order."""
    pace = server.app[STATE_KEY].body_pace
    pauses: list[float] = []
    real_pause = pace.pause

    def recording_pause(client: str, amount: float, **kwargs: Any) -> float:
        pauses.append(real_pause(client, amount, **kwargs))
        return pauses[-1]

    monkeypatch.setattr(pace, "pause", recording_pause)
    return pauses


async def trickle(server: Server, source: str, stop: asyncio.Event) -> None:
    """A body from ``source`` arriving at 320 KiB/s (over the minimum rate) until ``stop``."""
    _reader, writer = await raw_connection(server, source)
    writer.write(request_head(1_900_000))
    while not stop.is_set():
        writer.write(b" " * 16384)
        await writer.drain()
        await asyncio.sleep(0.05)
    writer.close()


async def test_a_paced_client_waits_but_is_not_timed_out_for_it(
    service: RenderService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 2 MiB burst, then 1 MiB/s while another client's body arrives: four bodies of 0.9 MiB
    # from one client wait for their pace, 1.6 s in all, longer than the header timeout (the
    # minimum rate's grace), and still succeed.
    async with running(
        service, max_request_body_mb=2.0, client_body_rate_mb=1.0, header_timeout=1.0
    ) as server:
        pauses = record_body_pauses(server, monkeypatch)
        stop = asyncio.Event()
        other = asyncio.create_task(trickle(server, "127.0.0.2", stop))
        state = server.app[STATE_KEY]
        for _ in range(int(WAIT_S / 0.01)):  # until the server holds some of its body
            if state.bodies.held_by_others("127.0.0.1"):
                break
            await asyncio.sleep(0.01)
        body = {**TEXT_ONLY, "padding": "x" * (900 * 1024)}
        async with session_from("127.0.0.1") as session:
            answers = await asyncio.gather(*(post(session, server, body) for _ in range(4)))
        stop.set()
        await other
        assert [status for status, _ in answers] == [200] * 4
        assert sum(pauses) > 1.0  # the pace held them (the other client's pauses are 0 here)


async def test_a_client_alone_is_read_at_full_speed(
    service: RenderService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same four bodies from a client alone (a router's, say): no pause at all, and no debt
    # run up either: the moment another client comes, the first is paced from zero, not owed.
    async with running(service, max_request_body_mb=2.0, client_body_rate_mb=1.0) as server:
        pauses = record_body_pauses(server, monkeypatch)
        body = {**TEXT_ONLY, "padding": "x" * (900 * 1024)}
        async with session_from("127.0.0.1") as session:
            answers = await asyncio.gather(*(post(session, server, body) for _ in range(4)))
        assert [status for status, _ in answers] == [200] * 4
        assert pauses and max(pauses) == 0.0
        server.assert_holds_nothing()


async def test_a_clients_requests_together_hold_a_bounded_number_of_media_connections(
    service: RenderService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "2")
    with StallingOrigin() as origin:
        parts = [
            {"type": "image_url", "image_url": {"url": f"{origin.url}?n={i}"}} for i in range(32)
        ]
        stalled = {"messages": [{"role": "user", "content": parts}], "mm_payload": "none"}
        # The service's own share (set at start, from --max-fetch-connections-per-client).
        monkeypatch.setattr(service, "fetch_slots", ClientSemaphores(8))
        async with running(service) as server:
            async with session_from("127.0.0.2") as session:
                answers = await asyncio.gather(*(post(session, server, stalled) for _ in range(3)))
        assert [status for status, _ in answers] == [504, 504, 504]
        # Each request alone could have held 16; the three together held 8 at once, never more.
        assert origin.most_at_once == 8


async def test_a_client_refused_past_its_rate_waits_for_its_refusals_others_do_not(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mediaref.serve import app as app_module

    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(seconds: float, *args: Any) -> Any:
        waits.append(seconds)
        return await real_sleep(0)

    monkeypatch.setattr(app_module.asyncio, "sleep", recording_sleep)
    async with session_from("127.0.0.2") as flooder, session_from("127.0.0.3") as other:
        for _ in range(30):  # 10 a second with bursts of 20: the last ten wait
            async with flooder.post(server.url + CHAT_ROUTE, data=b"not json") as response:
                assert response.status == 400
        flooded = len(waits)
        async with other.post(server.url + CHAT_ROUTE, data=b"not json") as response:
            assert response.status == 400
    assert flooded >= 9 and len(waits) == flooded  # the other client's refusal did not wait
