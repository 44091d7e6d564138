"""Single-flight for cache misses: one in-flight request processes a new item, the others wait.

Two requests that miss the same item at once each decoded and processed it: the hot stream of
``benchmarks/bench_workers.py`` decoded 2 of its 40 images twice with one worker and 5 with two,
whose first requests arrive together. Now phase 1 of a cached apply *claims* each hash it misses:

- the first request to claim a hash decodes and processes it, and releases the claim once the
  item is in the cache (or when it fails or is cancelled: the state's ``close()``);
- a later request, holding no claim of its own, gets a :class:`Waiter` instead: it decodes
  nothing, waits until every claim it met is released (or ``CLAIM_WAIT_S`` passes), and phase 2
  looks the items up again: hits, or misses it then processes itself.

A request that holds a claim never waits, so no two requests wait for each other: a waiter
holds nothing anyone waits for. Waiting is an optimization only: a waiter never fails for it,
and the synchronous apply (which runs on the processing worker and could not let the holder's
phase 2 run) takes no claims.

**Across processes** (the workers of one server, sharing a store) a claim is also a POSIX
record lock on one byte of the store's file, at a slot derived from the hash with the store's
keyed digest (:class:`SlotLocks`): the kernel drops it when its holder exits or dies, so a
killed worker leaves no claim behind. Record locks belong to a process, not a thread, so a
process takes a slot's lock with its first claim on it and drops it with its last. Two hashes
that share a slot make one request wait for the other's processing (bounded), never a wrong
answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

CLAIM_WAIT_S = 2.0
"""The longest a request waits for another's claims before processing the items itself (a
stopped holder costs its waiters this, once)."""

_POLL_S = 0.002


@runtime_checkable
class SlotLocks(Protocol):
    """Locks shared with other processes, one per slot; what a worker store offers."""

    def claim_slot(self, key: str) -> int:
        """The slot of ``key`` (a keyed digest: a client cannot aim keys at one slot)."""
        ...

    def try_lock_slot(self, slot: int) -> bool:
        """Take the slot's lock without waiting; False while another process holds it."""
        ...

    def unlock_slot(self, slot: int) -> None: ...


class Claim:
    """This request processes the item; :meth:`release` once it is stored (idempotent)."""

    __slots__ = ("_claims", "_key", "_released")

    def __init__(self, claims: ItemClaims, key: str) -> None:
        self._claims, self._key, self._released = claims, key, False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._claims._release(self._key)


class Waiter:
    """Another request (of this process, or another process's) processes the item."""

    __slots__ = ("_claims", "_done", "_slot")

    def __init__(
        self,
        claims: ItemClaims,
        done: concurrent.futures.Future[None] | None,
        slot: int | None,
    ) -> None:
        self._claims, self._done, self._slot = claims, done, slot

    def done(self) -> bool:
        """Whether the claim it met is released. Never blocks."""
        if self._done is not None:
            return self._done.done()
        assert self._slot is not None
        return self._claims._slot_free(self._slot)


class ItemClaims:
    """The claims on one cache's items, in this process (and through ``slots``, across the
    processes sharing a store)."""

    def __init__(self, slots: SlotLocks | None = None) -> None:
        self._slots = slots
        self._lock = threading.Lock()
        self._held: dict[str, tuple[concurrent.futures.Future[None], int | None]] = {}
        self._slot_holds: dict[int, int] = {}  # slot -> this process's claims on it

    def claim(self, key: str) -> Claim | Waiter:
        """A :class:`Claim` if no one processes ``key`` now, else a :class:`Waiter`."""
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                return Waiter(self, held[0], None)
            slot = None
            if self._slots is not None:
                slot = self._slots.claim_slot(key)
                if not self._slot_holds.get(slot) and not self._try_lock(slot):
                    return Waiter(self, None, slot)
                self._slot_holds[slot] = self._slot_holds.get(slot, 0) + 1
            self._held[key] = (concurrent.futures.Future(), slot)
            return Claim(self, key)

    def _try_lock(self, slot: int) -> bool:
        assert self._slots is not None
        try:
            return self._slots.try_lock_slot(slot)
        except (OSError, ValueError):  # the store is closed or failing: claim in this process
            return True

    def _release(self, key: str) -> None:
        with self._lock:
            done, slot = self._held.pop(key)
            if slot is not None:
                left = self._slot_holds[slot] - 1
                if left:
                    self._slot_holds[slot] = left
                else:
                    del self._slot_holds[slot]
                    self._unlock(slot)
        done.set_result(None)

    def _unlock(self, slot: int) -> None:
        assert self._slots is not None
        try:
            self._slots.unlock_slot(slot)
        except (OSError, ValueError):  # closed: the kernel dropped the lock with the descriptor
            pass

    def _slot_free(self, slot: int) -> bool:
        """Whether no other process holds ``slot`` now (a probe: the lock is not kept)."""
        with self._lock:
            if self._slot_holds.get(slot):
                return True  # this process holds it, so no other process does
            if not self._try_lock(slot):
                return False
            self._unlock(slot)
            return True

    @property
    def held(self) -> int:
        """How many claims this process holds (for tests and metrics)."""
        with self._lock:
            return len(self._held)


async def wait_for_claims(waiters: Sequence[Waiter], timeout: float | None = None) -> bool:
    """Wait until every waiter's claim is released; False if ``timeout`` (default
    :data:`CLAIM_WAIT_S`) passed first."""
    deadline = time.monotonic() + (CLAIM_WAIT_S if timeout is None else timeout)
    pending = [waiter for waiter in waiters if not waiter.done()]
    while pending:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
        pending = [waiter for waiter in pending if not waiter.done()]
    return True


__all__ = ["CLAIM_WAIT_S", "Claim", "ItemClaims", "SlotLocks", "Waiter", "wait_for_claims"]
