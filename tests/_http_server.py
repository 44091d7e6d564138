"""A real aiohttp server on 127.0.0.1 for the connector tests, counting what it is asked and sends.

It runs on its own thread and event loop, so synchronous fetches (which block the calling thread,
even one running an event loop) and async fetches both reach it. Every request is logged with its
Host header and path; streaming handlers record how many body bytes they managed to write before
the client hung up, which is how the tests see that an oversized download was cut off early.

Routes:
  /files/{name}            registered bytes (``?chunked=1``: no Content-Length)
  /status/{code}           an empty response with that status
  /flaky/{failures}/{name} 500 for the first ``failures`` requests to this path, then the file
  /slow                    waits until the server stops (or 30 s), then 200
  /redirect?to=URL         302 to URL (``&status=`` picks another redirect status)
  /loop                    302 to itself
  /stream?total=N          N zero bytes in 64 KiB chunks (``&declare=1``: with Content-Length)
  /truncated               declares 1000 bytes, sends 10, drops the connection
  /stall?after=N           N bytes (chunked), then silence until the server stops (or 30 s)
  /trickle                 one byte every 50 ms until the client hangs up (slowloris)
  /encoded/{name}          a body registered with ``add_encoded``, sent with its Content-Encoding
  /cookie                  a body, and Set-Cookie; records the Cookie header each request carried

:class:`RawOrigin` is a bare socket server for what aiohttp's server will not send: it answers
each path with registered raw bytes (status line, headers and body as given), then closes.

The fixtures that start these servers (``media_server``, ``raw_origin``, ...) live in
``conftest.py`` (and ``security/conftest.py``); tests request them by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web

_CHUNK = 64 * 1024
_RAW_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
_WAIT_SECONDS = 30.0


@dataclass
class StreamRecord:
    sent_bytes: int = 0
    finished: threading.Event = field(default_factory=threading.Event)


class MediaServer:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.encoded: dict[str, tuple[bytes, str]] = {}
        self.cookies_received: list[str | None] = []
        self.streams: list[StreamRecord] = []
        self._log: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="test-media-server", daemon=True)
        self._stopping: asyncio.Event | None = None
        self.port = 0

    # --- test-facing API -----------------------------------------------------------------------

    def url(self, path: str, *, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def add_file(self, name: str, data: bytes) -> str:
        self.files[name] = data
        return self.url(f"/files/{name}")

    def add_encoded(self, name: str, body: bytes, content_encoding: str) -> str:
        """Serve ``body`` as is under ``Content-Encoding: content_encoding`` (with its length)."""
        self.encoded[name] = (body, content_encoding)
        return self.url(f"/encoded/{name}")

    def count(self, path: str, *, host: str | None = None) -> int:
        """Requests received for ``path``, from any host unless ``host`` (e.g. ``localhost``)."""
        with self._lock:
            return sum(
                n for (h, p), n in self._log.items() if p == path and (host is None or h == host)
            )

    def total_requests(self) -> int:
        with self._lock:
            return sum(self._log.values())

    def wait_streams_finished(self) -> list[StreamRecord]:
        for record in list(self.streams):
            assert record.finished.wait(_WAIT_SECONDS), "stream handler never finished"
        return self.streams

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> MediaServer:
        self._thread.start()
        assert self._ready.wait(_WAIT_SECONDS), "test server did not start"
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(_WAIT_SECONDS)
        self._thread.join(_WAIT_SECONDS)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._startup())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _startup(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(middlewares=[self._count_middleware])
        app.router.add_get("/files/{name}", self._file)
        app.router.add_get("/status/{code}", self._status)
        app.router.add_get("/flaky/{failures}/{name}", self._flaky)
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/loop", self._loop_redirect)
        app.router.add_get("/stream", self._stream)
        app.router.add_get("/truncated", self._truncated)
        app.router.add_get("/stall", self._stall)
        app.router.add_get("/trickle", self._trickle)
        app.router.add_get("/encoded/{name}", self._encoded)
        app.router.add_get("/cookie", self._cookie)
        # handler_cancellation: a client that gives up must not leave a handler running.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        assert self._stopping is not None
        self._stopping.set()
        await self._runner.cleanup()
        self._loop.call_soon(self._loop.stop)

    # --- handlers ------------------------------------------------------------------------------

    @web.middleware
    async def _count_middleware(self, request: web.Request, handler):  # type: ignore[no-untyped-def]
        host = (request.host or "").rsplit(":", 1)[0]
        with self._lock:
            self._log[(host, request.path)] += 1
        return await handler(request)

    async def _file(self, request: web.Request) -> web.StreamResponse:
        data = self.files.get(request.match_info["name"])
        if data is None:
            raise web.HTTPNotFound()
        if request.query.get("chunked"):
            response = web.StreamResponse()
            response.enable_chunked_encoding()
            await response.prepare(request)
            for start in range(0, len(data), _CHUNK):
                await response.write(data[start : start + _CHUNK])
            await response.write_eof()
            return response
        return web.Response(body=data, content_type="application/octet-stream")

    async def _status(self, request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]))

    async def _flaky(self, request: web.Request) -> web.StreamResponse:
        if self.count(request.path) <= int(request.match_info["failures"]):
            return web.Response(status=500)
        return await self._file(request)

    async def _slow(self, request: web.Request) -> web.Response:
        assert self._stopping is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), _WAIT_SECONDS)
        return web.Response(body=b"late")

    async def _redirect(self, request: web.Request) -> web.Response:
        status = int(request.query.get("status", "302"))
        return web.Response(status=status, headers={"Location": request.query["to"]})

    async def _loop_redirect(self, request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "/loop"})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        total = int(request.query["total"])
        record = StreamRecord()
        self.streams.append(record)
        response = web.StreamResponse()
        if request.query.get("declare"):
            response.content_length = total
        else:
            response.enable_chunked_encoding()
        chunk = bytes(_CHUNK)
        try:
            await response.prepare(request)
            while record.sent_bytes < total:
                piece = chunk[: total - record.sent_bytes]
                await response.write(piece)
                record.sent_bytes += len(piece)
            await response.write_eof()
        except ConnectionError:
            pass  # the client hung up: exactly what the cap should make it do
        finally:  # also when the hang-up arrives as cancellation of this handler
            record.finished.set()
        return response

    async def _truncated(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "1000"})
        await response.prepare(request)
        await response.write(b"x" * 10)
        assert request.transport is not None
        request.transport.close()
        return response

    async def _stall(self, request: web.Request) -> web.StreamResponse:
        assert self._stopping is not None
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(bytes(int(request.query["after"])))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), _WAIT_SECONDS)
        return response

    async def _trickle(self, request: web.Request) -> web.StreamResponse:
        record = StreamRecord()
        self.streams.append(record)
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            for _ in range(int(_WAIT_SECONDS / 0.05)):
                await response.write(b"x")
                record.sent_bytes += 1
                await asyncio.sleep(0.05)
        except ConnectionError:
            pass
        finally:
            record.finished.set()
        return response

    async def _encoded(self, request: web.Request) -> web.Response:
        body, coding = self.encoded[request.match_info["name"]]
        return web.Response(
            body=body,
            headers={"Content-Encoding": coding, "Content-Type": "application/octet-stream"},
        )

    async def _cookie(self, request: web.Request) -> web.Response:
        self.cookies_received.append(request.headers.get("Cookie"))
        return web.Response(
            body=b"cookie", headers={"Set-Cookie": "session=secret; Path=/; Max-Age=3600"}
        )


class RawOrigin:
    """A socket server answering ``GET /<name>`` with the raw bytes registered for ``name``."""

    def __init__(self) -> None:
        self.responses: dict[str, bytes] = {}
        self.requests: Counter[str] = Counter()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="test-raw-origin", daemon=True)

    def add(self, name: str, raw: bytes) -> str:
        self.responses[name] = raw
        return f"http://127.0.0.1:{self.port}/{name}"

    def start(self) -> RawOrigin:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(_WAIT_SECONDS)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:  # the accept timeout: look at the stop flag again
                continue
            with conn:
                conn.settimeout(_WAIT_SECONDS)
                with contextlib.suppress(OSError):
                    head = conn.recv(65536)
                    name = head.split(b" ", 2)[1].decode("ascii", "replace").lstrip("/")
                    self.requests[name] += 1
                    conn.sendall(self.responses.get(name, _RAW_NOT_FOUND))
