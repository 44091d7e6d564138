"""Connection slots: how many downloads may hold a connection at once, in all and per origin.

aiohttp's own pool limits queue a request inside the request's timeout, so with one shared limit
a single slow origin that holds every connection makes healthy fetches elsewhere time out while
they wait. The limits live here instead, in front of the session (whose connector is unlimited),
so that each kind of waiting is charged to the right clock:

- **The total** (``MediaHTTPClient(limit=...)``) bounds the connections downloads hold, so they
  cannot exhaust this process's descriptors. Waiting for one is not charged to an attempt's
  timeout (any origin may be holding them); it is bounded on its own, by the fetch timeout, and
  a download in a request scope never waits past its request's deadline (``request_scope``).
- **Per origin: no limit unless asked for** (``MediaHTTPClient(limit_per_host=...)``). A
  default cap of 32 per origin once kept one slow origin from taking every connection, but it
  made stalled fetches starve healthy ones to the *same* origin: 32 stalls filled the origin's
  slots, and a good fetch to another path there waited behind them until its own timeout. An
  origin is the wrong unit to bound: one origin (a CDN) serves many clients' media, and a client
  who wants more connections names more origins (another port, another hostname). What bounds
  the load now is the request: one request holds at most ``MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS``
  connections, for at most its deadline (``request_scope``), the server admits a bounded number
  of requests at once, and the total bounds the rest. A caller who sets a per-origin cap (to be
  gentle with one origin it fetches much from) has waiting for it charged to the fetch's timeout,
  since only that origin's load can make a fetch wait there, and accepts the starvation above
  when that origin stalls.

Slots belong to one event loop (asyncio primitives are loop-bound), like the sessions that use
them. An origin's entry lives only while some fetch holds or awaits it, so names that are used
once do not accumulate.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

Origin = tuple[str, str, int]  # scheme, canonical host, port


async def acquire_within(slots: asyncio.Semaphore, timeout_seconds: float) -> None:
    """Take a slot, waiting at most ``timeout_seconds``; ``asyncio.TimeoutError`` past that."""
    if not slots.locked() or math.isinf(timeout_seconds):
        # A free slot is taken without suspending; wait_for would fail a timeout of 0 even then.
        await slots.acquire()
        return
    await asyncio.wait_for(slots.acquire(), max(0.0, timeout_seconds))


@dataclass
class _OriginEntry:
    slots: asyncio.Semaphore
    users: int = 0  # fetches holding or awaiting one of its slots


@dataclass
class ConnectionSlots:
    """``total`` slots over all origins and, unless None, ``per_origin`` slots per origin."""

    per_origin: int | None
    total: int
    _origins: dict[Origin, _OriginEntry] = field(default_factory=dict)
    _total: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        if self.total < 1 or (self.per_origin is not None and self.per_origin < 1):
            raise ValueError("connection limits must be at least 1")
        self._total = asyncio.Semaphore(self.total)

    def origins_in_use(self) -> int:
        """Origins with a per-origin entry (a fetch holding or awaiting one of its slots)."""
        return len(self._origins)

    @asynccontextmanager
    async def hold(
        self, origin: Origin, *, origin_wait_seconds: float, pool_wait_seconds: float
    ) -> AsyncIterator[float]:
        """Hold a slot of ``origin`` (if origins are limited) and a total slot; yields the seconds
        spent waiting for the latter.

        Raises ``asyncio.TimeoutError`` when either wait runs past its bound.
        """
        if self.per_origin is None:
            async with self._hold_total(pool_wait_seconds) as waited:
                yield waited
            return
        async with self._hold_origin(origin, origin_wait_seconds):
            # The origin's slot first: a fetch queued behind its own origin holds no total slot.
            async with self._hold_total(pool_wait_seconds) as waited:
                yield waited

    @asynccontextmanager
    async def _hold_total(self, wait_seconds: float) -> AsyncIterator[float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await acquire_within(self._total, wait_seconds)
        try:
            yield loop.time() - started
        finally:
            self._total.release()

    @asynccontextmanager
    async def _hold_origin(self, origin: Origin, wait_seconds: float) -> AsyncIterator[None]:
        assert self.per_origin is not None
        entry = self._origins.get(origin)
        if entry is None:
            entry = self._origins[origin] = _OriginEntry(asyncio.Semaphore(self.per_origin))
        entry.users += 1
        try:
            await acquire_within(entry.slots, wait_seconds)
            try:
                yield
            finally:
                entry.slots.release()
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._origins[origin]


__all__ = ["ConnectionSlots", "Origin", "acquire_within"]
