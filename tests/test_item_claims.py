"""Claims on missing items: of the requests that miss one item at once, one processes it.

In one process a claim is a table entry; across the workers of a server it is also a record lock
on the shared store's file, which the kernel drops with a dead holder. The renderer-level
behaviour (a waiter decodes nothing; a request holding a claim never waits) is in
``test_renderer.py``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import secrets
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from mediaref.cache import MultiModalProcessorOnlyCache
from mediaref.cache.claims import Claim, ItemClaims, Waiter, wait_for_claims
from mediaref.cache.layered import LayeredProcessorCache
from mediaref.cache.worker_store import WorkerSharedStore

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (Linux)")

SECRET = secrets.token_bytes(32)
SPAWN = multiprocessing.get_context("spawn")
WAIT_S = 20.0


@pytest.fixture
def store() -> Iterator[WorkerSharedStore]:
    created = WorkerSharedStore.create(64 << 10, secret=SECRET)
    yield created
    created.close()


def test_the_first_claim_processes_the_item_and_later_ones_wait_for_it() -> None:
    claims = ItemClaims()
    first = claims.claim("item")
    second = claims.claim("item")
    assert isinstance(first, Claim) and isinstance(second, Waiter)
    assert isinstance(claims.claim("other"), Claim)  # another item is not held up
    assert not second.done()
    first.release()
    first.release()  # idempotent
    assert second.done()
    assert isinstance(claims.claim("item"), Claim)  # released: the next miss claims it again


async def test_waiting_ends_with_the_release_or_the_timeout() -> None:
    claims = ItemClaims()
    held = claims.claim("item")
    assert isinstance(held, Claim)
    waiter = claims.claim("item")
    assert isinstance(waiter, Waiter)
    assert not await wait_for_claims([waiter], timeout=0.05)
    asyncio.get_running_loop().call_later(0.02, held.release)
    assert await wait_for_claims([waiter], timeout=WAIT_S)


def _hold_claim(name: str, secret: bytes, key: str, held: Any, release: Any) -> None:
    store = WorkerSharedStore.attach(name, secret=secret)
    claims = ItemClaims(store)
    claim = claims.claim(key)
    assert isinstance(claim, Claim)
    held.set()
    if release.wait(WAIT_S):
        claim.release()
        release.clear()
        release.wait(WAIT_S)  # stay alive: only the release may have let the others go on
    store.close()


def _start_holder(store: WorkerSharedStore, key: str) -> tuple[Any, Any]:
    held, release = SPAWN.Event(), SPAWN.Event()
    process = SPAWN.Process(
        target=_hold_claim, args=(store.name, SECRET, key, held, release), daemon=True
    )
    process.start()
    assert held.wait(WAIT_S), "the other worker never claimed the item"
    return process, release


def test_a_claim_in_another_worker_is_waited_for_until_released(
    store: WorkerSharedStore,
) -> None:
    process, release = _start_holder(store, "item")
    try:
        claims = ItemClaims(store)
        waiter = claims.claim("item")
        assert isinstance(waiter, Waiter) and not waiter.done()
        assert claims.held == 0
        release.set()
        deadline = asyncio.run(wait_for_claims([waiter], timeout=WAIT_S))
        assert deadline, "the other worker's release was never seen"
        assert isinstance(claims.claim("item"), Claim)  # now this worker may claim it
    finally:
        release.set()
        process.join(WAIT_S)


def test_a_dead_workers_claims_are_gone_with_it(store: WorkerSharedStore) -> None:
    process, _release = _start_holder(store, "item")
    claims = ItemClaims(store)
    waiter = claims.claim("item")
    assert isinstance(waiter, Waiter) and not waiter.done()
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(WAIT_S)
    assert asyncio.run(wait_for_claims([waiter], timeout=WAIT_S))
    assert isinstance(claims.claim("item"), Claim)


def test_a_process_keeps_a_slot_until_its_last_claim_on_it_is_released(
    store: WorkerSharedStore,
) -> None:
    # Record locks belong to the process: two claims of this process on one slot must not drop
    # the slot's lock when the first is released.
    claims = ItemClaims(store)
    slot = store.claim_slot("a")
    other = next(k for k in (f"k{i}" for i in range(1 << 20)) if store.claim_slot(k) == slot)
    first, second = claims.claim("a"), claims.claim(other)
    assert isinstance(first, Claim) and isinstance(second, Claim)
    first.release()
    assert not _slot_free_elsewhere(store, slot)
    second.release()
    assert _slot_free_elsewhere(store, slot)


def _probe_slot(name: str, secret: bytes, slot: int, answer: Any) -> None:
    store = WorkerSharedStore.attach(name, secret=secret)
    locked = store.try_lock_slot(slot)
    answer.put(locked)
    store.close()


def _slot_free_elsewhere(store: WorkerSharedStore, slot: int) -> bool:
    answer = SPAWN.Queue()
    process = SPAWN.Process(target=_probe_slot, args=(store.name, SECRET, slot, answer))
    process.start()
    try:
        return bool(answer.get(timeout=WAIT_S))
    finally:
        process.join(WAIT_S)


def test_a_cache_over_a_worker_store_claims_across_workers(store: WorkerSharedStore) -> None:
    from mediaref.processing.stored_updates import PROMPT_UPDATES_JSON

    layered = LayeredProcessorCache(
        MultiModalProcessorOnlyCache(0.01), [store], PROMPT_UPDATES_JSON
    )
    process, release = _start_holder(store, "item")
    try:
        assert isinstance(layered.item_claims.claim("item"), Waiter)
        assert isinstance(MultiModalProcessorOnlyCache(0.01).item_claims.claim("item"), Claim)
    finally:
        release.set()
        process.join(WAIT_S)
