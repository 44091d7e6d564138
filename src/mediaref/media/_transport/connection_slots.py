"""Connection slots: how many downloads may talk to one origin, and to all origins, at once.

aiohttp's own pool limits queue a request inside the request's timeout, so with one shared limit
a single slow origin that holds every connection makes healthy fetches to other origins time out
while they wait. The limits live here instead, in front of the session (whose connector is
unlimited), so the two kinds of waiting can be told apart:

- waiting for a slot of the *same* origin is charged to the fetch's timeout: only that origin
  (its slowness, or its load) can make a fetch wait there;
- waiting for one of the total slots is not charged: any origin may be holding them. It is
  bounded on its own (by the fetch timeout again), so a fetch takes at most that wait plus its
  timeout. The total is many times the per-origin limit, so it binds only when many distinct
  origins are stalled at once; it exists to keep downloads from exhausting descriptors.

Slots belong to one event loop (asyncio primitives are loop-bound), like the sessions that use
them. An origin's entry lives only while some fetch holds or awaits it, so names that are used
once do not accumulate.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

Origin = tuple[str, str, int]  # scheme, canonical host, port


async def _acquire(slots: asyncio.Semaphore, timeout_seconds: float) -> None:
    if not slots.locked():
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
    """``per_origin`` slots per origin and ``total`` over all origins, for one event loop."""

    per_origin: int
    total: int
    _origins: dict[Origin, _OriginEntry] = field(default_factory=dict)
    _total: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        if self.per_origin < 1 or self.total < 1:
            raise ValueError("connection limits must be at least 1")
        self._total = asyncio.Semaphore(self.total)

    def origins_in_use(self) -> int:
        return len(self._origins)

    @asynccontextmanager
    async def hold(
        self, origin: Origin, *, origin_wait_seconds: float, pool_wait_seconds: float
    ) -> AsyncIterator[float]:
        """Hold a slot of ``origin`` and a total slot; yields the seconds spent on the latter.

        Raises ``asyncio.TimeoutError`` when either wait runs past its bound.
        """
        entry = self._origins.get(origin)
        if entry is None:
            entry = self._origins[origin] = _OriginEntry(asyncio.Semaphore(self.per_origin))
        entry.users += 1
        try:
            # The origin's slot first: a fetch queued behind its own origin holds no total slot.
            await _acquire(entry.slots, origin_wait_seconds)
            try:
                loop = asyncio.get_running_loop()
                started = loop.time()
                await _acquire(self._total, pool_wait_seconds)
                try:
                    yield loop.time() - started
                finally:
                    self._total.release()
            finally:
                entry.slots.release()
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._origins[origin]


__all__ = ["ConnectionSlots", "Origin"]
