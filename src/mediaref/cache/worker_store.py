"""One shared-memory segment that every worker of one server reads and writes.

``mediaref serve --workers N`` runs N processes; with private caches, an item one worker processed
is processed again by every other worker it reaches. The supervisor creates one segment
(:meth:`WorkerSharedStore.create`) and hands its name and a secret to the workers, which attach
(:meth:`WorkerSharedStore.attach`), read and write. Entries are opaque payloads by key. It is a
cache: an entry may vanish at any time; a wrong or damaged one is never served.

Layout of the segment::

    [creator header][store header: magic, capacity, buckets, u64 write head, check][index][arena]
    way   := [16-byte key digest][u64 offset][u64 length][u64 state: empty, reserved, committed]
    entry := [32-byte MAC][payload]

**The arena** is a ring written at the head, oldest overwritten first. Offsets are logical, a u64
that only grows (the bytes live at ``offset % capacity``); an entry never wraps the arena's end,
the gap there is skipped. Every reservation lies after all earlier ones, so the first to reach an
entry's bytes ends past ``offset + capacity``: an entry is intact while
``head - offset <= capacity``. (Conservative: an entry whose next lap was a skipped gap counts as
overwritten although it is not.)

**The index** is set-associative: a key's digest names a bucket of ``WAYS`` ways; a new entry
takes its key's way, else an empty or overwritten one, else the oldest. Nothing is ever deleted,
so there are no tombstones.

**Locking.** ``fcntl.lockf`` on one byte of the segment's own file (tmpfs has POSIX record
locks), plus a ``threading.Lock`` per segment per process: record locks do not exclude threads
of one process, and closing any descriptor of the file drops all of the process's locks on it.
The kernel releases a record lock when its holder dies, so a SIGKILLed worker never blocks the
others (a ``multiprocessing.Lock`` it held would stay held forever); a stopped holder costs at
most ``LOCK_TIMEOUT_S``, after which the call gives up (counted ``errors``). No lock is held while
megabytes are copied: a writer reserves its region and a way (marked reserved) under the lock,
copies outside it, and commits under it if the head has not lapped its region meanwhile; a reader
finds the way under the lock, copies outside it, then re-reads the head under the lock: if a
writer reserved over the region during the copy, it is a miss.

**Claims.** One more lock byte per claim slot, far past the segment's end
(:meth:`WorkerSharedStore.try_lock_slot`), for :mod:`mediaref.cache.claims`: which worker
processes an item several of them miss at once. The kernel drops a dead worker's.

**Integrity.** Each entry carries a MAC (BLAKE3 keyed by a key derived from the secret) over its
key and payload, computed from the writer's own bytes; the reader checks it on its private copy
and returns that copy. An entry that fails is counted ``rejected`` and answered None. The MAC also
covers the one race the head cannot show: a writer lapped during its copy goes on writing into a
newer entry's region (it then fails to commit; the newer entry fails its MAC). With an arena many
payloads large that takes a whole lap of writes during one copy. The secret is never in the
segment; the header holds a check value derived from it and the name, so a worker given another
secret fails at attach.

Segments are ``/dev/shm`` files of mode 0600, named and headed as ``_shm_reclaim`` describes, so
the segment of a supervisor that was SIGKILLed is removed by the next :meth:`create`. Linux only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import mmap
import os
import stat
import struct
import threading
import time
import weakref
from collections import Counter
from collections.abc import Iterator, Sequence

from blake3 import blake3

from mediaref.cache._shm_reclaim import (
    CREATOR_HEADER_BYTES,
    SHM_DIR,
    creator_header,
    creator_of_name,
    current_creator,
    reclaim_orphans,
    segment_name,
)

WAYS = 4
MAC_BYTES = 32
CLAIM_SLOTS = 1 << 16
_CLAIMS_AT = 1 << 50  # claim locks' bytes: far past any segment's end
LOCK_TIMEOUT_S = 0.5
MIN_CAPACITY = 64 * 1024
_BYTES_PER_WAY = 16 * 1024  # one index way per 16 KiB of arena: most items are far larger
_MIN_BUCKETS = 64

_MAGIC = b"mrwks\x00\x01\x00"  # mediaref worker store, layout version 1
_HEADER = struct.Struct("<8sQQQ32s")  # magic, capacity, buckets, write head, check
_HEAD_AT = CREATOR_HEADER_BYTES + 24
_U64 = struct.Struct("<Q")
_WAY = struct.Struct("<16sQQQ")  # key digest, logical offset, length, state
_EMPTY, _RESERVED, _COMMITTED = 0, 1, 2
_INDEX_AT = CREATOR_HEADER_BYTES + _HEADER.size
_FAILURES = (OSError, ValueError, struct.error)  # a busy lock, a closed store, a bad segment

_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


def _thread_lock(name: str) -> threading.Lock:
    """The lock all stores of this process share for segment ``name`` (see the docstring)."""
    with _thread_locks_guard:
        return _thread_locks.setdefault(name, threading.Lock())


def _arena_at(buckets: int) -> int:
    return -(-(_INDEX_AT + buckets * WAYS * _WAY.size) // 64) * 64  # cache-line aligned


def _derived(secret: bytes, purpose: bytes) -> bytes:
    return hashlib.sha256(purpose + b"\0" + secret).digest()


def _check_value(secret: bytes, name: str) -> bytes:
    hasher = blake3(name.encode(), key=_derived(secret, b"mediaref-worker-store-check"))
    return bytes(hasher.digest())


def _release(
    mm: mmap.mmap, fd: int, lock: threading.Lock, path: str | None, owner_pid: int
) -> None:
    # Under the process's lock: closing the descriptor drops any record lock this process holds.
    acquired = lock.acquire(timeout=LOCK_TIMEOUT_S)
    try:
        mm.close()
        os.close(fd)
    finally:
        if acquired:
            lock.release()
    if path is not None and os.getpid() == owner_pid:  # not a child that inherited it by fork
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class _LockBusy(TimeoutError):
    pass


class WorkerSharedStore:
    """Payloads by key in a segment every worker reads and writes (see the module docstring).

    ``stats`` counts, in this process, ``hits``, ``misses``, ``rejected`` (failed the MAC),
    ``errors`` (lock busy past ``LOCK_TIMEOUT_S``, store closed), ``written``, ``not_written``
    (over half the capacity, lapped during its copy, or an error), ``bytes_read`` and
    ``bytes_written``; ``seconds`` sums the time spent in :meth:`get_many`. Reads and writes
    never raise.
    """

    def __init__(self, name: str, fd: int, secret: bytes, *, owner: bool) -> None:
        """Use :meth:`create` or :meth:`attach`; this owns ``fd`` once it returns."""
        self._mm, self._capacity, self._buckets = _mapped(name, fd, secret)
        self._name = name
        self._fd = fd
        self._arena = _arena_at(self._buckets)
        self._mac_key = _derived(secret, b"mediaref-worker-store")
        # Keyed, so that whoever picks keys without the secret cannot aim them at one bucket.
        self._index_key = _derived(secret, b"mediaref-worker-store-index")
        self._thread_lock = _thread_lock(name)
        path = os.path.join(SHM_DIR, name) if owner else None
        self._closer = weakref.finalize(
            self, _release, self._mm, fd, self._thread_lock, path, os.getpid()
        )
        self.stats: Counter[str] = Counter()
        self.seconds = 0.0

    @classmethod
    def create(cls, capacity_bytes: int, *, secret: bytes) -> WorkerSharedStore:
        """A new segment with an arena of ``capacity_bytes``, made after removing this user's
        orphaned segments; its :meth:`close` removes it."""
        if capacity_bytes < MIN_CAPACITY or len(secret) < 16:
            raise ValueError(f"a worker store needs {MIN_CAPACITY}+ bytes and a 16+ byte secret")
        reclaim_orphans()
        name = segment_name()
        path = os.path.join(SHM_DIR, name)
        buckets = max(_MIN_BUCKETS, capacity_bytes // _BYTES_PER_WAY // WAYS)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            # Every page now (zeros: every way empty): a page tmpfs could not supply later would
            # be a SIGBUS in some worker's copy instead of an OSError here.
            os.posix_fallocate(fd, 0, _arena_at(buckets) + capacity_bytes)
            header = _HEADER.pack(_MAGIC, capacity_bytes, buckets, 0, _check_value(secret, name))
            os.pwrite(fd, creator_header(current_creator()) + header, 0)
            return cls(name, fd, secret, owner=True)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise

    @classmethod
    def attach(cls, name: str, *, secret: bytes) -> WorkerSharedStore:
        """Map the segment :meth:`create` made (its :attr:`name`); :meth:`close` only unmaps.
        ``ValueError`` when it is not a worker store or ``secret`` is not its creator's."""
        if creator_of_name(name) is None:  # also keeps the path inside /dev/shm
            raise ValueError(f"{name!r} is not the name of a worker store's segment")
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            return cls(name, fd, secret, owner=False)
        except BaseException:
            os.close(fd)
            raise

    @property
    def name(self) -> str:
        return self._name

    @property
    def circuit_open(self) -> bool:
        return False  # nothing to trip: the segment is local memory

    # -- reads -------------------------------------------------------------------------------

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The verified payload stored for each key, None where there is none."""
        start = time.perf_counter()
        try:
            return self._get_many(keys)
        finally:
            self.seconds += time.perf_counter() - start

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        try:
            with self._locked() as mm:
                head = _U64.unpack_from(mm, _HEAD_AT)[0]
                places = [self._find(mm, self._digest(key), head) for key in keys]
            copies = [self._copy(mm, place) for place in places]  # outside the lock
            with self._locked() as mm:
                head = _U64.unpack_from(mm, _HEAD_AT)[0]
        except _FAILURES:
            self.stats["errors"] += 1
            return [None] * len(keys)
        found: list[bytes | None] = []
        for key, place, copy in zip(keys, places, copies, strict=True):
            payload = None
            if place is None or copy is None or head - place[0] > self._capacity:
                self.stats["misses"] += 1  # absent, or a writer reserved over it as we copied
            elif not hmac.compare_digest(copy[0], self._mac(key, copy[1])):
                self.stats["rejected"] += 1
            else:
                payload = copy[1]
                self.stats["hits"] += 1
                self.stats["bytes_read"] += len(payload)
            found.append(payload)
        return found

    def _find(self, mm: mmap.mmap, digest: bytes, head: int) -> tuple[int, int] | None:
        """The committed, intact entry of ``digest``: (logical offset, length)."""
        cap = self._capacity
        for at in self._ways(digest):
            found, offset, length, state = _WAY.unpack_from(mm, at)
            if found == digest and state == _COMMITTED:
                # The ring's rule; and, whatever the index holds, a place inside the arena.
                inside = MAC_BYTES <= length and offset % cap + length <= cap
                intact = offset + length <= head and head - offset <= cap
                return (offset, length) if inside and intact else None
        return None

    def _copy(self, mm: mmap.mmap, place: tuple[int, int] | None) -> tuple[bytes, bytes] | None:
        """A private copy of the entry at ``place``: its MAC and its payload."""
        if place is None:
            return None
        start = self._arena + place[0] % self._capacity
        return mm[start : start + MAC_BYTES], mm[start + MAC_BYTES : start + place[1]]

    # -- writes ------------------------------------------------------------------------------

    def put(self, key: str, payload: bytes | memoryview) -> None:
        """Store ``payload`` under ``key`` now, overwriting the oldest entries as needed; one
        over half the capacity is not written (it would evict too much)."""
        cap = self._capacity
        if len(payload) > cap // 2:
            self.stats["not_written"] += 1
            return
        size = MAC_BYTES + len(payload)
        digest = self._digest(key)
        mac = self._mac(key, payload)  # from this process's bytes, not the segment's
        try:
            with self._locked() as mm:
                head = _U64.unpack_from(mm, _HEAD_AT)[0]
                offset = head if head % cap + size <= cap else head + cap - head % cap
                _U64.pack_into(mm, _HEAD_AT, offset + size)
                way = self._victim(mm, digest, offset + size)
                _WAY.pack_into(mm, way, digest, offset, size, _RESERVED)
            start = self._arena + offset % cap
            mm[start : start + MAC_BYTES] = mac
            mm[start + MAC_BYTES : start + size] = payload
            with self._locked() as mm:
                head = _U64.unpack_from(mm, _HEAD_AT)[0]
                ours = _WAY.unpack_from(mm, way) == (digest, offset, size, _RESERVED)
                committed = ours and head - offset <= cap
                if committed:
                    _WAY.pack_into(mm, way, digest, offset, size, _COMMITTED)
        except _FAILURES:
            self.stats["errors"] += 1
            self.stats["not_written"] += 1
            return
        if committed:
            self.stats["written"] += 1
            self.stats["bytes_written"] += len(payload)
        else:  # lapped during the copy, or its way taken by a newer entry
            self.stats["not_written"] += 1

    def _victim(self, mm: mmap.mmap, digest: bytes, head: int) -> int:
        """The way a new entry of ``digest`` takes: its key's, else an empty or overwritten one,
        else the oldest."""

        def rank(at: int) -> tuple[int, int]:
            found, offset, _, state = _WAY.unpack_from(mm, at)
            if found == digest:
                return (-1, 0)
            return (int(state != _EMPTY and head - offset <= self._capacity), offset)

        return min(self._ways(digest), key=rank)

    # -- the rest ----------------------------------------------------------------------------

    def _ways(self, digest: bytes) -> range:
        first = _INDEX_AT + int.from_bytes(digest[:8], "little") % self._buckets * WAYS * _WAY.size
        return range(first, first + WAYS * _WAY.size, _WAY.size)

    def _digest(self, key: str) -> bytes:
        return hashlib.blake2b(key.encode(), digest_size=16, key=self._index_key).digest()

    # -- claims (mediaref.cache.claims): who processes a missing item, across the workers ------

    def claim_slot(self, key: str) -> int:
        return int.from_bytes(self._digest(key)[:4], "little") % CLAIM_SLOTS

    def try_lock_slot(self, slot: int) -> bool:
        """Lock one byte past the segment's end (POSIX allows locks beyond a file's end; the
        store's own lock is byte 0). False while another process holds it."""
        if not self._closer.alive:  # its descriptor's number may name another file now
            raise ValueError(f"worker store {self._name!r} is closed")
        return self._try_lock_byte(_CLAIMS_AT + slot)

    def unlock_slot(self, slot: int) -> None:
        if self._closer.alive:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, _CLAIMS_AT + slot)

    def _try_lock_byte(self, offset: int) -> bool:
        """The record lock on one byte of the file, without waiting: False while another
        process holds it."""
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
        except OSError as error:
            if error.errno in (errno.EACCES, errno.EAGAIN):
                return False
            raise
        return True

    def _mac(self, key: str, payload: bytes | memoryview) -> bytes:
        raw = key.encode()
        hasher = blake3(len(raw).to_bytes(4, "little") + raw, key=self._mac_key)
        hasher.update(payload)
        return bytes(hasher.digest())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[mmap.mmap]:
        """Hold this process's lock, then the record lock; ``_LockBusy`` after
        ``LOCK_TIMEOUT_S`` of waiting."""
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        if not self._thread_lock.acquire(timeout=LOCK_TIMEOUT_S):
            raise _LockBusy()
        try:
            if not self._closer.alive:  # its descriptor's number may name another file now
                raise ValueError(f"worker store {self._name!r} is closed")
            # Polled: a blocking lockf cannot time out. Critical sections last microseconds,
            # so a waiter rarely sleeps more than once.
            delay = 20e-6
            while not self._try_lock_byte(0):
                if time.monotonic() > deadline:
                    raise _LockBusy()
                time.sleep(delay)
                delay = min(2 * delay, 1e-3)
            try:
                yield self._mm
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)
        finally:
            self._thread_lock.release()

    def close(self) -> None:
        """Unmap the segment; the creator also removes it."""
        self._closer()


def _mapped(name: str, fd: int, secret: bytes) -> tuple[mmap.mmap, int, int]:
    """Map ``fd`` and check that it holds a worker store written with ``secret``."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        raise ValueError(f"shared memory {name!r} is not a regular file of this user")
    if info.st_size < _INDEX_AT:
        raise ValueError(f"shared memory {name!r} is too small for a worker store")
    mm = mmap.mmap(fd, info.st_size)
    magic, capacity, buckets, _, check = _HEADER.unpack_from(mm, CREATOR_HEADER_BYTES)
    problem = None
    if magic != _MAGIC or capacity < MIN_CAPACITY or buckets < 1:
        problem = "is not a worker store (or another version's)"
    elif _arena_at(buckets) + capacity != info.st_size:
        problem = "does not have the size its header says"
    elif not hmac.compare_digest(check, _check_value(secret, name)):
        problem = "was created with another secret than the one given"
    if problem is not None:
        mm.close()
        raise ValueError(f"shared memory {name!r} {problem}")
    return mm, capacity, buckets


__all__ = ["LOCK_TIMEOUT_S", "MAC_BYTES", "MIN_CAPACITY", "WAYS", "WorkerSharedStore"]
