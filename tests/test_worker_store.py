"""The workers' shared-memory store: one segment that every worker of a server reads and writes.

The ring's arithmetic (eviction, the skipped gap at the arena's end) is checked with sizes whose
offsets are worked out by hand; sharing, locking and orphans with real spawned processes; the
integrity rules by changing the segment's bytes under the store.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from mediaref.cache import worker_store
from mediaref.cache.worker_store import LOCK_TIMEOUT_S, MAC_BYTES, WorkerSharedStore

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (Linux)")

KiB = 1 << 10
CAPACITY = 64 * KiB  # the smallest store: every offset below is worked out for it
SECRET = secrets.token_bytes(32)
SPAWN = multiprocessing.get_context("spawn")
T = TypeVar("T")


def payload_for(key: str, size: int | None = None) -> bytes:
    """Bytes only ``key`` has; without ``size``, 1 to 193 KiB (also from the key)."""
    digest = hashlib.sha256(key.encode()).digest()
    if size is None:
        size = 1 * KiB + int.from_bytes(digest[:4], "little") % (192 * KiB)
    return (digest * (size // len(digest) + 1))[:size]


def shm_path(store: WorkerSharedStore) -> str:
    return f"/dev/shm/{store.name}"


@pytest.fixture
def store() -> Iterator[WorkerSharedStore]:
    created = WorkerSharedStore.create(CAPACITY, secret=SECRET)
    yield created
    created.close()


def present(store: WorkerSharedStore, keys: list[str], size: int | None = None) -> list[str]:
    """The keys whose exact payload the store returns."""
    found = store.get_many(keys)
    return [k for k, v in zip(keys, found, strict=True) if v == payload_for(k, size)]


def within(seconds: float, call: Callable[[], T]) -> T:
    """``call()``, failing the test (not hanging it) if it takes longer than ``seconds``."""
    result: list[T] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s"
    return result[0]


# --- one process -----------------------------------------------------------------------------


def test_a_worker_reads_what_another_store_wrote(store: WorkerSharedStore) -> None:
    worker = WorkerSharedStore.attach(store.name, secret=SECRET)
    try:
        store.put("a", payload_for("a", 5000))
        assert worker.get_many(["a"]) == [payload_for("a", 5000)]
        worker.put("b", payload_for("b", 100))
        assert store.get_many(["b", "a"]) == [payload_for("b", 100), payload_for("a", 5000)]
        assert worker.stats["hits"] == 1 and worker.stats["bytes_read"] == len(
            payload_for("a", 5000)
        )
        assert worker.stats["written"] == 1 and worker.stats["bytes_written"] == 100
        assert store.seconds > 0 and not store.circuit_open
    finally:
        worker.close()


def test_a_miss_is_none(store: WorkerSharedStore) -> None:
    store.put("a", payload_for("a", 5000))
    assert store.get_many(["absent", "a"]) == [None, payload_for("a", 5000)]
    assert store.get_many([]) == []
    assert store.stats["misses"] == 1 and store.stats["hits"] == 1


def test_the_oldest_entries_make_room(store: WorkerSharedStore) -> None:
    keys = [f"k{i}" for i in range(20)]
    for key in keys:
        store.put(key, payload_for(key, 10 * KiB))
    assert store.stats["written"] == 20
    # An entry is 10 KiB + its MAC: six fit the arena, and the last five fit whatever the gap.
    found = present(store, keys, 10 * KiB)
    assert keys[-5:] == found[-5:] and len(found) <= 6
    assert not set(found) & set(keys[:12])


def test_an_entry_never_wraps_the_arena_end(store: WorkerSharedStore) -> None:
    big, small = 30_000, 4_000
    entry = MAC_BYTES + big
    sizes = {"a": big, "b": big, "s": small, "c": big, "d": big, "e": big}

    def alive(*keys: str) -> list[str]:
        return [k for k in keys if store.get_many([k]) == [payload_for(k, sizes[k])]]

    for key in "abs":  # a at 0, b at 30032, s at 60064: 64096 of 65536 used
        store.put(key, payload_for(key, sizes[key]))
    assert alive("a", "b", "s") == ["a", "b", "s"]
    store.put("c", payload_for("c", big))  # does not fit before the end: skips to 0, over a
    assert alive("a", "b", "s", "c") == ["b", "s", "c"]
    store.put("d", payload_for("d", big))  # at 30032 over b, ending where s begins
    assert alive("b", "s", "c", "d") == ["s", "c", "d"]
    store.put("e", payload_for("e", big))  # skips the 5472-byte gap again, over c
    assert alive("c", "d", "e") == ["d", "e"]
    assert 2 * entry + MAC_BYTES + small <= CAPACITY < 3 * entry  # the sizes force the skips
    assert store.stats["written"] == 6 and store.stats["rejected"] == 0


def test_a_payload_over_half_the_capacity_is_not_written(store: WorkerSharedStore) -> None:
    store.put("small", payload_for("small", 1000))
    store.put("big", payload_for("big", CAPACITY // 2 + 1))
    assert store.stats["not_written"] == 1 and store.get_many(["big"]) == [None]
    assert present(store, ["small"], 1000) == ["small"]  # nothing was evicted for it
    store.put("half", payload_for("half", CAPACITY // 2))
    assert present(store, ["half"], CAPACITY // 2) == ["half"]


# --- integrity -------------------------------------------------------------------------------


def test_a_changed_byte_in_the_arena_is_rejected(store: WorkerSharedStore) -> None:
    payload = payload_for("a", 5000)
    store.put("a", payload)
    with open(shm_path(store), "r+b") as segment:
        at = segment.read().index(payload) + 2500
        segment.seek(at)
        flipped = segment.read(1)[0] ^ 0x01
        segment.seek(at)
        segment.write(bytes([flipped]))
    assert store.get_many(["a"]) == [None]
    assert store.stats["rejected"] == 1 and store.stats["hits"] == 0


def test_a_read_lapped_during_its_copy_is_a_miss(
    store: WorkerSharedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = WorkerSharedStore.attach(store.name, secret=SECRET)
    store.put("a", payload_for("a", 5000))
    copy = store._copy

    def lapped_copy(mm: Any, place: Any) -> Any:
        for i in range(8):  # another worker writes more than the whole arena meanwhile
            writer.put(f"x{i}", payload_for(f"x{i}", 10 * KiB))
        return copy(mm, place)

    monkeypatch.setattr(store, "_copy", lapped_copy)
    try:
        assert store.get_many(["a"]) == [None]
        # Told by the head, before the MAC: a miss, not a damaged entry.
        assert store.stats["misses"] == 1 and store.stats["rejected"] == 0
    finally:
        writer.close()


def test_another_secret_gets_nothing(
    store: WorkerSharedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put("a", payload_for("a", 5000))
    other = secrets.token_bytes(32)
    with pytest.raises(ValueError, match="another secret"):
        WorkerSharedStore.attach(store.name, secret=other)
    # Past the check (forged), its keys digest and its MACs check under another secret.
    check = worker_store._check_value(SECRET, store.name)
    monkeypatch.setattr(worker_store, "_check_value", lambda secret, name: check)
    intruder = WorkerSharedStore.attach(store.name, secret=other)
    try:
        assert intruder.get_many(["a"]) == [None]
        assert intruder.stats["hits"] == 0
    finally:
        intruder.close()


def test_the_segment_is_private_and_holds_no_secret(store: WorkerSharedStore) -> None:
    for key in ("a", "b", "c"):
        store.put(key, payload_for(key, 3000))
    assert os.stat(shm_path(store)).st_mode & 0o777 == 0o600
    with open(shm_path(store), "rb") as segment:
        raw = segment.read()
    assert SECRET not in raw
    assert hashlib.sha256(b"mediaref-worker-store\0" + SECRET).digest() not in raw  # MAC key


def test_the_creator_removes_the_segment_and_a_worker_does_not() -> None:
    created = WorkerSharedStore.create(CAPACITY, secret=SECRET)
    worker = WorkerSharedStore.attach(created.name, secret=SECRET)
    worker.close()
    assert os.path.exists(shm_path(created))
    assert worker.get_many(["a"]) == [None] and worker.stats["errors"] == 1  # never raises
    created.close()
    created.close()
    assert not os.path.exists(shm_path(created))


# --- processes -------------------------------------------------------------------------------


def _hammer(name: str, secret: bytes, mine: str, seconds: float, out: Any) -> None:
    """Read keys of both processes for ``seconds``; write this process's own on a miss."""
    store = WorkerSharedStore.attach(name, secret=secret)
    out.put("ready")
    keys = [f"{side}{i}" for side in "pc" for i in range(24)]
    rng = random.Random(mine)
    wrong = theirs = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        key = rng.choice(keys)
        (found,) = store.get_many([key])
        if found is not None:
            wrong += found != payload_for(key)
            theirs += not key.startswith(mine)
        elif key.startswith(mine):
            store.put(key, payload_for(key))
    out.put((wrong, theirs, dict(store.stats)))
    store.close()


def test_two_processes_share_entries_and_never_read_a_wrong_one() -> None:
    # A 512 KiB arena for 48 entries of up to 193 KiB: it laps every few puts, so copies race.
    created = WorkerSharedStore.create(8 * CAPACITY, secret=SECRET)
    out = SPAWN.Queue()
    child = SPAWN.Process(target=_hammer, args=(created.name, SECRET, "c", 3.0, out))
    child.start()
    try:
        assert out.get(timeout=60) == "ready"
        mine = SPAWN.Queue()
        _hammer(created.name, SECRET, "p", 3.0, mine)
        assert mine.get(timeout=10) == "ready"
        results = [mine.get(timeout=10), out.get(timeout=60)]
    finally:
        child.join(timeout=30)
        created.close()
    for wrong, theirs, stats in results:
        assert wrong == 0
        assert theirs > 0  # hits on the other process's entries
        assert stats["written"] > 0 and stats["hits"] > 0


def _hold_the_lock(name: str, secret: bytes, out: Any) -> None:
    store = WorkerSharedStore.attach(name, secret=secret)
    with store._locked():
        out.put("locked")
        time.sleep(120)


def test_a_worker_killed_holding_the_lock_blocks_nobody(store: WorkerSharedStore) -> None:
    out = SPAWN.Queue()
    child = SPAWN.Process(target=_hold_the_lock, args=(store.name, SECRET, out))
    child.start()
    try:
        assert out.get(timeout=60) == "locked"
        # Held: the read gives up after LOCK_TIMEOUT_S (a miss) instead of waiting.
        assert within(LOCK_TIMEOUT_S + 5, lambda: store.get_many(["a"])) == [None]
        assert store.stats["errors"] == 1
    finally:
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=30)

    def put_then_get() -> list[bytes | None]:
        store.put("a", payload_for("a", 5000))
        return store.get_many(["a"])

    assert within(5, put_then_get) == [payload_for("a", 5000)]  # the kernel let the lock go
    assert store.stats["errors"] == 1


def _create_and_wait(secret: bytes, out: Any) -> None:
    store = WorkerSharedStore.create(CAPACITY, secret=secret)
    out.put(store.name)
    time.sleep(120)


@pytest.mark.skipif(not os.path.isdir("/proc/self/ns"), reason="needs /proc (Linux)")
def test_a_dead_creator_s_segment_is_reclaimed_by_the_next_create() -> None:
    out = SPAWN.Queue()
    child = SPAWN.Process(target=_create_and_wait, args=(SECRET, out))
    child.start()
    try:
        orphan = f"/dev/shm/{out.get(timeout=60)}"
    finally:
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)  # no close(), no atexit: the segment stays
        child.join(timeout=30)
    assert os.path.exists(orphan)
    created = WorkerSharedStore.create(CAPACITY, secret=SECRET)
    try:
        assert not os.path.exists(orphan)
        assert os.path.exists(shm_path(created))
    finally:
        created.close()
