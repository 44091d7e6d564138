"""The connector's two drivers: a fetch plan (:mod:`._fetch_plan`) run to one ref per decoder,
from synchronous code or on the running event loop.

There is one implementation with two drivers. Planning, reading a local payload, the download
coroutine and building refs are shared; the synchronous driver (:func:`load`) runs the download on
a private event loop thread (``_transport/loop_thread.py``: so it also works when called from a
thread whose own loop is running); the async driver (:func:`load_async`) awaits it and builds
refs on the media pool, because deriving a key is linear in the payload: only a short ``data:``
URL is read on the loop (:data:`INLINE_DATA_URL_CHARS`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from mediaref.media._fetch_plan import FetchPlan
from mediaref.media._transport.errors import transport_errors
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media._transport.http_download import DownloadRequest, download
from mediaref.media._transport.loop_thread import run_sync
from mediaref.media._transport.payload import Payload, scheme_of
from mediaref.media.base import MediaIO, MediaRef
from mediaref.media.executor import get_media_executor

INLINE_DATA_URL_CHARS = 256 * 1024
"""A ``data:`` URL this short is read on the running loop by the async API: decoding and keying
its payload (~0.2 ms) costs less than the media pool's round trip, whose thread hand-offs cost as
much again on a busy core (a routing request of four 720p JPEGs: 145 -> 171 req/s on one core).
A longer one is read on the pool, as vLLM reads every one, so a megabyte never holds the loop."""

_T = TypeVar("_T")


def load(
    connection: MediaHTTPClient, url: str, plan: FetchPlan, media_ios: Sequence[MediaIO[Any]]
) -> list[MediaRef[Any]]:
    """The synchronous driver."""
    if isinstance(plan, DownloadRequest):
        # Starting the private loop can fail too (no descriptors left for its self-pipe).
        with transport_errors(url):
            payload = Payload(run_sync(download(connection, plan)))
    else:
        payload = plan()
    return payload.build_refs(media_ios)


async def load_async(
    connection: MediaHTTPClient, url: str, plan: FetchPlan, media_ios: Sequence[MediaIO[Any]]
) -> list[MediaRef[Any]]:
    """The async driver: downloads on the running loop, reads and builds on the media pool."""
    if isinstance(plan, DownloadRequest):
        payload = Payload(await download(connection, plan))
        return await on_media_pool(lambda: payload.build_refs(media_ios))
    read_local = plan
    if len(url) <= INLINE_DATA_URL_CHARS and scheme_of(url) == "data":
        return read_local().build_refs(media_ios)
    return await on_media_pool(lambda: read_local().build_refs(media_ios))


async def on_media_pool(work: Callable[..., _T], *args: Any) -> _T:
    """``work(*args)`` on the media pool, off the event loop (it is linear in the payload)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(get_media_executor(), work, *args)


__all__ = ["INLINE_DATA_URL_CHARS", "load", "load_async", "on_media_pool"]
