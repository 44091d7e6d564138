"""What one client may hold of the server, so that one client never slows the others.

A client is a peer address (:func:`client_key`). Three resources are shared by every client, and
each has a total and a per-client share:

- **render slots** (:class:`FairGate`): requests being rendered at once. A client past its share
  waits even while slots are free, and when a slot frees, the clients waiting take turns (round
  robin), not first come first served: a client with a hundred queued requests does not delay
  another client's one by a hundred turns.
- **body bytes** (:class:`ByteBudget`): the bytes of request bodies the server holds (being
  received, waiting for a slot, being rendered). Charged as bytes arrive, so a client trickling
  bodies holds almost nothing; a chunk over the client's share or the total is refused with a 503
  (the server sheds that request instead of holding more).
- **connections** (:class:`ConnectionCounts`): counted by :mod:`mediaref.serve.connections`,
  which refuses a connection over either bound before it is read;
- **media connections** (:class:`ClientSemaphores`): the fetches of all of one client's
  requests hold a bounded number of connections to origins at once (each request also has its
  own bound of 16), so one client's stalled requests cannot keep hundreds of connections opening;
- **time on a connection** (:class:`TransferPace`): a request body must arrive, and a response
  must be taken, at a minimum average rate after a grace and within a timeout, so a client that
  stops reading its response (holding ~17 MB of a 1080p image's tensors) loses the connection;
- **the event loop's time** (:class:`ClientRate`): while other clients' bodies are held, each
  client's bodies are read at a pace, so one streaming bodies at loopback speed cannot keep the
  loop copying for everyone else (alone, a client is read at full speed: a router in front of the
  server, whose address every request comes from, is not throttled for nobody's sake); and a
  client refused more often than a few times a second gets its refusals later and later (up to
  two seconds), so a flood of bad requests slows itself down instead of the server.

Everything here runs on the event loop; nothing is thread-safe, nothing needs to be.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

from aiohttp import web

UNKNOWN_CLIENT = "unknown"


def client_key(request: web.BaseRequest) -> str:
    """The client a request counts against: its peer address."""
    return request.remote or UNKNOWN_CLIENT


@dataclass(frozen=True)
class TransferPace:
    """How fast one transfer with a client must go: whole within ``timeout_seconds``, and after
    the first ``grace_seconds`` at an average of at least ``min_bytes_per_second`` (a transfer of
    1 byte a second is cut at the grace; a large one on a slow but honest link keeps going until
    the timeout). Request bodies (:mod:`mediaref.serve.request_body`) and responses
    (:mod:`mediaref.serve.json_body`) are held to one each."""

    timeout_seconds: float
    min_bytes_per_second: float
    grace_seconds: float

    def deadline(self, done: int) -> float:
        """Seconds after the transfer began by which it must move on, having moved ``done``."""
        by_rate = self.grace_seconds + done / self.min_bytes_per_second
        return min(self.timeout_seconds, by_rate)


def share(total: int, per_client: int) -> int:
    """A per-client bound: ``per_client``, or the whole ``total`` when it is 0 (no share)."""
    return total if per_client <= 0 else min(per_client, total)


@dataclass
class _Waiters:
    held: int = 0
    queue: deque[asyncio.Future[None]] = field(default_factory=deque)


class FairGate:
    """At most ``total`` holders, at most ``per_client`` (0: ``total``) of them one client's;
    waiting clients are served in turn (see the module docstring)."""

    def __init__(self, total: int, per_client: int = 0) -> None:
        if total < 1:
            raise ValueError(f"total must be at least 1, got {total}")
        self.total = total
        self.per_client = share(total, per_client)
        self.in_use = 0
        self._clients: dict[str, _Waiters] = {}
        self._turns: deque[str] = deque()  # clients with someone waiting, next first

    def waiting(self) -> int:
        return sum(len(c.queue) for c in self._clients.values())

    def held_by(self, client: str) -> int:
        entry = self._clients.get(client)
        return 0 if entry is None else entry.held

    @asynccontextmanager
    async def slot(self, client: str) -> AsyncIterator[None]:
        """Hold a slot for ``client`` for the block's duration."""
        await self._acquire(client)
        try:
            yield
        finally:
            self._release(client)

    def _entry(self, client: str) -> _Waiters:
        entry = self._clients.get(client)
        if entry is None:
            entry = self._clients[client] = _Waiters()
        return entry

    def _can_take(self, entry: _Waiters) -> bool:
        return self.in_use < self.total and entry.held < self.per_client

    async def _acquire(self, client: str) -> None:
        entry = self._entry(client)
        if not entry.queue and self._can_take(entry):
            entry.held += 1
            self.in_use += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        entry.queue.append(waiter)
        if client not in self._turns:
            self._turns.append(client)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release(client)  # granted as it was cancelled: hand it on
            else:
                self._forget(client, waiter)
            raise

    def _forget(self, client: str, waiter: asyncio.Future[None]) -> None:
        entry = self._clients.get(client)
        if entry is None:
            return
        if waiter in entry.queue:
            entry.queue.remove(waiter)
        self._drop_if_idle(client, entry)

    def _drop_if_idle(self, client: str, entry: _Waiters) -> None:
        if not entry.queue:
            if client in self._turns:
                self._turns.remove(client)
            if entry.held == 0:
                del self._clients[client]

    def _release(self, client: str) -> None:
        entry = self._clients[client]
        entry.held -= 1
        self.in_use -= 1
        self._drop_if_idle(client, entry)
        self._grant()

    def _grant(self) -> None:
        """Hand free slots to waiting clients, one each in turn."""
        skipped = 0
        while self.in_use < self.total and skipped < len(self._turns):
            client = self._turns[0]
            entry = self._clients[client]
            self._turns.rotate(-1)
            if entry.held >= self.per_client:
                skipped += 1
                continue
            skipped = 0
            waiter = entry.queue.popleft()
            entry.held += 1
            self.in_use += 1
            waiter.set_result(None)
            self._drop_if_idle(client, entry)


class ClientRate:
    """A token bucket per client: ``per_second`` units a second, bursts of ``burst`` (a
    ``per_second`` of 0: never paced). :meth:`pause` says how long a client past its rate waits;
    with ``max_pause``, never longer, and a client's debt never grows past it (it recovers within
    that much of the rate's time once it stops)."""

    _SWEEP_AT = 4096  # clients tracked before the idle ones (full buckets) are forgotten

    def __init__(
        self,
        per_second: float,
        burst: float,
        *,
        max_pause: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_second = per_second
        self.burst = burst
        self._floor = -max_pause * per_second if max_pause is not None else -math.inf
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client: (tokens, when)

    def pause(self, client: str, amount: float, *, contended: bool = True) -> float:
        """Take ``amount`` from ``client``'s bucket; the seconds it should wait now.

        Uncontended (no other client competing for what the rate protects), the client never
        waits and runs up no debt: its bucket only empties, so the moment another client comes,
        it is paced at once, from zero."""
        if self.per_second <= 0:
            return 0.0
        now = self._clock()
        tokens, when = self._buckets.get(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - when) * self.per_second) - amount
        tokens = max(tokens, self._floor if contended else 0.0)
        if len(self._buckets) >= self._SWEEP_AT:
            self._sweep(now)
        self._buckets[client] = (tokens, now)
        return max(0.0, -tokens / self.per_second)

    def _sweep(self, now: float) -> None:
        refill = self.burst / self.per_second
        idle = [
            c
            for c, (tokens, when) in self._buckets.items()
            if tokens + (now - when) * self.per_second >= self.burst or now - when > refill
        ]
        for client in idle:
            del self._buckets[client]


class ClientSemaphores:
    """One semaphore of ``per_client`` slots per client (0: none), shared by that client's
    requests while any of them runs: e.g. the media connections a client's fetches hold at once,
    whatever its requests' number."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self._held: dict[str, tuple[asyncio.Semaphore, int]] = {}  # client: (slots, requests)

    @contextmanager
    def of(self, client: str) -> Iterator[asyncio.Semaphore | None]:
        """``client``'s semaphore for the block (None when there is no bound)."""
        if self.per_client <= 0:
            yield None
            return
        slots, users = self._held.get(client, (None, 0))
        if slots is None:
            slots = asyncio.Semaphore(self.per_client)
        self._held[client] = (slots, users + 1)
        try:
            yield slots
        finally:
            slots, users = self._held[client]
            if users == 1:
                del self._held[client]
            else:
                self._held[client] = (slots, users - 1)


class _Tally:
    """Amounts held per client: at most ``total`` in all, ``per_client`` (0: ``total``) each."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total = total
        self.per_client = share(total, per_client)
        self.used = 0
        self._by_client: dict[str, int] = {}

    def over(self, client: str, amount: int) -> str | None:
        """Which bound ``amount`` more for ``client`` would cross ("client", "total"), if any."""
        if self._by_client.get(client, 0) + amount > self.per_client:
            return "client"
        return "total" if self.used + amount > self.total else None

    def held_by_others(self, client: str) -> bool:
        """Whether any client but ``client`` holds some of it."""
        return len(self._by_client) > (client in self._by_client)

    def add(self, client: str, amount: int) -> None:
        self.used += amount
        self._by_client[client] = self._by_client.get(client, 0) + amount

    def remove(self, client: str, amount: int) -> None:
        self.used -= amount
        left = self._by_client[client] - amount
        if left:
            self._by_client[client] = left
        else:
            del self._by_client[client]


class BudgetExceeded(web.HTTPServiceUnavailable):
    """A chunk that would take the server's (or the client's share of) body bytes over its bound."""


class ByteBudget(_Tally):
    """Bytes held for clients: at most ``total``, at most ``per_client`` (0: ``total``) one's."""

    def __init__(self, total: int, per_client: int = 0) -> None:
        super().__init__(total, per_client)

    @contextmanager
    def account(self, client: str) -> Iterator[Callable[[int], None]]:
        """A ``charge(size)`` for one request of ``client``; its bytes are released on exit."""
        charged = 0

        def charge(size: int) -> None:
            nonlocal charged
            crossed = self.over(client, size)
            if crossed is not None:
                whose = "its share" if crossed == "client" else "the server's"
                raise BudgetExceeded(
                    text=f"the server holds too many request bytes ({whose} of "
                    "--max-buffered-body-mb); retry later",
                    headers={"Retry-After": "1"},
                )
            self.add(client, size)
            charged += size

        try:
            yield charge
        finally:
            if charged:
                self.remove(client, charged)


class ConnectionCounts(_Tally):
    """Open connections: at most ``total``, at most ``per_client`` (0: ``total``) one client's."""

    def __init__(self, total: int, per_client: int = 0) -> None:
        super().__init__(total, per_client)

    @property
    def open(self) -> int:
        return self.used

    def try_open(self, client: str) -> bool:
        """Count a new connection of ``client``; False (nothing counted) over a bound."""
        if self.over(client, 1) is not None:
            return False
        self.add(client, 1)
        return True

    def close(self, client: str) -> None:
        self.remove(client, 1)


__all__ = [
    "UNKNOWN_CLIENT",
    "BudgetExceeded",
    "ByteBudget",
    "ClientRate",
    "ClientSemaphores",
    "ConnectionCounts",
    "FairGate",
    "TransferPace",
    "client_key",
    "share",
]
