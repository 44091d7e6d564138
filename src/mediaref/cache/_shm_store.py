"""Processed items by hash in a shared-memory ring: written by the frontend, read by the workers.

Each object is one ring chunk::

    payload := [int32 read count][serialized item]

**Handles.** The writer hands out ``(address, chunk id, signature)``; the signature is an HMAC,
keyed by the ring's secret, over the item's hash, the address and the id. A reader refuses a
handle whose signature does not check out before it reads a byte at that address, so a request
cannot point a worker at memory of its choosing, and a stale handle fails its id check once its
place has been reused.

**Freeing.** Every time the writer hands a handle out, each of the ``n_readers`` workers will read
the object once and count its read (under a lock the workers share). An object may be freed only
when its reads have caught up with ``handed out x n_readers`` and the writer has not just touched
it; the ring frees oldest first (FIFO), only as far as that allows.
"""

from __future__ import annotations

import hashlib
import hmac
from multiprocessing.synchronize import Lock as LockType

from mediaref.cache._shm_ring import ShmRingBuffer
from mediaref.cache._shm_serde import deserialize_item, serialize_item, write_payload
from mediaref.inputs import MultiModalKwargsItem

READ_COUNT_BYTES = 4
SIGNATURE_BYTES = hashlib.sha256().digest_size


def _count(view: memoryview) -> int:
    return int.from_bytes(view[:READ_COUNT_BYTES], "little", signed=True)


class InvalidShmHandle(ValueError):
    """A handle that this store did not issue for this hash, or whose object is gone."""

    def __init__(self) -> None:
        super().__init__("Invalid SHM handle signature for cache key.")


class ShmObjectStore:
    """Items by hash in a :class:`ShmRingBuffer`. The ring's writer is the store's writer; a
    reader needs ``reader_lock``, shared by all readers."""

    def __init__(
        self,
        ring: ShmRingBuffer,
        *,
        max_object_size: int,
        n_readers: int,
        reader_lock: LockType | None = None,
    ) -> None:
        if not ring.is_writer and reader_lock is None:
            raise ValueError("a shared-memory cache reader needs the workers' shared lock")
        self.ring = ring
        self.max_object_size = max_object_size
        self.n_readers = n_readers
        self._reader_lock = reader_lock
        self._secret = ring.secret
        # Writer bookkeeping.
        self.key_index: dict[str, tuple[int, int]] = {}
        self._key_of_id: dict[int, str] = {}
        self._handed_out: dict[int, int] = {}
        self._touched: set[int] = set()

    # -- signatures ------------------------------------------------------------------------

    def _sign(self, key: str, address: int, chunk_id: int) -> bytes:
        message = (
            hashlib.sha256(key.encode()).digest()
            + address.to_bytes(8, "little")
            + chunk_id.to_bytes(4, "little")
        )
        return hmac.new(self._secret, message, hashlib.sha256).digest()

    def signature(self, key: str) -> list[int]:
        """The signature of ``key``'s current handle."""
        address, chunk_id = self.key_index[key]
        return list(self._sign(key, address, chunk_id))

    def verify(self, key: object, address: object, chunk_id: object, signature: object) -> None:
        """Raise :class:`InvalidShmHandle` unless this store issued the handle for ``key`` (the
        writer also requires it to be ``key``'s current entry)."""
        if (
            not isinstance(key, str)
            or type(address) is not int
            or not 0 <= address < 1 << 64
            or type(chunk_id) is not int
            or not 0 <= chunk_id < 1 << 32
            or not isinstance(signature, list)
            or len(signature) != SIGNATURE_BYTES
            or any(type(b) is not int or not 0 <= b <= 255 for b in signature)
        ):
            raise InvalidShmHandle()
        if self.ring.is_writer and self.key_index.get(key) != (address, chunk_id):
            raise InvalidShmHandle()
        if not hmac.compare_digest(bytes(signature), self._sign(key, address, chunk_id)):
            raise InvalidShmHandle()

    # -- the writer ------------------------------------------------------------------------

    def is_cached(self, key: str) -> bool:
        return key in self.key_index

    def put(self, key: str, item: MultiModalKwargsItem) -> tuple[int, int]:
        """Store ``item`` under ``key``: its ``(address, chunk id)``, handed out once.

        ``ValueError``: ``key`` is stored already, or the item is too large (or not storable);
        ``MemoryError``: no room even after freeing what the readers are done with.
        """
        if key in self.key_index:
            raise ValueError(f"Key {key!r} already exists in the storage.")
        header, buffers, nbytes = serialize_item(item)
        size = READ_COUNT_BYTES + nbytes
        if size > self.max_object_size:
            raise ValueError(
                f"Serialized object size ({size} bytes) exceeds max object size "
                f"({self.max_object_size} bytes)"
            )
        try:
            address, chunk_id = self.ring.allocate(size)
        except MemoryError:
            self.free_unused()
            address, chunk_id = self.ring.allocate(size)
        _, view = self.ring.payload(address)
        with view:
            view[:READ_COUNT_BYTES] = (0).to_bytes(READ_COUNT_BYTES, "little")
            write_payload(view[READ_COUNT_BYTES:], header, buffers)
        self.key_index[key] = (address, chunk_id)
        self._key_of_id[chunk_id] = key
        self._handed_out[chunk_id] = 1
        return address, chunk_id

    def get_cached(self, key: str) -> tuple[int, int]:
        """Hand ``key``'s handle out once more (each reader will read it again)."""
        address, chunk_id = self.key_index[key]
        self._handed_out[chunk_id] += 1
        self._touched.discard(chunk_id)
        return address, chunk_id

    def touch(self, key: str) -> None:
        """Protect ``key`` from being freed until it is handed out or touches are released."""
        entry = self.key_index.get(key)
        if entry is not None:
            self._touched.add(entry[1])

    def release_touches(self) -> None:
        self._touched.clear()

    def _is_free(self, chunk_id: int, payload: memoryview) -> bool:
        if chunk_id in self._touched:
            return False
        return _count(payload) >= self._handed_out[chunk_id] * self.n_readers

    def free_unused(self) -> None:
        """Free the oldest objects every reader is done with (up to two objects' worth; the ring
        may be fragmented, so one object's worth might not leave a contiguous gap)."""
        for chunk_id in self.ring.free_oldest(self._is_free, 2 * self.max_object_size):
            key = self._key_of_id.pop(chunk_id)
            del self.key_index[key]
            del self._handed_out[chunk_id]
            self._touched.discard(chunk_id)

    def clear(self) -> None:
        if self.ring.is_writer:
            self.ring.clear()
            self.key_index.clear()
            self._key_of_id.clear()
            self._handed_out.clear()
            self._touched.clear()

    # -- the readers -----------------------------------------------------------------------

    def _checked_payload(self, key: str, address: int, chunk_id: int) -> memoryview:
        found, view = self.ring.payload(address)
        if found != chunk_id:
            view.release()
            raise ValueError(
                f"Data for address:id '{address}:{chunk_id}' has been modified or is invalid."
            )
        return view

    def get(
        self, address: int, chunk_id: int, signature: list[int] | None, key: str
    ) -> MultiModalKwargsItem:
        """Read the object a handle names, and count the read."""
        if not self.ring.is_writer:
            self.verify(key, address, chunk_id, signature)
        with self._checked_payload(key, address, chunk_id) as view:
            item = deserialize_item(view[READ_COUNT_BYTES:])
            if self._reader_lock is not None:
                with self._reader_lock:
                    count = _count(view) + 1
                    view[:READ_COUNT_BYTES] = count.to_bytes(
                        READ_COUNT_BYTES, "little", signed=True
                    )
        return item

    def check_handle(
        self, key: str, address: int, chunk_id: int, signature: list[int] | None
    ) -> None:
        """A reader's touch: the handle is genuine and its object still in place."""
        self.verify(key, address, chunk_id, signature)
        self._checked_payload(key, address, chunk_id).release()

    def close(self) -> None:
        self.ring.close()


__all__ = ["InvalidShmHandle", "ShmObjectStore"]
