"""Processed items by hash in a shared-memory ring: written by the frontend, read by the workers.

Each object is one ring chunk::

    payload := [int32 read count][32-byte MAC][serialized item]

**The secret.** 32 random bytes that the writer holds in its own memory and the readers are given
by their creator (never through the segment: anyone who can map the segment could read it there).
The ring's writer tag holds a check value derived from it, so a reader given the wrong secret
fails at once instead of refusing every handle.

**Handles.** The writer hands out ``(address, chunk id, signature)``; the signature is an HMAC,
keyed by the secret, over the item's hash, the address and the id. A reader refuses a handle whose
signature does not check out before it reads a byte at that address, so a request cannot point a
worker at memory of its choosing, and a stale handle fails its id check once its place has been
reused.

**Integrity.** The MAC is blake3 in keyed mode (a key derived from the secret) over the item's
hash, address, chunk id, length and serialized bytes, computed by the writer from its own copy of
the bytes. A reader copies the object out of the segment first, then checks the MAC on its copy,
then decodes that copy: bytes changed in the segment (by a bug, or by a process that can write the
segment but does not hold the secret) are refused as a modified object, the error a stale handle
gets, and never served; nothing can change them between the check and the decode. A touch checks
the handle and the id only; the MAC is checked on the read that serves the object.

**Freeing.** Every time the writer hands a handle out, each of the ``n_readers`` workers will read
the object once and count its read (under a lock the workers share) as soon as it has its copy,
refused or not, so an object that fails its check does not pin the FIFO ring. An object may be
freed only when its reads have caught up with ``handed out x n_readers`` and the writer has not
just touched it; the ring frees oldest first (FIFO), only as far as that allows.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from multiprocessing.synchronize import Lock as LockType

from blake3 import blake3

from mediaref.cache._shm_ring import TAG_BYTES, ShmRingBuffer
from mediaref.cache._shm_secret import SECRET_BYTES
from mediaref.cache._shm_serde import deserialize_item, serialize_item, write_payload
from mediaref.inputs import MultiModalKwargsItem

READ_COUNT_BYTES = 4
MAC_BYTES = 32
ITEM_OFFSET = READ_COUNT_BYTES + MAC_BYTES
SIGNATURE_BYTES = hashlib.sha256().digest_size
# blake3's key derivation: the MAC key is unrelated to the HMAC key of the handles although both
# come from one secret.
_MAC_KEY_CONTEXT = "mediaref shared-memory cache v1: item MAC key"
# Prefixes of the two kinds of MAC input; neither is a prefix of the other.
_ITEM_DOMAIN = b"item\x00"
_CHECK_DOMAIN = b"check\x00"


def _count(view: memoryview) -> int:
    return int.from_bytes(view[:READ_COUNT_BYTES], "little", signed=True)


def _key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class InvalidShmHandle(ValueError):
    """A handle that this store did not issue for this hash, or whose object is gone."""

    def __init__(self) -> None:
        super().__init__("Invalid SHM handle signature for cache key.")


class ModifiedShmObject(ValueError):
    """The place a handle names holds another object, or bytes the writer did not write."""

    def __init__(self, address: int, chunk_id: int) -> None:
        super().__init__(
            f"Data for address:id '{address}:{chunk_id}' has been modified or is invalid."
        )


class ShmObjectStore:
    """Items by hash in a :class:`ShmRingBuffer`. The ring's writer is the store's writer; a
    reader needs ``reader_lock``, shared by all readers. ``secret`` (``SECRET_BYTES``) is the
    writer's, handed to each reader by its creator.

    A reader whose ``secret`` is not the writer's is a ``ValueError`` here."""

    def __init__(
        self,
        ring: ShmRingBuffer,
        *,
        secret: bytes,
        max_object_size: int,
        n_readers: int,
        reader_lock: LockType | None = None,
    ) -> None:
        if not ring.is_writer and reader_lock is None:
            raise ValueError("a shared-memory cache reader needs the workers' shared lock")
        if len(secret) != SECRET_BYTES:
            raise ValueError(f"the shared-memory cache secret is {SECRET_BYTES} bytes")
        self.ring = ring
        self.max_object_size = max_object_size
        self.n_readers = n_readers
        self._reader_lock = reader_lock
        self._secret = bytes(secret)
        self._mac_key = blake3(self._secret, derive_key_context=_MAC_KEY_CONTEXT).digest()
        check = self._key_check()
        if ring.is_writer:
            ring.write_tag(check)
        elif not hmac.compare_digest(ring.tag, check):
            raise ValueError(
                f"the secret given to this reader is not the one shared memory {ring.name!r} "
                "was written with (was the reader started by another writer's process?)"
            )
        # Writer bookkeeping.
        self.key_index: dict[str, tuple[int, int]] = {}
        self._key_of_id: dict[int, str] = {}
        self._handed_out: dict[int, int] = {}
        self._touched: set[int] = set()

    # -- signatures ------------------------------------------------------------------------

    def _sign(self, key: str, address: int, chunk_id: int) -> bytes:
        message = _key_digest(key) + address.to_bytes(8, "little") + chunk_id.to_bytes(4, "little")
        return hmac.new(self._secret, message, hashlib.sha256).digest()

    def _key_check(self) -> bytes:
        """A value only a holder of the secret can make, tied to the segment's name."""
        message = _CHECK_DOMAIN + self.ring.name.encode()
        return blake3(message, key=self._mac_key).digest(TAG_BYTES)

    def _mac(
        self,
        key: str,
        address: int,
        chunk_id: int,
        nbytes: int,
        parts: Iterable[memoryview | bytes | bytearray],
    ) -> bytes:
        """The MAC of an object: its key, place and length, then its serialized bytes."""
        hasher = blake3(
            _ITEM_DOMAIN
            + _key_digest(key)
            + address.to_bytes(8, "little")
            + chunk_id.to_bytes(4, "little")
            + nbytes.to_bytes(8, "little"),
            key=self._mac_key,
        )
        for part in parts:
            hasher.update(part)
        return hasher.digest(MAC_BYTES)

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
        size = ITEM_OFFSET + nbytes
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
        # From the writer's own bytes, not the segment's: what the MAC vouches for is what was
        # meant to be written, whatever happens to the segment meanwhile.
        mac = self._mac(key, address, chunk_id, nbytes, [header, *buffers])
        _, view = self.ring.payload(address)
        with view:
            view[:READ_COUNT_BYTES] = (0).to_bytes(READ_COUNT_BYTES, "little")
            view[READ_COUNT_BYTES:ITEM_OFFSET] = mac
            write_payload(view[ITEM_OFFSET:], header, buffers)
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

    def _checked_payload(self, address: int, chunk_id: int) -> memoryview:
        found, view = self.ring.payload(address)
        if found != chunk_id or view.nbytes < ITEM_OFFSET:
            view.release()
            raise ModifiedShmObject(address, chunk_id)
        return view

    def _count_read(self, view: memoryview) -> None:
        if self._reader_lock is not None:
            with self._reader_lock:
                count = _count(view) + 1
                view[:READ_COUNT_BYTES] = count.to_bytes(READ_COUNT_BYTES, "little", signed=True)

    def get(
        self, address: int, chunk_id: int, signature: list[int] | None, key: str
    ) -> MultiModalKwargsItem:
        """Read the object a handle names, and count the read.

        :class:`ModifiedShmObject` when the place holds another object or bytes that fail their
        MAC: the object is never decoded, let alone served."""
        if not self.ring.is_writer:
            self.verify(key, address, chunk_id, signature)
        with self._checked_payload(address, chunk_id) as view:
            try:
                # One copy, out of reach of whoever else maps the segment: the MAC is checked
                # on it and it is what gets decoded, so no byte can change in between.
                mac = bytes(view[READ_COUNT_BYTES:ITEM_OFFSET])
                data = bytearray(view[ITEM_OFFSET:])
            finally:
                self._count_read(view)
        expected = self._mac(key, address, chunk_id, len(data), [data])
        if not hmac.compare_digest(mac, expected):
            raise ModifiedShmObject(address, chunk_id)
        return deserialize_item(data)

    def check_handle(
        self, key: str, address: int, chunk_id: int, signature: list[int] | None
    ) -> None:
        """A reader's touch: the handle is genuine and its object still in place."""
        self.verify(key, address, chunk_id, signature)
        self._checked_payload(address, chunk_id).release()

    def close(self) -> None:
        self.ring.close()


__all__ = ["InvalidShmHandle", "ModifiedShmObject", "ShmObjectStore"]
