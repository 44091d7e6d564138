"""The render server's aiohttp application: its routes, its error boundary, its front door.

=====================================  ======================================================
``POST /v1/chat/completions/render``   a chat request -> one ``GenerateRequest`` (JSON)
``POST /v1/completions/render``        a completions request -> a list of them, one a prompt
``POST /v1/messages/render``           an Anthropic Messages request -> one (:mod:`.anthropic_messages`)
``POST /v1/responses/render``          an OpenAI Responses request -> one (:mod:`.responses_api`)
``POST /tokenize``, ``/detokenize``    vLLM's tokenizer routes (:mod:`mediaref.serve.tokenization`)
``GET /health``                        200 while serving; 503 once draining (SIGTERM)
``GET /metrics``                       Prometheus text (:mod:`mediaref.serve.metrics`)
``GET /v1/models``, ``/version``, ...  what the server serves (:mod:`mediaref.serve.info`)
=====================================  ======================================================

**The front door.** A render request goes through, in this order:

1. its body, received whole within the body timeout and minimum rate, its bytes charged to the
   client's share of the server's body memory (:mod:`mediaref.serve.request_body`,
   :class:`~mediaref.serve.client_limits.ByteBudget`): no slot is held while a body arrives;
2. its JSON, parsed with depth and size bounds on the server's pool, in the client's turn
   (:mod:`mediaref.serve.fair_pool`): a body of megabytes never holds the event loop (one of at
   most ``INLINE_PARSE_BYTES`` is parsed in place, faster than a thread would take it);
3. a render slot (:class:`~mediaref.serve.client_limits.FairGate`): at most
   ``max_concurrency`` at once, a share of them per client, waiting clients in turn;
4. rendering (:mod:`mediaref.serve.service`), then the response encoded on the pool.

``/health`` and ``/metrics`` go through none of it: they answer from the event loop (metrics on
a thread of their own), whatever the render requests are doing. Connections are counted before
any of this (:mod:`mediaref.serve.connections`).

Every failure leaves through one middleware (:mod:`mediaref.serve.errors`): a status and vLLM's
``ErrorResponse`` body naming served models, never their directories; one request's failure is
only its own. A response to a request whose body was not read to its end closes the connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from mediaref.serve import worker_metrics
from mediaref.serve.anthropic_messages import parse_messages_request, render_messages
from mediaref.serve.client_limits import (
    ByteBudget,
    ClientRate,
    ConnectionCounts,
    FairGate,
    TransferPace,
    client_key,
)
from mediaref.serve.errors import error_body, error_response_for
from mediaref.serve.info import add_info_routes
from mediaref.serve.json_body import JsonPiecesPayload, dump_json_pieces
from mediaref.serve.logs import REQUEST_ID_KEY
from mediaref.serve.metrics import CONTENT_TYPE
from mediaref.serve.options import ServeOptions
from mediaref.serve.protocol import parse_chat_request, parse_completion_request
from mediaref.serve.request_body import BodyLimits, JsonValueCount, parse_json_body, read_body
from mediaref.serve.responses_api import parse_responses_request, render_responses
from mediaref.serve.service import RenderService
from mediaref.serve.tokenization import (
    detokenize,
    parse_detokenize_request,
    parse_tokenize_request,
    tokenize,
)

CHAT_ROUTE = "/v1/chat/completions/render"
COMPLETIONS_ROUTE = "/v1/completions/render"
MESSAGES_ROUTE = "/v1/messages/render"
RESPONSES_ROUTE = "/v1/responses/render"
TOKENIZE_ROUTE = "/tokenize"
DETOKENIZE_ROUTE = "/detokenize"
HEALTH_ROUTE = "/health"
METRICS_ROUTE = "/metrics"
RENDER_ROUTES = (CHAT_ROUTE, COMPLETIONS_ROUTE, MESSAGES_ROUTE, RESPONSES_ROUTE)

MAX_REFUSAL_PAUSE_S = 2.0
"""The longest a refusal waits for a client past its refusal rate."""

INLINE_PARSE_BYTES = 64 * 1024
"""A body this small is parsed on the event loop (well under a millisecond, bounds included):
handing it to a thread would cost more than the parse. Larger ones go to the pool."""

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_Render = Callable[[Any, str], Awaitable[Any]]


class ServerState:
    """The front door's limits (see the module docstring), the requests in flight, and whether
    the server is draining (for SIGTERM)."""

    def __init__(self, options: ServeOptions) -> None:
        self.gate = FairGate(options.max_concurrency, options.concurrency_per_client)
        self.bodies = ByteBudget(
            options.buffered_body_bytes, per_client=options.buffered_body_bytes_per_client
        )
        self.body_pace = ClientRate(
            options.client_body_bytes_per_second, burst=options.max_request_body_bytes
        )
        rate = options.client_refusals_per_second
        self.refusal_pace = ClientRate(rate, burst=2 * rate, max_pause=MAX_REFUSAL_PAUSE_S)
        self.connections = ConnectionCounts(options.max_connections, options.connections_per_client)
        self.body_limits = BodyLimits(
            max_bytes=options.max_request_body_bytes,
            timeout_seconds=options.body_timeout,
            min_bytes_per_second=options.min_body_rate_kb * 1024,
            grace_seconds=options.header_timeout_seconds(),
        )
        self.send_pace = TransferPace(
            timeout_seconds=options.send_timeout,
            min_bytes_per_second=options.min_send_rate_kb * 1024,
            grace_seconds=options.header_timeout_seconds(),
        )
        # /metrics reads the caches: on a thread of its own, never queued behind render work.
        self.metrics_thread = concurrent.futures.ThreadPoolExecutor(1, "mediaref-metrics")
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

    def body_pause(self, client: str, size: int) -> float:
        """Seconds ``client`` waits before reading on after ``size`` more body bytes: its pace
        holds only while another client's bodies are held too (the loop's time is then shared)."""
        contended = self.bodies.held_by_others(client)
        return self.body_pace.pause(client, size, contended=contended)

    async def wait_idle(self, timeout: float) -> bool:
        """Whether every in-flight request finished within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.metrics_thread.shutdown(wait=False)


SERVICE_KEY = web.AppKey("service", RenderService)
STATE_KEY = web.AppKey("state", ServerState)
SIBLINGS_KEY: web.AppKey[tuple[str, ...]] = web.AppKey("siblings")


def _json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(payload, separators=(",", ":")),
        status=status,
        content_type="application/json",
    )


@web.middleware
async def error_boundary(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Every failure becomes its status and an OpenAI-shaped error body; render routes count."""
    service = request.app[SERVICE_KEY]
    route = request.path if request.path in RENDER_ROUTES else None
    start = time.perf_counter()
    try:
        response = await handler(request)
    except asyncio.CancelledError:
        raise  # the client went away (or shutdown): nothing to answer
    except Exception as exc:
        status, body = error_response_for(
            exc,
            context=f"{request.method} {request.path} {request.get(REQUEST_ID_KEY, '-')}",
            public=service.public_message,
        )
        headers = exc.headers if isinstance(exc, web.HTTPException) else None
        response = _json_response(body, status)
        if headers and "Retry-After" in headers:
            response.headers["Retry-After"] = headers["Retry-After"]
        if 400 <= status < 500:
            # A client refused faster than its rate waits for its answer: with its requests in
            # flight bounded by itself, a flood of bad requests slows down, not the server.
            pause = request.app[STATE_KEY].refusal_pace.pause(client_key(request), 1)
            if pause > 0:
                await asyncio.sleep(pause)
    if route is not None:
        service.metrics.requests.labels(route, str(response.status)).inc()
        service.metrics.request_seconds.labels(route).observe(time.perf_counter() - start)
    if request.app[STATE_KEY].draining or not request.content.is_eof():
        response.force_close()  # keep-alive clients go elsewhere; an unread body ends here
    return response


async def _render(request: web.Request, render: _Render) -> web.Response:
    state = request.app[STATE_KEY]
    service = request.app[SERVICE_KEY]
    client = client_key(request)
    request[REQUEST_ID_KEY] = request.headers.get("X-Request-Id", "-")
    state.enter()
    try:
        with state.bodies.account(client) as charge:
            counted = JsonValueCount(charge)
            raw = await read_body(
                request,
                state.body_limits,
                counted,
                functools.partial(state.body_pause, client),
            )
            parse = functools.partial(parse_json_body, separators=counted.separators)
            if len(raw) <= INLINE_PARSE_BYTES:
                body = parse(raw)
            else:
                body = await service.pool.run(client, parse, raw)
            del raw  # the parsed body is what stays (and stays charged) while it waits
            async with state.gate.slot(client):
                service.metrics.in_flight.inc()
                try:
                    payload = await render(body, client)
                finally:
                    service.metrics.in_flight.dec()
            pieces = dump_json_pieces(payload)  # tens of microseconds: not worth a thread hop
    finally:
        state.leave()
    cut = service.metrics.responses_cut.inc
    return web.Response(body=JsonPiecesPayload(pieces, state.send_pace, cut))


def _render_route(
    parse: Callable[..., Any],
    render: Callable[[RenderService, Any, str], Awaitable[Any]],
    id_prefix: str,
) -> _Handler:
    """A POST route's handler: ``parse`` the body (into a request with a ``request_id``), then
    ``render`` it for its client, through the front door. The log names the request
    ``{id_prefix}-{request_id}`` (an empty prefix: its ``request_id`` alone)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        service = request.app[SERVICE_KEY]

        async def run(body: Any, client: str) -> Any:
            parsed = parse(body, service.options, request_id=request.headers.get("X-Request-Id"))
            name = parsed.request_id
            request[REQUEST_ID_KEY] = f"{id_prefix}-{name}" if id_prefix else name
            return await render(service, parsed, client)

        return await _render(request, run)

    return handler


render_chat = _render_route(
    parse_chat_request, lambda s, req, client: s.render_chat(req, client=client), "chatcmpl"
)
render_completion = _render_route(
    parse_completion_request,
    lambda s, req, client: s.render_completion(req, client=client),
    "cmpl",
)
render_messages_route = _render_route(parse_messages_request, render_messages, "chatcmpl")
render_responses_route = _render_route(parse_responses_request, render_responses, "")
tokenize_route = _render_route(parse_tokenize_request, tokenize, "tokenize")
detokenize_route = _render_route(parse_detokenize_request, detokenize, "tokenize")


async def health(request: web.Request) -> web.Response:
    if request.app[STATE_KEY].draining:
        return _json_response(error_body(503, "the server is shutting down"), 503)
    return web.Response(status=200)


async def metrics(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    thread = request.app[STATE_KEY].metrics_thread
    body = await asyncio.get_running_loop().run_in_executor(thread, service.metrics.render)
    siblings = request.app[SIBLINGS_KEY]
    if siblings:  # one worker of several: the server's figures are all of theirs
        theirs = [text for text in await worker_metrics.siblings(siblings) if text is not None]
        body = worker_metrics.merge([body, *theirs], expected=len(siblings) + 1)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def _close_state(app: web.Application) -> None:
    app[STATE_KEY].close()


def build_app(service: RenderService, *, siblings: Sequence[str] = ()) -> web.Application:
    """The application serving ``service`` (its options set the front door's limits);
    ``siblings``: the other workers' metrics sockets, when this is one of several."""
    options = service.options
    app = web.Application(
        middlewares=[error_boundary], client_max_size=options.max_request_body_bytes
    )
    app[SERVICE_KEY] = service
    app[STATE_KEY] = ServerState(options)
    app[SIBLINGS_KEY] = tuple(siblings)
    app.on_cleanup.append(_close_state)
    app.router.add_post(CHAT_ROUTE, render_chat)
    app.router.add_post(COMPLETIONS_ROUTE, render_completion)
    app.router.add_post(MESSAGES_ROUTE, render_messages_route)
    app.router.add_post(RESPONSES_ROUTE, render_responses_route)
    app.router.add_post(TOKENIZE_ROUTE, tokenize_route)
    app.router.add_post(DETOKENIZE_ROUTE, detokenize_route)
    app.router.add_get(HEALTH_ROUTE, health)
    app.router.add_get(METRICS_ROUTE, metrics)
    add_info_routes(app, service, lambda: app[STATE_KEY].in_flight)
    return app


__all__ = [
    "CHAT_ROUTE",
    "COMPLETIONS_ROUTE",
    "DETOKENIZE_ROUTE",
    "HEALTH_ROUTE",
    "MESSAGES_ROUTE",
    "METRICS_ROUTE",
    "RENDER_ROUTES",
    "RESPONSES_ROUTE",
    "SERVICE_KEY",
    "STATE_KEY",
    "TOKENIZE_ROUTE",
    "ServerState",
    "build_app",
]
