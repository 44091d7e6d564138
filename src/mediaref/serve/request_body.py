"""A render request's body: received whole, within its limits, before it may take a render slot.

A request holds nothing scarce while its body arrives: no render slot, no worker. So a client
that sends headers and then trickles (or stops) cannot starve anyone; it holds one connection
until one of these limits cuts it off with a 408:

- **the body timeout**: the whole body arrives within ``timeout_seconds`` of its headers;
- **the minimum rate**: after the first ``grace_seconds``, the body must have arrived at an
  average of at least ``min_bytes_per_second`` (a body of 1 byte a second is cut at the grace,
  a large body on a slow but honest link keeps going until the timeout);
- **the size cap**: a declared ``Content-Length`` over ``max_bytes`` is a 413 before a byte is
  read, and a chunked body is cut at the cap.

Every received byte is charged as it arrives to the caller's budget (the server's bytes held in
bodies, :class:`mediaref.serve.client_limits.ByteBudget`), so what a client can make the server
hold is bounded however its bodies arrive.

**Parsing.** :func:`parse_json_body` runs off the event loop (the caller's pool) with bounds a
request cannot exceed cheaply: its values (counted as commas, a C-speed scan, before parsing, so
a body of a million tiny keys costs the scan, not a parse) and its nesting depth (deeper JSON
would exhaust the parser's or a template's recursion). Every refusal is a 400 or 413 naming the
bound, never the ``RecursionError`` or ``ValueError`` underneath. ``NaN`` and ``Infinity``,
which Python's parser takes, are not JSON and are refused too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mediaref.exceptions import VLLMValidationError

MAX_JSON_DEPTH = 64
"""Nesting a request body may have. A chat request needs about 6 levels (messages, a message,
its content, a part, ``image_url``, the URL) and tool schemas a few dozen; 900 levels made
Jinja's and ``copy.deepcopy``'s recursion fail."""

MAX_JSON_SEPARATORS = 1_000_000
"""Commas a request body may contain: a bound on its values (and so on the parse's cost and the
objects it builds) checked before parsing. Base64 payloads have none; a prompt of 1,000,000 token
ids does not fit (vLLM's own bound is ``max_model_len`` per prompt)."""


@dataclass(frozen=True)
class BodyLimits:
    """How a request body must arrive (see the module docstring)."""

    max_bytes: int
    timeout_seconds: float
    min_bytes_per_second: float
    grace_seconds: float

    def deadline(self, received: int) -> float:
        """Seconds after the headers by which more bytes must arrive, having ``received``."""
        by_rate = self.grace_seconds + received / self.min_bytes_per_second
        return min(self.timeout_seconds, by_rate)


def _too_large(limits: BodyLimits, size: int | str) -> web.HTTPRequestEntityTooLarge:
    return web.HTTPRequestEntityTooLarge(
        max_size=limits.max_bytes,
        actual_size=size if isinstance(size, int) else limits.max_bytes + 1,
        text=f"the request body is over this server's limit of {limits.max_bytes} bytes "
        "(--max-request-body-mb)",
    )


def _too_slow(limits: BodyLimits, received: int, elapsed: float) -> web.HTTPRequestTimeout:
    if elapsed >= limits.timeout_seconds:
        why = f"did not arrive within {limits.timeout_seconds:g} s (--body-timeout)"
    else:
        rate = limits.min_bytes_per_second / 1024
        why = f"arrived slower than {rate:g} KiB/s (--min-body-rate-kb)"
    return web.HTTPRequestTimeout(
        text=f"the request body {why}: {received} bytes received in {elapsed:.1f} s"
    )


async def read_body(
    request: web.BaseRequest, limits: BodyLimits, charge: Callable[[int], None]
) -> bytes:
    """The whole body of ``request``, each chunk charged with ``charge`` as it arrives.

    Raises ``web.HTTPRequestEntityTooLarge`` (413) over the cap, ``web.HTTPRequestTimeout``
    (408) past the timeout or under the minimum rate; ``charge`` may raise to refuse a chunk.
    """
    declared = request.content_length
    if declared is not None and declared > limits.max_bytes:
        raise _too_large(limits, declared)
    loop = asyncio.get_running_loop()
    start = loop.time()
    body = bytearray()
    while True:
        wait = start + limits.deadline(len(body)) - loop.time()
        try:
            if wait <= 0:
                raise asyncio.TimeoutError
            chunk = await asyncio.wait_for(request.content.readany(), wait)
        except asyncio.TimeoutError:
            raise _too_slow(limits, len(body), loop.time() - start) from None
        if not chunk:
            return bytes(body)
        if len(body) + len(chunk) > limits.max_bytes:
            raise _too_large(limits, "chunked")
        charge(len(chunk))
        body += chunk


def _refuse_constant(name: str) -> Any:
    # Python's parser takes NaN and Infinity; JSON (RFC 8259) has no such values, and one passed
    # through to the response would make it invalid JSON for the engine.
    raise ValueError(f"{name} is not a JSON value")


def _refuse_depth(max_depth: int) -> VLLMValidationError:
    return VLLMValidationError(f"the request body's JSON nests deeper than {max_depth} levels")


def _check_depth(value: Any, max_depth: int) -> None:
    # An explicit stack: the depth being checked is exactly what a recursive walk would overflow.
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > max_depth:
            raise _refuse_depth(max_depth)
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def parse_json_body(
    raw: bytes,
    *,
    max_depth: int = MAX_JSON_DEPTH,
    max_separators: int = MAX_JSON_SEPARATORS,
) -> Any:
    """``raw`` as JSON within the bounds (see the module docstring); blocking: run it off the loop."""
    separators = raw.count(b",")
    if separators > max_separators:
        raise web.HTTPRequestEntityTooLarge(
            max_size=max_separators,
            actual_size=separators,
            text=f"the request body has {separators} JSON values, over this server's limit of "
            f"{max_separators}",
        )
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise _refuse_depth(max_depth) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of 4,300+ digits
        raise VLLMValidationError(f"the request body is not valid JSON: {exc}") from None
    if isinstance(value, dict | list):
        _check_depth(value, max_depth)
    return value


__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_JSON_SEPARATORS",
    "BodyLimits",
    "parse_json_body",
    "read_body",
]
