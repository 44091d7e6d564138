"""One request's fetch scope: a deadline and a connection bound shared by all of its downloads.

Why: vLLM's fetch timeouts are per attempt and per item. One download may take its modality's
timeout times ``VLLM_MEDIA_FETCH_MAX_RETRIES`` attempts, and a request's downloads run side by
side with nothing bounding how many, so a request naming 32 URLs on a stalling origin held its
server slot for 15 s (5 s x 3 attempts) and sent that origin 96 connections. A scope makes what a
request's fetching may cost a property of the request, not of how many URLs it names:

- **One deadline.** The clock starts when the request's first http(s) download holds its
  connection slots (the request's own, then its client's shared ones): a request waiting for its
  client's other requests to free a connection spends none of its deadline, so a client's many
  requests fetch in turn instead of all timing out at once. Each download must end by that start
  plus its own fetch timeout (its modality's ``VLLM_IMAGE_FETCH_TIMEOUT``,
  ``VLLM_VIDEO_FETCH_TIMEOUT`` or ``VLLM_AUDIO_FETCH_TIMEOUT``, or the ``fetch_timeout`` it was
  given), or plus ``deadline_seconds`` when the scope was given one. So a request spends at most the longest
  timeout among what it fetches: 5 s in all for an image-only request, 30 s with a video. Every
  attempt, redirect hop, wait for a connection and retry backoff of its downloads lies inside;
  an attempt keeps vLLM's per-attempt timeout too, and a retry starts only while time remains.
  Running out is a ``RequestDeadlineError`` (HTTP 504), never retried.
- **A connection bound.** At most ``max_connections`` (``MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS``,
  default 16; 0 or less: no bound) of the request's downloads hold a connection at once, each for
  one redirect hop at a time; the others wait for the request's own slots, a wait charged to
  their deadline only. No other request waits behind them, and one request cannot make an origin
  take more.

- **Slots shared with other requests** (``shared_slots``, optional): a semaphore several scopes
  hold as well, taken after the request's own slot; a server gives every request of one client
  the same one, so a client's requests together hold a bounded number of connections.

A scope belongs to one request, as :class:`MediaRequestDownloadBudget` does: make one per request
(the chat item tracker and the render server do) and pass it as
``MediaConnector(..., fetch_scope=scope)``. A connector without one keeps vLLM 0.33's behaviour
(each attempt has the full timeout, retries as the setting says, no bound but the HTTP
client's). A scope reused for a later request finds its clock started long ago.

Slots are asyncio semaphores, which belong to one event loop: a scope keeps one per loop (the
synchronous API downloads on a private loop), so a request that fetches on two loops is bounded
on each rather than failing. The deadline uses ``time.monotonic``, which every loop shares.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mediaref import envs
from mediaref.media._transport.connection_slots import acquire_within
from mediaref.media._transport.errors import RequestDeadlineError


class RequestDeadline:
    """When one download of a request must have ended (``time.monotonic()``), and why.

    Made by a scope, it follows the scope's clock: until one of the request's downloads holds a
    connection, ``at`` is infinite (waiting for a first connection costs no deadline)."""

    def __init__(
        self, at: float, seconds: float, *, scope: MediaRequestFetchScope | None = None
    ) -> None:
        self._at = at
        self.seconds = seconds  # after the request's first connection
        self._scope = scope

    @property
    def at(self) -> float:
        if self._scope is None:
            return self._at
        started = self._scope.started
        return math.inf if started is None else started + self.seconds

    def remaining(self) -> float:
        """Seconds left; raises :class:`RequestDeadlineError` when none are."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise self.passed()
        return left

    def allows(self, seconds: float) -> bool:
        """Whether more than ``seconds`` remain (a backoff and something after it)."""
        return self.at - time.monotonic() > seconds

    def passed(self) -> RequestDeadlineError:
        return RequestDeadlineError(
            f"the request's {self.seconds:g} s fetch deadline passed (counted from its first "
            "connection; every attempt and retry of its downloads shares it)"
        )


class MediaRequestFetchScope:
    """One request's fetch deadline and connection bound (see the module docstring).

    ``deadline_seconds``: the whole request's deadline, counted from its first connection (None:
    each download's own fetch timeout, counted from there). ``max_connections``: downloads of
    the request holding a connection at once (None: ``MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS``,
    read when the scope is made; 0 or less: no bound, as for every cap setting). The attribute
    is the bound in force, None when there is none.
    """

    def __init__(
        self,
        *,
        deadline_seconds: float | None = None,
        max_connections: int | None = None,
        shared_slots: asyncio.Semaphore | None = None,
    ) -> None:
        if max_connections is None:
            max_connections = int(envs.MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS)
        if deadline_seconds is not None and not (
            deadline_seconds > 0 and math.isfinite(deadline_seconds)
        ):
            raise ValueError(f"deadline_seconds must be positive, not {deadline_seconds}")
        self.deadline_seconds = deadline_seconds
        self.max_connections: int | None = max_connections if max_connections > 0 else None
        self.shared_slots = shared_slots
        self._started: float | None = None
        self._slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}
        self._lock = threading.Lock()  # the sync API's loop thread and the caller's may share it

    @property
    def started(self) -> float | None:
        """When the request's first download took its connection slots (None: not yet)."""
        return self._started

    def deadline(self, timeout_seconds: float) -> RequestDeadline:
        """The deadline of a download whose fetch timeout is ``timeout_seconds``, on the
        request's clock (which starts at its first connection)."""
        seconds = self.deadline_seconds if self.deadline_seconds is not None else timeout_seconds
        return RequestDeadline(math.inf, seconds, scope=self)

    def start(self) -> None:
        """Start the request's clock, if it has not started."""
        with self._lock:
            if self._started is None:
                self._started = time.monotonic()

    @asynccontextmanager
    async def connection(self, deadline: RequestDeadline) -> AsyncIterator[None]:
        """Hold one of the request's connection slots (and one of the slots it shares with
        other requests, if any), waiting for them until ``deadline``."""
        own = self._loop_slots(self.max_connections) if self.max_connections else None
        held: list[asyncio.Semaphore] = []
        try:
            for slots in (own, self.shared_slots):
                if slots is None:
                    continue
                try:
                    await acquire_within(slots, deadline.remaining())
                except asyncio.TimeoutError:
                    raise deadline.passed() from None
                held.append(slots)
            self.start()
            yield
        finally:
            for slots in reversed(held):
                slots.release()

    def _loop_slots(self, max_connections: int) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            slots = self._slots.get(loop)
            if slots is None:
                slots = self._slots[loop] = asyncio.Semaphore(max_connections)
            return slots


__all__ = ["MediaRequestFetchScope", "RequestDeadline"]
