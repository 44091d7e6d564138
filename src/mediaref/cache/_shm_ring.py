"""A ring of variable-size chunks in one shared-memory segment: one writer, many readers.

Layout of the segment::

    [32-byte creator header][32-byte writer tag][ring of `capacity` bytes ...]
    chunk := [int32 chunk id][int32 chunk size, header included][payload ...]

The creator header (magic, pid namespace, pid, process start time; see ``_shm_reclaim``) lets a
later writer tell that this one is gone and remove a segment it left behind; a writer removes such
orphans when it starts. The writer tag is the store's to fill (a check value that lets a reader
tell it was given the right key); the ring only keeps it. No secret lives in the segment: anyone
who can map it could read one there.

The writer (one process) allocates chunks at the ring's head and frees them from its tail, oldest
first, when a predicate says the oldest is no longer needed; a chunk never wraps around the end of
the ring (the tail gap is skipped). Addresses are logical offsets (the physical place is the
address modulo the ring's size) that start over at 0 whenever the ring empties; chunk ids keep
counting, and a chunk's id, written into the chunk, lets a reader detect that the place it was
given has since been reused.

Segments are created with mode 0600 (``multiprocessing.shared_memory``'s own mode, narrowed
further by the umask): other users can neither map nor remove them.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from multiprocessing import resource_tracker, shared_memory

from mediaref.cache._shm_reclaim import (
    CREATOR_HEADER_BYTES,
    creator_from_header,
    creator_header,
    current_creator,
    reclaim_if_orphaned,
    reclaim_orphans,
)

TAG_BYTES = 32
HEADER_BYTES = CREATOR_HEADER_BYTES + TAG_BYTES
CHUNK_HEADER_BYTES = 8
ID_LIMIT = 1 << 31  # chunk ids are int32 >= 0 and wrap around here


def _int32(view: memoryview) -> int:
    return int.from_bytes(view, "little", signed=True)


def _ignore_registration(name: object, rtype: str) -> None:
    return None


_attach_lock = threading.Lock()


def _attach(name: str) -> shared_memory.SharedMemory:
    """Open an existing segment without adopting it.

    On Python < 3.13 attaching registers the segment with the resource tracker, which unlinks it
    (under the writer's feet) when the reader exits. Unregistering afterwards is no cure: a
    spawned reader shares its parent's tracker, so it would drop the writer's own registration.
    The registration is skipped instead (``track=False`` where Python has it).
    """
    try:
        return shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg]
    except TypeError:  # Python < 3.13 has no track=
        pass
    with _attach_lock:
        register = resource_tracker.register
        resource_tracker.register = _ignore_registration
        try:
            return shared_memory.SharedMemory(name=name)
        finally:
            resource_tracker.register = register


def _create(name: str, size: int) -> shared_memory.SharedMemory:
    """Create the segment; a name left taken by a dead writer is reclaimed once and retried."""
    try:
        return shared_memory.SharedMemory(name=name, create=True, size=size)
    except FileExistsError:
        if not reclaim_if_orphaned(name):
            raise FileExistsError(
                f"shared memory {name!r} exists and its writer is alive (or cannot be told "
                "gone): two writers may not share one segment"
            ) from None
    return shared_memory.SharedMemory(name=name, create=True, size=size)


def _release(segment: shared_memory.SharedMemory, unlink: bool) -> None:
    try:
        segment.close()
    except BufferError:  # a view into the segment is still alive; the OS reclaims it at exit
        pass
    if unlink:
        try:
            segment.unlink()
        except FileNotFoundError:
            pass


class ShmRingBuffer:
    """The ring over a named shared-memory segment; ``create=True`` makes this the writer."""

    def __init__(self, capacity: int, name: str, *, create: bool) -> None:
        if capacity <= 0:
            raise ValueError(f"the shared-memory ring needs a positive size, got {capacity}")
        self.capacity = capacity
        self.is_writer = create
        if create:
            reclaim_orphans()
            self._segment = _create(name, HEADER_BYTES + capacity)
            buf = self._segment.buf
            assert buf is not None  # just created
            buf[:CREATOR_HEADER_BYTES] = creator_header(current_creator())
        else:
            self._segment = _attach(name)
            problem = None
            if self._segment.size < HEADER_BYTES + capacity:
                problem = (
                    f"holds {self._segment.size} bytes, fewer than the "
                    f"{HEADER_BYTES + capacity} this cache is configured for"
                )
            else:
                buf = self._segment.buf
                assert buf is not None  # just attached
                if creator_from_header(bytes(buf[:CREATOR_HEADER_BYTES])) is None:
                    problem = "is not a mediaref cache segment (no creator header)"
            if problem is not None:
                _release(self._segment, unlink=False)
                raise ValueError(f"shared memory {name!r} {problem}")
        self.name = name
        self._closer = weakref.finalize(self, _release, self._segment, create)
        # Writer bookkeeping: live chunks, oldest first (ids are allocated in order).
        self._chunks: dict[int, tuple[int, int]] = {}
        self._tail = 0  # logical address of the oldest live chunk
        self._head = 0  # logical address where the next chunk goes
        self._next_id = 0

    @property
    def _buf(self) -> memoryview:
        buf = self._segment.buf
        if buf is None:
            raise ValueError(f"shared memory {self.name!r} is closed")
        return buf

    @property
    def tag(self) -> bytes:
        """The writer tag: ``TAG_BYTES`` the store chose (zeros until it writes them)."""
        return bytes(self._buf[CREATOR_HEADER_BYTES:HEADER_BYTES])

    def write_tag(self, tag: bytes) -> None:
        self._require_writer()
        if len(tag) != TAG_BYTES:
            raise ValueError(f"a ring's writer tag is {TAG_BYTES} bytes, got {len(tag)}")
        self._buf[CREATOR_HEADER_BYTES:HEADER_BYTES] = tag

    def _require_writer(self) -> None:
        if not self.is_writer:
            raise RuntimeError("only the writer of a shared-memory ring may change it")

    def allocate(self, nbytes: int) -> tuple[int, int]:
        """Reserve a chunk for ``nbytes`` of payload: ``(address, chunk id)``.

        Raises ``MemoryError`` when the ring has no contiguous room (free the oldest chunks and
        retry) and ``ValueError`` when the chunk could never fit.
        """
        self._require_writer()
        size = CHUNK_HEADER_BYTES + nbytes
        if nbytes <= 0 or size > self.capacity:
            raise ValueError(f"a chunk of {nbytes} bytes cannot fit a ring of {self.capacity}")
        address = self._head
        if address % self.capacity + size > self.capacity:  # skip the gap at the ring's end
            address += self.capacity - address % self.capacity
        if address + size - self._tail > self.capacity:
            raise MemoryError("the shared-memory ring is full")
        chunk_id = self._next_id
        start = HEADER_BYTES + address % self.capacity
        header = chunk_id.to_bytes(4, "little", signed=True) + size.to_bytes(
            4, "little", signed=True
        )
        self._buf[start : start + CHUNK_HEADER_BYTES] = header
        self._chunks[chunk_id] = (address, size)
        self._head = address + size
        self._next_id = (chunk_id + 1) % ID_LIMIT
        return address, chunk_id

    def payload(self, address: int) -> tuple[int, memoryview]:
        """The chunk id written at ``address`` and a view of its payload.

        The caller checks the id against the one it expects; a garbage address yields a
        ``ValueError``, never a view outside the ring.
        """
        if not 0 <= address < 1 << 64:
            raise ValueError(f"invalid shared-memory address {address}")
        offset = address % self.capacity
        if offset + CHUNK_HEADER_BYTES > self.capacity:
            raise ValueError(f"invalid shared-memory address {address}")
        start = HEADER_BYTES + offset
        buf = self._buf
        chunk_id = _int32(buf[start : start + 4])
        size = _int32(buf[start + 4 : start + 8])
        if not CHUNK_HEADER_BYTES < size <= self.capacity - offset:
            raise ValueError(f"no chunk at shared-memory address {address}")
        return chunk_id, buf[start + CHUNK_HEADER_BYTES : start + size]

    def free_oldest(self, is_free: Callable[[int, memoryview], bool], nbytes: int) -> list[int]:
        """Free chunks from the tail while ``is_free(id, payload)`` holds, until ``nbytes`` are
        back (or the next one is still needed); the ids freed, oldest first."""
        self._require_writer()
        freed: list[int] = []
        reclaimed = 0
        while self._chunks and reclaimed < nbytes:
            chunk_id, (address, size) = next(iter(self._chunks.items()))
            if not is_free(chunk_id, self.payload(address)[1]):
                break
            del self._chunks[chunk_id]
            freed.append(chunk_id)
            reclaimed += size
            if self._chunks:
                self._tail = next(iter(self._chunks.values()))[0]
            else:  # empty: start over at the ring's beginning (ids keep counting)
                self._tail = self._head = 0
        return freed

    def clear(self) -> None:
        """Forget every chunk. Ids keep counting, so handles issued before the clear fail their
        id check once their place is reused instead of naming another object."""
        self._require_writer()
        self._chunks.clear()
        self._tail = self._head = 0

    def close(self) -> None:
        """Unmap the segment; the writer also removes it."""
        self._closer()


__all__ = ["CHUNK_HEADER_BYTES", "HEADER_BYTES", "TAG_BYTES", "ShmRingBuffer"]
