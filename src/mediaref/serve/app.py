"""The render server's aiohttp application: its routes, its error boundary, its gate.

=====================================  ======================================================
``POST /v1/chat/completions/render``   a chat request -> one ``GenerateRequest`` (JSON)
``POST /v1/completions/render``        a completions request -> a list of them, one a prompt
``GET /health``                        200 while serving; 503 once draining (SIGTERM)
``GET /metrics``                       Prometheus text (:mod:`mediaref.serve.metrics`)
=====================================  ======================================================

Every failure leaves through one middleware (:mod:`mediaref.serve.errors`): a status and vLLM's
``ErrorResponse`` body, and one request's failure is only its own. At most ``max_concurrency``
render requests run at once; the rest wait, their bodies unread, so a queue of large bodies does
not sit in memory. ``/health`` and ``/metrics`` never wait behind that gate.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from mediaref.exceptions import VLLMValidationError
from mediaref.serve.errors import error_body, error_response_for
from mediaref.serve.json_body import dump_json
from mediaref.serve.metrics import CONTENT_TYPE
from mediaref.serve.protocol import parse_chat_request, parse_completion_request
from mediaref.serve.service import RenderService

CHAT_ROUTE = "/v1/chat/completions/render"
COMPLETIONS_ROUTE = "/v1/completions/render"
HEALTH_ROUTE = "/health"
METRICS_ROUTE = "/metrics"

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ServerState:
    """In-flight render requests, and whether the server is draining (for SIGTERM)."""

    def __init__(self, max_concurrency: int) -> None:
        self.gate = asyncio.Semaphore(max_concurrency)
        self.in_flight = 0
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """Whether every in-flight request finished within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True


SERVICE_KEY = web.AppKey("service", RenderService)
STATE_KEY = web.AppKey("state", ServerState)


def _json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(payload, separators=(",", ":")),
        status=status,
        content_type="application/json",
    )


async def _json_body(request: web.Request) -> Any:
    raw = await request.read()  # over client_max_size: aiohttp raises its 413 here
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VLLMValidationError(f"the request body is not valid JSON: {exc}") from None


@web.middleware
async def error_boundary(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Every failure becomes its status and an OpenAI-shaped error body; render routes count."""
    service = request.app[SERVICE_KEY]
    route = request.path if request.path in (CHAT_ROUTE, COMPLETIONS_ROUTE) else None
    start = time.perf_counter()
    try:
        response = await handler(request)
    except asyncio.CancelledError:
        raise  # the client went away (or shutdown): nothing to answer
    except Exception as exc:
        status, body = error_response_for(exc, context=f"{request.method} {request.path}")
        response = _json_response(body, status)
    if route is not None:
        service.metrics.requests.labels(route, str(response.status)).inc()
        service.metrics.request_seconds.labels(route).observe(time.perf_counter() - start)
    if request.app[STATE_KEY].draining:
        response.force_close()  # let keep-alive clients go elsewhere
    return response


async def _render(request: web.Request, run: Callable[[Any], Awaitable[Any]]) -> web.Response:
    state = request.app[STATE_KEY]
    metrics = request.app[SERVICE_KEY].metrics
    state.enter()
    try:
        async with state.gate:
            metrics.in_flight.inc()
            try:
                payload = await run(await _json_body(request))
            finally:
                metrics.in_flight.dec()
    finally:
        state.leave()
    body = await asyncio.to_thread(dump_json, payload)
    return web.Response(body=body, content_type="application/json")


async def render_chat(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    request_id = request.headers.get("X-Request-Id")

    async def run(body: Any) -> Any:
        parsed = parse_chat_request(body, service.options, request_id=request_id)
        return await service.render_chat(parsed)

    return await _render(request, run)


async def render_completion(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    request_id = request.headers.get("X-Request-Id")

    async def run(body: Any) -> Any:
        parsed = parse_completion_request(body, service.options, request_id=request_id)
        return await service.render_completion(parsed)

    return await _render(request, run)


async def health(request: web.Request) -> web.Response:
    if request.app[STATE_KEY].draining:
        return _json_response(error_body(503, "the server is shutting down"), 503)
    return web.Response(status=200)


async def metrics(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    body = await asyncio.to_thread(service.metrics.render)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def build_app(service: RenderService) -> web.Application:
    """The application serving ``service`` (``options.max_request_body_mb`` caps each body)."""
    options = service.options
    app = web.Application(
        middlewares=[error_boundary], client_max_size=options.max_request_body_bytes
    )
    app[SERVICE_KEY] = service
    app[STATE_KEY] = ServerState(options.max_concurrency)
    app.router.add_post(CHAT_ROUTE, render_chat)
    app.router.add_post(COMPLETIONS_ROUTE, render_completion)
    app.router.add_get(HEALTH_ROUTE, health)
    app.router.add_get(METRICS_ROUTE, metrics)
    return app


__all__ = [
    "CHAT_ROUTE",
    "COMPLETIONS_ROUTE",
    "HEALTH_ROUTE",
    "METRICS_ROUTE",
    "SERVICE_KEY",
    "STATE_KEY",
    "ServerState",
    "build_app",
]
