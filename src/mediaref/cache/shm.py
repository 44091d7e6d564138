"""The shared-memory object-store caches (vLLM's ``vllm.multimodal.cache.shm``).

Used with ``mm_processor_cache_type="shm"``: the frontend (P0) writes each processed item once
into a shared-memory ring and sends the workers a small signed handle instead of the tensors; each
worker reads the item straight from shared memory. A hit costs no processing and no tensor
transfer at all. The ring is FIFO: an item is freed, oldest first, once every worker has read
every handle given out for it (see ``_shm_store``).

The segment is named by ``VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME``; when it is unset, the sender
names one and exports the name, so workers it starts afterwards find the segment. A name the
sender makes carries its pid and start time, and a sender that starts removes the segments of
senders that died without removing theirs (a SIGKILLed process group); see ``_shm_reclaim``.

**The secret.** Handles are signed, and every stored item carries a MAC, under a 32-byte secret
that the sender draws and keeps in its own memory, never in the segment. A worker is given it as
``secret=`` or, as vLLM builds its workers, finds it in the environment the sender left for the
processes it starts (``_shm_secret`` says why that channel).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from multiprocessing.synchronize import Lock as LockType
from typing import Any, TypeAlias, cast

from mediaref import envs
from mediaref.cache._base import (
    BaseMultiModalProcessorCache,
    BaseMultiModalReceiverCache,
    CacheInfo,
    _Feature,
)
from mediaref.cache._errors import MultiModalCacheMissError
from mediaref.cache._items import MultiModalProcessorCacheInItem, MultiModalProcessorCacheOutItem
from mediaref.cache._lru import capacity_bytes_from_gb
from mediaref.cache._settings import (
    capacity_gb_of,
    model_config_of,
    shm_max_object_bytes_of,
    world_size_of,
)
from mediaref.cache._shm_reclaim import segment_name
from mediaref.cache._shm_ring import ShmRingBuffer
from mediaref.cache._shm_secret import export_secret, inherited_secret, new_secret
from mediaref.cache._shm_store import ShmObjectStore
from mediaref.inputs import (
    MultiModalBatchedField,
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    MultiModalKwargsItem,
)

logger = logging.getLogger(__name__)

ShmHandle: TypeAlias = tuple[int, int, list[int]]
"""``(address, chunk id, signature)``: where a worker finds an item, and the proof that the
frontend issued it for that item's hash."""

_HANDLE_KEYS = ("address", "monotonic_id", "signature")


def _plain_int(value: object, limit: int) -> bool:
    return type(value) is int and 0 <= value < limit  # not a bool, not a numpy integer


def buffer_name() -> str:
    """The segment's name: ``VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME``, set here if unset."""
    name = envs.VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME
    if name is None:
        name = segment_name()
        # Exported so the worker processes started after this one open the same segment.
        os.environ["VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME"] = name
    return str(name)


def _ring_capacity(vllm_config: Any) -> int:
    return capacity_bytes_from_gb(capacity_gb_of(model_config_of(vllm_config)))


def shm_handle_of(mm_item: MultiModalKwargsItem) -> ShmHandle | None:
    """The handle an address item carries; ``None`` for an item that carries its data.

    Raises ``ValueError`` for an address item whose handle is incomplete or malformed.
    """
    if "address" not in mm_item:
        return None
    if "monotonic_id" not in mm_item or "signature" not in mm_item:
        raise ValueError("Missing SHM handle signature for cache key.")
    address: Any = mm_item["address"].data
    chunk_id: Any = mm_item["monotonic_id"].data
    signature: Any = mm_item["signature"].data
    if (
        not _plain_int(address, 1 << 64)
        or not _plain_int(chunk_id, 1 << 32)
        or not isinstance(signature, list)
    ):
        raise ValueError("Invalid SHM handle signature for cache key.")
    return address, chunk_id, signature


class ShmObjectStoreSenderCache(BaseMultiModalProcessorCache):
    """The frontend (P0) half: writes items to shared memory and hands out their handles.

    A hit returns an address item (``address``, ``monotonic_id``, ``signature``) with the stored
    prompt updates; a processed item is written and its address item returned. An item that
    cannot be stored (larger than ``mm_shm_cache_max_object_size_mb``, or the ring full of items
    the workers have not read yet) is returned as given, to be sent whole.
    """

    def __init__(self, vllm_config: Any) -> None:
        model_config = model_config_of(vllm_config)
        self.world_size = world_size_of(vllm_config)
        secret = new_secret()
        ring = ShmRingBuffer(_ring_capacity(vllm_config), buffer_name(), create=True)
        self._shm_cache = ShmObjectStore(
            ring,
            secret=secret,
            max_object_size=shm_max_object_bytes_of(model_config),
            n_readers=self.world_size,
        )
        export_secret(secret)
        self._p0_cache: dict[str, Sequence[Any]] = {}  # prompt updates stay on the frontend
        self._lock = threading.Lock()
        self._hits = 0
        self._total = 0
        self._last_info = CacheInfo()

    def is_cached_item(self, mm_hash: str) -> bool:
        with self._lock:
            return self._shm_cache.is_cached(mm_hash)

    def get_and_update(
        self, mm_items: Sequence[MultiModalProcessorCacheInItem], mm_hashes: Sequence[str]
    ) -> list[MultiModalProcessorCacheOutItem]:
        """One request: the items it expects cached (``None``) are protected first, so storing
        its misses cannot free them before they are handed out."""
        if len(mm_items) != len(mm_hashes):
            raise ValueError(f"{len(mm_items)} items but {len(mm_hashes)} hashes")
        with self._lock:
            for mm_item, mm_hash in zip(mm_items, mm_hashes, strict=True):
                if mm_item is None:
                    self._shm_cache.touch(mm_hash)
        return [
            self.get_and_update_item(mm_item, mm_hash)
            for mm_item, mm_hash in zip(mm_items, mm_hashes, strict=True)
        ]

    def get_and_update_item(
        self, mm_item: MultiModalProcessorCacheInItem, mm_hash: str
    ) -> MultiModalProcessorCacheOutItem:
        with self._lock:
            store = self._shm_cache
            self._total += 1
            if store.is_cached(mm_hash):
                self._hits += 1
                address, chunk_id = store.get_cached(mm_hash)
                handle = self.address_as_item(address, chunk_id, store.signature(mm_hash))
                return handle, self._p0_cache[mm_hash]
            if mm_item is None:
                self._total -= 1  # refused: not a query that was answered
                raise MultiModalCacheMissError([mm_hash])
            item, prompt_updates = mm_item
            try:
                address, chunk_id = store.put(mm_hash, item)
            except ValueError as error:
                logger.warning("mm item %s not cached in shared memory: %s", mm_hash, error)
                return mm_item
            except MemoryError as error:
                logger.debug("mm item %s not cached: shared memory full (%s)", mm_hash, error)
                return mm_item
            if len(self._p0_cache) >= 2 * len(store.key_index):
                self._remove_dangling_locked()
            self._p0_cache[mm_hash] = prompt_updates
            handle = self.address_as_item(address, chunk_id, store.signature(mm_hash))
            return handle, prompt_updates

    def touch_sender_cache_item(self, mm_hash: str) -> None:
        """Protect the item from being freed until it is looked up (or touches are released)."""
        with self._lock:
            self._shm_cache.touch(mm_hash)

    def release_sender_touches(self) -> None:
        with self._lock:
            self._shm_cache.release_touches()

    def validate_input_item(self, mm_item: MultiModalKwargsItem, mm_hash: str) -> None:
        """Refuse (``ValueError``) an address item not issued by this cache for ``mm_hash``."""
        handle = shm_handle_of(mm_item)
        if handle is not None:
            with self._lock:
                self._shm_cache.verify(mm_hash, *handle)

    def clear_cache(self) -> None:
        with self._lock:
            self._shm_cache.clear()
            self._p0_cache.clear()
            self._hits = self._total = 0
            self._last_info = CacheInfo()

    def make_stats(self, *, delta: bool = False) -> CacheInfo:
        with self._lock:
            info = CacheInfo(self._hits, self._total)
            if not delta:
                return info
            since_last, self._last_info = info - self._last_info, info
            return since_last

    def close(self) -> None:
        """Unmap and remove the shared-memory segment."""
        self._shm_cache.close()

    def remove_dangling_items(self) -> None:
        """Drop the prompt updates of items the ring has freed."""
        with self._lock:
            self._remove_dangling_locked()

    def _remove_dangling_locked(self) -> None:
        for mm_hash in set(self._p0_cache) - set(self._shm_cache.key_index):
            del self._p0_cache[mm_hash]

    def address_as_item(
        self, address: int, monotonic_id: int, signature: list[int]
    ) -> MultiModalKwargsItem:
        """The item sent in place of the data: the handle's three parts as batched fields."""
        return MultiModalKwargsItem(
            {
                # The handle's ints and byte list are not tensors; vLLM sends them the same way.
                key: MultiModalFieldElem(cast(Any, value), MultiModalBatchedField())
                for key, value in zip(_HANDLE_KEYS, (address, monotonic_id, signature), strict=True)
            }
        )


class ShmObjectStoreReceiverCache(BaseMultiModalReceiverCache):
    """A worker's (P1) half: replaces each address item with the item read from shared memory.

    ``shared_worker_lock`` is one ``multiprocessing.Lock`` shared by every worker reading this
    segment. ``secret`` is the sender's; by default the one it exported for the processes it
    started (``MEDIAREF_SHM_CACHE_SECRET``). An item that carries its data is passed through; an
    address item whose object fails its MAC is refused (``ValueError``, as a stale handle is),
    never served.
    """

    def __init__(
        self, vllm_config: Any, shared_worker_lock: LockType, *, secret: bytes | None = None
    ) -> None:
        model_config = model_config_of(vllm_config)
        self.world_size = world_size_of(vllm_config)
        if secret is None:
            secret = inherited_secret()
        ring = ShmRingBuffer(_ring_capacity(vllm_config), buffer_name(), create=False)
        try:
            self._shm_cache = ShmObjectStore(
                ring,
                secret=secret,
                max_object_size=shm_max_object_bytes_of(model_config),
                n_readers=self.world_size,
                reader_lock=shared_worker_lock,
            )
        except BaseException:
            ring.close()
            raise

    def get_and_update_features(self, mm_features: list[_Feature]) -> list[_Feature]:
        """Resolve the features that carry an item; a feature without data (its payload was
        dropped before reaching the worker) has no handle to resolve and is left alone."""
        super().get_and_update_features([f for f in mm_features if f.data is not None])
        return mm_features

    def get_and_update_item(
        self, mm_item: MultiModalKwargsItem | None, mm_hash: str
    ) -> MultiModalKwargsItem:
        if mm_item is None:
            raise MultiModalCacheMissError([mm_hash])
        handle = shm_handle_of(mm_item)
        if handle is None:
            return mm_item
        address, chunk_id, signature = handle
        return self._shm_cache.get(address, chunk_id, signature, mm_hash)

    def touch_receiver_cache_item(
        self, mm_hash: str, mm_item: MultiModalKwargsItem | None = None
    ) -> None:
        """Check the item's handle: genuine, and its object still in place (``ValueError``)."""
        if mm_item is None:
            return
        handle = shm_handle_of(mm_item)
        if handle is not None:
            address, chunk_id, signature = handle
            self._shm_cache.check_handle(mm_hash, address, chunk_id, signature)

    def clear_cache(self) -> None:
        """Only the writer clears the ring; a reader has nothing of its own to drop."""

    def close(self) -> None:
        self._shm_cache.close()


__all__ = [
    "MultiModalFeatureSpec",
    "ShmHandle",
    "ShmObjectStoreReceiverCache",
    "ShmObjectStoreSenderCache",
    "buffer_name",
    "shm_handle_of",
]
