"""One http(s) download: policy on every hop, a streamed size cap, bounded retries, the disk cache.

Redirects are followed here rather than by aiohttp, so each hop's URL is checked (domain
allow-list, IP literal, parser agreement) before any request is sent to it, and each hop's host
is resolved through the address policy. The body is streamed and capped on the wire and after
decoding (see ``http_body``). Timeouts, dropped connections, 5xx, 408 and 429 are retried a
bounded number of times; a cap or budget breach and a body that contradicts its headers are final.

Deadlines: every attempt (all its hops and its body) has the full fetch timeout, which is the
origin's time: connecting, waiting for a slot of the same origin (if origins are limited), and
the response. Time spent waiting for one of the client's total connection slots, which any other
origin may be holding, is not charged to it (see ``connection_slots``). That is vLLM's clock, and
without a request scope the only one: a download may take the timeout times the attempts.

In a request scope (``request_scope``) the download also has its request's deadline, which
nothing extends: each attempt ends by it, every wait (the request's own connection slots, the
client's slots, the backoff) ends by it, and a retry starts only if time remains after the
backoff. A timeout that leaves no time for another attempt is reported as the deadline
(``RequestDeadlineError``). Each hop holds one of the request's connection slots, taken before
the client's, so a download queued behind its own request holds nothing others wait for.

The disk cache and the policy: an entry is keyed by the requested URL *and* the fingerprint of the
policy it was fetched under (address policy, domain allow-list, whether redirects are followed).
Every hop of a cached download was checked, and each hostname resolved, under exactly that
policy, so serving the entry to a request with the same fingerprint is what a fresh fetch would
have allowed at the time it was made; a request under any other policy (say, one that refuses
private addresses, where the entry was fetched by a connector that allowed them, or one whose
allow-list lacks a domain the entry was redirected through) misses and fetches under its own.
The requested URL is also checked against the current policy before the cache is consulted.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from mediaref.media._transport.addresses import parse_ip_literal, resolve_public
from mediaref.media._transport.budget import (
    MediaRequestDownloadBudget,
    MediaRequestDownloadSizeExceededError,
)
from mediaref.media._transport.connection_slots import Origin
from mediaref.media._transport.disk_cache import DiskCache
from mediaref.media._transport.errors import (
    HTTPStatusError,
    RefusedError,
    TooLargeError,
    is_transient,
    map_transport_error,
)
from mediaref.media._transport.http_body import read_body
from mediaref.media._transport.http_client import MediaHTTPClient, env_proxy_for
from mediaref.media._transport.request_scope import MediaRequestFetchScope, RequestDeadline
from mediaref.media._transport.url_policy import (
    URLPolicy,
    canonical_host,
    check_url,
    resolve_redirect,
)
from mediaref.media.executor import get_media_executor

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

MAX_REDIRECT_HOPS = 10
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_FIRST_BACKOFF_SECONDS = 0.05
_MAX_BACKOFF_SECONDS = 1.0
_CACHE_KEY_VERSION = "v2"  # v1 keyed by the URL alone
_TIMEOUTS = (asyncio.TimeoutError, TimeoutError)


@dataclass(frozen=True)
class DownloadRequest:
    requested_url: str  # as the caller wrote it, for error messages
    url: URL  # parsed and agreed on by both parsers (url_policy.parse_http_url)
    policy: URLPolicy
    allow_redirects: bool
    max_bytes: int | None  # the download cap and the strictest decoder cap; None: uncapped
    timeout_seconds: float  # per attempt
    retries: int
    budget: MediaRequestDownloadBudget | None  # the request's; None: no request-wide limit
    cache: DiskCache | None
    scope: MediaRequestFetchScope | None = None  # the request's; None: vLLM's per-attempt clock

    def cache_key(self) -> str:
        # yarl's normal form: equivalent spellings of the URL share an entry.
        redirects = int(self.allow_redirects)
        return f"{_CACHE_KEY_VERSION};{self.policy.fingerprint()};redirects={redirects};{self.url}"

    def charge(self, size: int) -> None:
        """Charge the request's budget, naming this URL if it runs out."""
        if self.budget is None or size <= 0:
            return
        try:
            self.budget.charge(size)
        except MediaRequestDownloadSizeExceededError as exc:
            raise TooLargeError(str(exc)) from None


async def _off_loop(fn: Callable[..., _T], *args: Any) -> _T:
    """Run blocking disk I/O on the media pool, keeping the event loop free."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(get_media_executor(), functools.partial(fn, *args))


# The cache is an optimization: an unreadable or unwritable cache must never fail the request.


def _get_quietly(cache: DiskCache, key: str, max_bytes: int | None) -> bytes | None:
    try:
        return cache.get(key, max_bytes=max_bytes)
    except OSError as exc:
        logger.warning("media cache: could not read %s: %s", key, exc)
        return None


def _store_quietly(cache: DiskCache, key: str, data: bytes) -> None:
    try:
        cache.put(key, data)
    except OSError as exc:
        logger.warning("media cache: could not store %s: %s", key, exc)


async def download(client: MediaHTTPClient, request: DownloadRequest) -> bytes:
    """The payload at ``request.url``, or a :mod:`mediaref.exceptions` error naming it."""
    try:
        # Policy before the cache: a URL refused now is refused even if it was cached earlier.
        check_url(request.url, request.policy)
        if request.cache is not None:
            cached = await _off_loop(
                _get_quietly, request.cache, request.cache_key(), request.max_bytes
            )
            if cached is not None:
                request.charge(len(cached))
                return cached
        data = await _download_with_retries(client, request)
    except Exception as exc:
        mapped = map_transport_error(exc, request.requested_url)
        if mapped is exc:
            raise
        raise mapped from exc
    if request.cache is not None:
        await _off_loop(_store_quietly, request.cache, request.cache_key(), data)
    return data


async def _download_with_retries(client: MediaHTTPClient, request: DownloadRequest) -> bytes:
    scope = request.scope
    deadline = scope.deadline(request.timeout_seconds) if scope is not None else None
    for attempt in range(request.retries + 1):
        backoff = min(_FIRST_BACKOFF_SECONDS * 2**attempt, _MAX_BACKOFF_SECONDS)
        try:
            return await _attempt(client, request, deadline)
        except Exception as exc:
            # The attempt's bytes stay charged: the budget counts retried attempts (see budget).
            if deadline is not None and not deadline.allows(backoff):
                # No time for another attempt: a timeout now is the request's deadline at work.
                if isinstance(exc, _TIMEOUTS):
                    raise deadline.passed() from exc
                raise
            if attempt == request.retries or not is_transient(exc):
                raise
            logger.debug("media fetch %s failed (%s); retrying", request.url, exc)
        await asyncio.sleep(backoff)
    raise AssertionError("unreachable: the last attempt returns or raises")


@dataclass
class _AttemptClock:
    """One attempt's time: its fetch timeout, extended by waits for the client's total slots,
    and never past its request's deadline (see the module docstring)."""

    until: float  # time.monotonic()
    request: RequestDeadline | None

    def remaining(self) -> float:
        """Seconds left; the request's deadline error or ``asyncio.TimeoutError`` when none are."""
        request_left = self.request.remaining() if self.request is not None else math.inf
        left = self.until - time.monotonic()
        if left <= 0:
            raise asyncio.TimeoutError()
        return min(left, request_left)

    def pool_wait(self, timeout_seconds: float) -> float:
        """How long to wait for a total slot: the fetch timeout, within the request's deadline."""
        if self.request is None:
            return timeout_seconds
        return min(timeout_seconds, self.request.remaining())


def _request_slot(
    request: DownloadRequest, deadline: RequestDeadline | None
) -> AbstractAsyncContextManager[None]:
    if request.scope is None or deadline is None:
        return contextlib.nullcontext()
    return request.scope.connection(deadline)


async def _check_proxied_target(url: URL, policy: URLPolicy, timeout_seconds: float) -> None:
    # Through a proxy, the proxy resolves the target, not the policy resolver: check the name
    # here before anything is sent. A rebinding race against the proxy's own lookup is the
    # proxy's to prevent.
    host = url.raw_host or ""
    if not policy.allow_private_ips and parse_ip_literal(host) is None:
        await asyncio.wait_for(resolve_public(host, url.port or 0), timeout_seconds)


def _redirect_location(response: aiohttp.ClientResponse, allow_redirects: bool) -> str | None:
    """The next hop's Location for a redirect, None for a success; raises for anything else."""
    if 200 <= response.status < 300:
        return None
    if response.status not in _REDIRECT_STATUSES:
        raise HTTPStatusError(response.status, response.reason)
    location = response.headers.get("Location")
    if location is None:
        raise HTTPStatusError(response.status, "redirect without a Location")
    if not allow_redirects:
        raise RefusedError(
            f"redirected to {location[:200]!r} but redirects are disabled "
            "(VLLM_MEDIA_URL_ALLOW_REDIRECTS)"
        )
    return location


def _origin(url: URL) -> Origin:
    return (url.scheme, canonical_host(url.raw_host or ""), url.port or 0)


async def _attempt(
    client: MediaHTTPClient, request: DownloadRequest, deadline: RequestDeadline | None
) -> bytes:
    """One attempt: every hop and the body, within one fetch timeout (see the docstring)."""
    clock = _AttemptClock(time.monotonic() + request.timeout_seconds, deadline)
    slots = await client.connection_slots()
    url = request.url
    for _hop in range(MAX_REDIRECT_HOPS + 1):
        check_url(url, request.policy)
        proxy = env_proxy_for(url)
        if proxy is not None:
            await _check_proxied_target(url, request.policy, clock.remaining())
        session = await client.session(
            check_addresses=proxy is None and not request.policy.allow_private_ips
        )
        waiting_since = time.monotonic()
        async with _request_slot(request, deadline):
            # Waiting for the request's (and its client's) connection slots is not this
            # attempt's time: the request's deadline bounds it once the request has begun.
            clock.until += time.monotonic() - waiting_since
            async with slots.hold(
                _origin(url),
                origin_wait_seconds=clock.remaining(),
                pool_wait_seconds=clock.pool_wait(request.timeout_seconds),
            ) as pool_wait_seconds:
                clock.until += pool_wait_seconds  # another origin's hold is not this one's time
                async with session.get(
                    url,
                    allow_redirects=False,
                    proxy=proxy[0] if proxy else None,
                    proxy_auth=proxy[1] if proxy else None,
                    timeout=aiohttp.ClientTimeout(total=clock.remaining()),
                ) as response:
                    location = _redirect_location(response, request.allow_redirects)
                    if location is None:
                        return await read_body(response, request.max_bytes, request.charge)
        url = resolve_redirect(url, location)
    raise RefusedError(f"more than {MAX_REDIRECT_HOPS} redirects")


__all__ = ["MAX_REDIRECT_HOPS", "DownloadRequest", "download"]
