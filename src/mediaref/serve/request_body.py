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
hold is bounded however its bodies arrive; its JSON values are counted as it arrives too
(:class:`JsonValueCount`). Each chunk the HTTP parser hands over is awaited with the deadline the
minimum rate gives it, and kept as it is until the whole body is joined once.

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
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
from aiohttp import web

from mediaref.exceptions import VLLMValidationError
from mediaref.serve.client_limits import TransferPace

MAX_JSON_DEPTH = 64
"""Nesting a request body may have. A chat request needs about 6 levels (messages, a message,
its content, a part, ``image_url``, the URL) and tool schemas a few dozen; 900 levels made
Jinja's and ``copy.deepcopy``'s recursion fail."""

_COMMA = ord(",")

MAX_JSON_SEPARATORS = 1_000_000
"""Commas a request body may contain: a bound on its values (and so on the parse's cost and the
objects it builds) checked before parsing. Base64 payloads have none; a prompt of 1,000,000 token
ids does not fit (vLLM's own bound is ``max_model_len`` per prompt)."""


@dataclass(frozen=True)
class BodyLimits(TransferPace):
    """How a request body must arrive (see the module docstring)."""

    max_bytes: int


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
    request: web.BaseRequest,
    limits: BodyLimits,
    take: Callable[[bytes], None],
    pace: Callable[[int], float] = lambda size: 0.0,
) -> bytes:
    """The whole body of ``request``, each piece handed to ``take`` as it arrives (to charge
    it, or to count its JSON values: ``take`` raises to refuse the body there). ``pace(size)``
    says how long to wait before reading on (the client's
    :class:`~mediaref.serve.client_limits.ClientRate`); that wait is the
    server's, so it does not count against the client's timeout or rate.

    Raises ``web.HTTPRequestEntityTooLarge`` (413) over the cap, ``web.HTTPRequestTimeout``
    (408) past the timeout or under the minimum rate.
    """
    declared = request.content_length
    if declared is not None and declared > limits.max_bytes:
        raise _too_large(limits, declared)
    loop = asyncio.get_running_loop()
    start = loop.time()
    # The chunks as the HTTP parser made them, joined once at the end: waiting for larger pieces
    # (``readexactly``) would copy every byte twice more on the event loop, a third of its time
    # under a flood of large bodies.
    pieces: list[bytes] = []
    received = 0
    while True:
        wait = start + limits.deadline(received) - loop.time()
        try:
            if wait <= 0:
                raise asyncio.TimeoutError
            chunk, http_chunk_ended = await asyncio.wait_for(request.content.readchunk(), wait)
        except asyncio.TimeoutError:
            raise _too_slow(limits, received, loop.time() - start) from None
        if not chunk:
            if http_chunk_ended:
                continue  # a chunked body's chunk boundary, not its end
            break  # the end of the body (or the client stopped short of its Content-Length)
        if received + len(chunk) > limits.max_bytes:
            raise _too_large(limits, "chunked")
        take(chunk)
        pieces.append(chunk)
        received += len(chunk)
        pause = pace(len(chunk))
        if pause > 0:
            await asyncio.sleep(pause)
            start += pause
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class JsonValueCount:
    """Counts a body's JSON separators as it arrives (``take`` for :func:`read_body`): a body of
    more values than :func:`parse_json_body` would take is refused before the rest arrives.

    A separator is a byte, so a body no longer than the limit cannot exceed it: nothing is
    counted until the body grows past the limit (a routing request's 0.75 MB of base64 would
    cost a fifth of a millisecond to scan), then what arrived so far is counted, and each chunk
    after it. ``separators`` is an upper bound on the body's commas, exact once counting began.
    """

    def __init__(self, charge: Callable[[int], None], limit: int = 0) -> None:
        self.charge = charge
        self.limit = limit or MAX_JSON_SEPARATORS
        self.received = 0
        self._counted: int | None = None
        self._uncounted: list[bytes] = []  # the chunks so far, while the body is within the limit

    @property
    def separators(self) -> int:
        return self.received if self._counted is None else self._counted

    def __call__(self, chunk: bytes) -> None:
        self.charge(len(chunk))
        self.received += len(chunk)
        if self._counted is None:
            if self.received <= self.limit:
                self._uncounted.append(chunk)
                return
            self._counted = sum(count_commas(earlier) for earlier in self._uncounted)
            self._uncounted.clear()
        self._counted += count_commas(chunk)
        if self._counted > self.limit:
            raise _too_many_values(self._counted, self.limit)


_COUNT_BLOCK = 1 << 20
_count_scratch = threading.local()


def count_commas(data: bytes) -> int:
    """``data.count(b",")``, three times faster on a megabyte: a vectorized compare, a block at a
    time into this thread's reused scratch buffer. (One compare over the whole body would
    allocate a temporary as large as the body, and on a machine where every fresh page is
    costly that allocation costs four times the count.)"""
    if len(data) < 64 * 1024:
        return data.count(b",")
    scratch = getattr(_count_scratch, "buffer", None)
    if scratch is None:
        scratch = _count_scratch.buffer = np.empty(_COUNT_BLOCK, dtype=bool)
    values = np.frombuffer(data, dtype=np.uint8)
    total = 0
    for start in range(0, len(values), _COUNT_BLOCK):
        block = values[start : start + _COUNT_BLOCK]
        matches = scratch[: len(block)]
        np.equal(block, _COMMA, out=matches)
        total += int(np.count_nonzero(matches))
    return total


def _too_many_values(separators: int, limit: int) -> web.HTTPRequestEntityTooLarge:
    return web.HTTPRequestEntityTooLarge(
        max_size=limit,
        actual_size=separators,
        text=f"the request body has over {limit} JSON values, over this server's limit",
    )


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
    separators: int | None = None,
) -> Any:
    """``raw`` as JSON within the bounds (see the module docstring); blocking: run it off the loop.
    ``separators``: a bound on its commas, when a :class:`JsonValueCount` already took it as it
    arrived (counting a megabyte again costs a quarter of a millisecond)."""
    if separators is None:
        # A separator is a byte: a body no longer than the bound needs no count.
        separators = len(raw) if len(raw) <= max_separators else count_commas(raw)
    if separators > max_separators:
        raise _too_many_values(separators, max_separators)
    try:
        # msgspec's parser first, at twice the speed: every document it takes, Python's parser
        # reads to the same values; for one it refuses (NaN, 1e400, a lone surrogate, a BOM,
        # too deep, not JSON) Python's parser gives the verdict and the error, as before.
        value = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        value = _parse_json_slowly(raw, max_depth)
    if isinstance(value, dict | list):
        _check_depth(value, max_depth)
    return value


def _parse_json_slowly(raw: bytes, max_depth: int) -> Any:
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise _refuse_depth(max_depth) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of 4,300+ digits
        raise VLLMValidationError(f"the request body is not valid JSON: {exc}") from None


__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_JSON_SEPARATORS",
    "BodyLimits",
    "JsonValueCount",
    "parse_json_body",
    "read_body",
]
