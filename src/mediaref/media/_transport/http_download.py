"""One http(s) download: policy on every hop, a streamed size cap, bounded retries, the disk cache.

Redirects are followed here rather than by aiohttp, so each hop's URL is checked (domain
allow-list, IP literal, parser agreement) before any request is sent to it, and each hop's host
is resolved through the address policy. The body is streamed: a ``Content-Length`` over the cap
is refused before the body is read, and a body without one is cut off as soon as it passes the
cap. Timeouts, dropped connections, 5xx, 408 and 429 are retried a bounded number of times; every
attempt (all its hops and its body) has the full fetch timeout. Whatever fails is mapped once,
here, into :mod:`mediaref.exceptions`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from mediaref.media._transport.addresses import parse_ip_literal, resolve_public
from mediaref.media._transport.budget import DownloadBudget
from mediaref.media._transport.disk_cache import DiskCache
from mediaref.media._transport.errors import (
    HTTPStatusError,
    RefusedError,
    TooLargeError,
    is_transient,
    map_transport_error,
)
from mediaref.media._transport.http_client import MediaHTTPClient, env_proxy_for
from mediaref.media._transport.url_policy import URLPolicy, check_url, resolve_redirect
from mediaref.media.executor import get_media_executor

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

MAX_REDIRECT_HOPS = 10
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_FIRST_BACKOFF_SECONDS = 0.05
_MAX_BACKOFF_SECONDS = 1.0


@dataclass(frozen=True)
class DownloadRequest:
    requested_url: str  # as the caller wrote it, for error messages
    url: URL  # parsed and agreed on by both parsers (url_policy.parse_http_url)
    policy: URLPolicy
    allow_redirects: bool
    max_bytes: int | None  # the strictest decoder cap; None: uncapped
    timeout_seconds: float  # per attempt
    retries: int
    budget: DownloadBudget
    cache: DiskCache | None


class _AttemptCharge:
    """The bytes one attempt took from the request budget, given back if the attempt fails."""

    def __init__(self, budget: DownloadBudget) -> None:
        self.budget = budget
        self.taken = 0

    def take(self, size: int) -> None:
        self.budget.charge(size)
        self.taken += size

    def give_back(self) -> None:
        self.budget.refund(self.taken)
        self.taken = 0


async def _off_loop(fn: Callable[..., _T], *args: Any) -> _T:
    """Run blocking disk I/O on the media pool, keeping the event loop free."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(get_media_executor(), functools.partial(fn, *args))


# The cache is an optimization: an unreadable or unwritable cache must never fail the request.


def _get_quietly(cache: DiskCache, key: str) -> bytes | None:
    try:
        return cache.get(key)
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
    cache_key = str(request.url)  # yarl's normal form: equivalent spellings share an entry
    try:
        # Policy before the cache: a URL refused now is refused even if it was cached earlier.
        check_url(request.url, request.policy)
        if request.cache is not None:
            cached = await _off_loop(_get_quietly, request.cache, cache_key)
            if cached is not None:
                _check_cap(len(cached), request.max_bytes)
                request.budget.charge(len(cached))
                return cached
        data = await _download_with_retries(client, request)
    except Exception as exc:
        mapped = map_transport_error(exc, request.requested_url)
        if mapped is exc:
            raise
        raise mapped from exc
    if request.cache is not None:
        await _off_loop(_store_quietly, request.cache, cache_key, data)
    return data


def _check_cap(size: int, max_bytes: int | None) -> None:
    if max_bytes is not None and size > max_bytes:
        raise TooLargeError(f"payload of {size} bytes exceeds the {max_bytes}-byte limit")


async def _download_with_retries(client: MediaHTTPClient, request: DownloadRequest) -> bytes:
    for attempt in range(request.retries + 1):
        charge = _AttemptCharge(request.budget)
        try:
            return await _attempt(client, request, charge)
        except BaseException as exc:  # cancelled too: its bytes go back to the budget
            charge.give_back()
            if not isinstance(exc, Exception) or attempt == request.retries:
                raise
            if not is_transient(exc):
                raise
            logger.debug("media fetch %s failed (%s); retrying", request.url, exc)
        await asyncio.sleep(min(_FIRST_BACKOFF_SECONDS * 2**attempt, _MAX_BACKOFF_SECONDS))
    raise AssertionError("unreachable: the last attempt returns or raises")


def _remaining_seconds(loop: asyncio.AbstractEventLoop, deadline: float) -> float:
    remaining = deadline - loop.time()
    if remaining <= 0:
        raise asyncio.TimeoutError()
    return remaining


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
            f"redirected to {location!r} but redirects are disabled "
            "(VLLM_MEDIA_URL_ALLOW_REDIRECTS)"
        )
    return location


async def _attempt(
    client: MediaHTTPClient, request: DownloadRequest, charge: _AttemptCharge
) -> bytes:
    """One attempt: every hop and the body, within one fetch timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.timeout_seconds
    url = request.url
    for _hop in range(MAX_REDIRECT_HOPS + 1):
        check_url(url, request.policy)
        proxy = env_proxy_for(url)
        if proxy is not None:
            await _check_proxied_target(url, request.policy, _remaining_seconds(loop, deadline))
        session = await client.session(
            check_addresses=proxy is None and not request.policy.allow_private_ips
        )
        async with session.get(
            url,
            allow_redirects=False,
            proxy=proxy[0] if proxy else None,
            proxy_auth=proxy[1] if proxy else None,
            timeout=aiohttp.ClientTimeout(total=_remaining_seconds(loop, deadline)),
        ) as response:
            location = _redirect_location(response, request.allow_redirects)
            if location is None:
                return await _read_capped(response, request.max_bytes, charge)
        url = resolve_redirect(url, location)
    raise RefusedError(f"more than {MAX_REDIRECT_HOPS} redirects")


async def _read_capped(
    response: aiohttp.ClientResponse, max_bytes: int | None, charge: _AttemptCharge
) -> bytes:
    declared = response.content_length
    if max_bytes is not None and declared is not None and declared > max_bytes:
        response.close()
        raise TooLargeError(
            f"Content-Length of {declared} bytes exceeds the {max_bytes}-byte limit"
        )
    if declared is not None:
        # aiohttp stops at the declared length, so the cap already holds: read in one buffer
        # rather than joining chunks (a copy of the whole payload).
        try:
            charge.take(declared)
        except TooLargeError:
            response.close()
            raise
        body = await response.read()
        if len(body) != declared:
            raise aiohttp.ClientPayloadError(
                f"body of {len(body)} bytes, but Content-Length said {declared}"
            )
        return body
    chunks: list[bytes] = []
    received = 0
    async for chunk in response.content.iter_any():
        received += len(chunk)
        if max_bytes is not None and received > max_bytes:
            # Closing drops the connection, so the origin stops sending now.
            response.close()
            raise TooLargeError(f"body exceeds the {max_bytes}-byte limit")
        try:
            charge.take(len(chunk))
        except TooLargeError:
            response.close()
            raise
        chunks.append(chunk)
    return b"".join(chunks)


__all__ = ["MAX_REDIRECT_HOPS", "DownloadRequest", "download"]
