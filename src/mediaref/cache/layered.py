"""A local processor cache with shared stores under it: other workers' and other servers' items.

Each process keeps its own local cache (:class:`~mediaref.cache.MultiModalProcessorOnlyCache`);
:class:`LayeredProcessorCache` puts one or more :class:`SharedStore` s under it, nearest first:
the shared-memory store of one server's workers (:mod:`mediaref.cache.worker_store`), then a
fleet's Redis (:mod:`mediaref.cache.redis_l2`). A local miss asks each store in turn before the
item is decoded and processed; an item found in a farther store is copied into the nearer ones;
an item processed here is written to every store::

    is_cached(hashes)   local hit -> True
                        local miss -> each store, nearest first -> verified, decoded, stored
                                      locally (and in the nearer stores) -> True
                        else False: the processor decodes and processes the item
    get_and_update()    local cache as before; each newly processed item put into every store

**What is stored** is data only, never code (:func:`encode_entry`): the item's prompt updates as
the processing layer writes them (a :class:`PromptUpdatesCodec`: token ids or text, as JSON) and
the item's fields in the shared-memory cache's layout (``_shm_serde``); an item whose prompt
updates hold anything else (a position target, a custom mask function) stays local. Each store
authenticates its entries itself (a MAC keyed by a secret it never stores) and returns only
entries that pass; an entry that passes yet does not decode is counted ``rejected`` and recomputed.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

from mediaref.cache._base import BaseMultiModalProcessorCache, CacheInfo
from mediaref.cache._items import MultiModalProcessorCacheInItem, MultiModalProcessorCacheOutItem
from mediaref.cache._processor_only import MultiModalProcessorOnlyCache
from mediaref.cache._shm_serde import deserialize_item, serialize_item
from mediaref.cache.claims import ItemClaims, SlotLocks
from mediaref.inputs import MultiModalKwargsItem

_LENGTH_BYTES = 4


class UnstorableItem(ValueError):
    """An item whose prompt updates are not plain data (it stays in the local cache)."""


Payload = bytes | memoryview
"""A store's entry as read: a view of the bytes it read where slicing them would copy megabytes
(a 1080p image's entry is ~12 MB), never a view of memory another process may still write."""


class PromptUpdatesCodec(Protocol):
    """How the prompt updates of an item become bytes and back. The cache never looks inside
    them; the processing layer knows their types (``mediaref.processing.stored_updates.PROMPT_UPDATES_JSON``)."""

    def dumps(self, prompt_updates: Sequence[Any]) -> bytes:
        """Data-only bytes; :class:`UnstorableItem` for updates that are not plain data."""
        ...

    def loads(self, data: bytes) -> Sequence[Any]: ...


class SharedStore(Protocol):
    """Authenticated payloads by item hash, shared with other processes.

    ``stats`` counts at least ``hits``, ``misses``, ``rejected`` (failed the check or would not
    decode), ``errors``, ``written``, ``not_written``, ``bytes_read``, ``bytes_written``;
    ``seconds`` sums the time spent in reads. A store never raises on its reads or writes: it
    answers None (and counts why) instead.
    """

    @property
    def stats(self) -> Counter[str]: ...

    @property
    def seconds(self) -> float: ...

    @property
    def circuit_open(self) -> bool: ...

    def get_many(self, mm_hashes: Sequence[str]) -> Sequence[Payload | None]:
        """The verified payload stored for each hash, None where there is none."""
        ...

    def put(self, mm_hash: str, payload: Payload) -> None: ...

    def close(self) -> None: ...


def encode_entry(
    item: MultiModalKwargsItem, prompt_updates: Sequence[Any], codec: PromptUpdatesCodec
) -> bytes:
    """``(item, prompt_updates)`` as a store's payload; UnstorableItem when the prompt updates
    are not plain data."""
    updates = codec.dumps(prompt_updates)
    header, buffers, _ = serialize_item(item)
    parts: list[bytes | memoryview] = [
        len(updates).to_bytes(_LENGTH_BYTES, "little"),
        updates,
        header,
        *buffers,
    ]
    return b"".join(parts)


def decode_entry(
    payload: Payload, codec: PromptUpdatesCodec
) -> tuple[MultiModalKwargsItem, Sequence[Any]]:
    """What :func:`encode_entry` wrote (the store already checked the payload's MAC)."""
    length = int.from_bytes(payload[:_LENGTH_BYTES], "little")
    end = _LENGTH_BYTES + length
    updates = codec.loads(bytes(payload[_LENGTH_BYTES:end]))
    return deserialize_item(memoryview(payload)[end:]), updates


class LayeredProcessorCache(BaseMultiModalProcessorCache):
    """A local :class:`MultiModalProcessorOnlyCache` with ``stores`` under it, nearest first (see
    the module docstring). Usable without the server: pass it as a processor's ``cache``."""

    def __init__(
        self,
        local: MultiModalProcessorOnlyCache,
        stores: Sequence[SharedStore],
        codec: PromptUpdatesCodec,
    ) -> None:
        self.local = local
        self.stores = list(stores)
        self.codec = codec

    @functools.cached_property
    def item_claims(self) -> ItemClaims:
        """Claims across the processes sharing the nearest store that locks slots (the workers'
        shared memory); a fleet's Redis takes no claims: a miss there is processed per server."""
        slots = next((store for store in self.stores if isinstance(store, SlotLocks)), None)
        return ItemClaims(slots)

    def is_cached_item(self, mm_hash: str) -> bool:
        return self.is_cached([mm_hash])[0]

    def is_cached(self, mm_hashes: Sequence[str]) -> list[bool]:
        cached = self.local.is_cached(mm_hashes)
        for depth, store in enumerate(self.stores):
            missing = [h for h, hit in zip(mm_hashes, cached, strict=True) if not hit]
            if not missing:
                break
            for mm_hash, payload in zip(missing, store.get_many(missing), strict=True):
                if payload is None or not self._adopt(store, mm_hash, payload):
                    continue
                for nearer in self.stores[:depth]:
                    nearer.put(mm_hash, payload)
            cached = self.local.is_cached(mm_hashes)
        return cached

    def _adopt(self, store: SharedStore, mm_hash: str, payload: Payload) -> bool:
        """A store's verified payload into the local cache; False when it does not decode."""
        try:
            item, updates = decode_entry(payload, self.codec)
        except Exception:  # authenticated, yet unreadable (another mediaref's layout)
            store.stats["rejected"] += 1
            return False
        self.local.get_and_update([(item, updates)], [mm_hash])
        return True

    def get_and_update_item(
        self, mm_item: MultiModalProcessorCacheInItem, mm_hash: str
    ) -> MultiModalProcessorCacheOutItem:
        return self.get_and_update([mm_item], [mm_hash])[0]

    def get_and_update(
        self, mm_items: Sequence[MultiModalProcessorCacheInItem], mm_hashes: Sequence[str]
    ) -> list[MultiModalProcessorCacheOutItem]:
        out = self.local.get_and_update(mm_items, mm_hashes)
        if not self.stores:
            return out
        for mm_item, mm_hash in zip(mm_items, mm_hashes, strict=True):
            if mm_item is None:
                continue  # a hit: already in the stores, or it came from one
            try:
                payload = encode_entry(*mm_item, self.codec)
            except (UnstorableItem, ValueError):
                for store in self.stores:
                    store.stats["not_written"] += 1
                continue
            for store in self.stores:
                store.put(mm_hash, payload)
        return out

    def touch_sender_cache_item(self, mm_hash: str) -> None:
        self.local.touch_sender_cache_item(mm_hash)

    def make_stats(self, *, delta: bool = False) -> CacheInfo:
        return self.local.make_stats(delta=delta)

    @property
    def capacity_bytes(self) -> int:
        return self.local.capacity_bytes

    def clear_cache(self) -> None:
        """Clears the local cache; the stores' entries are shared and age out on their own."""
        self.local.clear_cache()

    def close(self) -> None:
        for store in self.stores:
            store.close()
        self.local.close()


__all__ = [
    "LayeredProcessorCache",
    "Payload",
    "PromptUpdatesCodec",
    "SharedStore",
    "UnstorableItem",
    "decode_entry",
    "encode_entry",
]
