"""The cache protocol shared by the frontend and engine-core multimodal caches."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from mediaref.cache._errors import MultiModalCacheMissError
from mediaref.cache._items import MultiModalProcessorCacheOutItem
from mediaref.cache._lru import ByteBudgetLRU, capacity_bytes_from_gb
from mediaref.inputs import MultiModalKwargsItem

_I = TypeVar("_I")  # what a caller hands in for an item it processed (``None``: "you have it")
_O = TypeVar("_O")  # what the cache hands back for each item


@dataclass(frozen=True)
class CacheInfo:
    """Query counters (``total`` items asked for, ``hits`` among them) and the bytes now stored."""

    hits: int = 0
    total: int = 0
    size_bytes: int = 0

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.total if self.total else 0.0

    def __sub__(self, other: CacheInfo) -> CacheInfo:
        # size_bytes is a level, not a counter: a delta reports the current level.
        return CacheInfo(self.hits - other.hits, self.total - other.total, self.size_bytes)


class BaseMultiModalCache(ABC, Generic[_I, _O]):
    """A byte-budget LRU of processed multimodal items, keyed by item hash.

    **The mirroring protocol.** The frontend (P0) and the engine core (P1) each hold a cache.
    P1's :class:`~mediaref.cache.MultiModalReceiverCache` holds the tensors; P0's
    :class:`~mediaref.cache.MultiModalProcessorSenderCache` holds only each item's size, yet
    knows exactly which items P1 holds without ever asking it: both start empty, have the same
    byte budget, measure an item the same way, and apply the same operations in the same order,
    so every eviction decision comes out the same. When P0 finds an item cached it sends
    ``None`` instead of the tensors, and P1 fills the ``None`` from its own store::

                  is_cached() x N      get_and_update()
        P0: request --------------> -------------------> to P1
                                       get_and_update()
        P1: from P0 ------------------------------------> to the model

    ``is_cached`` may be asked any number of times and never changes the eviction order.
    ``get_and_update`` (and the ``touch_*`` methods) do, so they must reach P0 and P1 in one and
    the same sequence: one ``get_and_update`` call per request on each side, with the same items
    in the same positional order, and requests in the order P0 sends them to P1. Swap two
    requests on one side and the least recently used entries differ, P0 evicts one item while
    P1 evicts another, P0 eventually sends ``None`` for an item P1 no longer holds, and P1
    raises :class:`~mediaref.cache.MultiModalCacheMissError`.

    **One thread runs the cached apply.** The order of ``get_and_update`` calls is the order in
    which processed requests leave the processor, and P0 must also send them to P1 in that order.
    Only a single thread running the cached apply (``is_cached``, processing the misses,
    ``get_and_update``, then handing the request on) guarantees it; that is why the renderer's
    ``_mm_executor`` has exactly one worker. The lock in this class makes each ``get_and_update``
    atomic, so a caller on another thread never sees or causes a half-applied batch, but a lock
    cannot order requests: two threads would take it in either order.

    **One batch.** ``get_and_update`` first serves every item already cached (marking each most
    recently used, in position order), then stores the others in position order. Serving hits
    first means a hit is never evicted by a miss stored earlier in the same request, which a
    plain position-by-position loop allows once a request's items fill the budget. A ``None``
    for an item neither cached nor supplied elsewhere in the batch is refused before anything
    changes, naming every such hash, so a refused batch leaves the cache as it was: a caller
    whose earlier ``is_cached`` answer went stale re-asks and retries. This is why the processor
    hands over a whole request (all modalities, flattened in a fixed order) in one call, where
    vLLM touches each hash and then updates item by item.
    """

    def __init__(self, mm_processor_cache_gb: float | None = None) -> None:
        """``mm_processor_cache_gb``: the byte budget in GiB; ``None`` reads
        ``MEDIAREF_MM_PROCESSOR_CACHE_GB`` (default 4); ``0`` stores nothing."""
        self._lock = threading.Lock()
        self._store: ByteBudgetLRU[str, Any] = ByteBudgetLRU(
            capacity_bytes_from_gb(mm_processor_cache_gb), self._stored_nbytes
        )
        self._hits = 0
        self._total = 0
        self._last_info = CacheInfo()

    # -- what each cache stores and returns ------------------------------------------------

    @abstractmethod
    def _stored_nbytes(self, stored: Any) -> int:
        """The size one stored value counts against the budget."""

    @abstractmethod
    def _serve_hit(self, stored: Any) -> _O:
        """The output for an item found in the store."""

    @abstractmethod
    def _store_miss(self, mm_hash: str, mm_item: _I) -> _O:
        """Store a processed item (if it fits) and return the output for it."""

    # -- the protocol ----------------------------------------------------------------------

    @property
    def capacity_bytes(self) -> int:
        return self._store.capacity_bytes

    def is_cached_item(self, mm_hash: str) -> bool:
        """Whether ``mm_hash`` is stored. Does not change the eviction order."""
        with self._lock:
            return mm_hash in self._store

    def is_cached(self, mm_hashes: Sequence[str]) -> list[bool]:
        """For each hash, whether it is stored. Does not change the eviction order."""
        with self._lock:
            return [mm_hash in self._store for mm_hash in mm_hashes]

    def get_and_update(self, mm_items: Sequence[_I | None], mm_hashes: Sequence[str]) -> list[_O]:
        """Serve the cached items and store the processed ones, for one request, atomically.

        ``mm_items[i]`` is ``None`` when the caller expects ``mm_hashes[i]`` to be cached.
        Returns one output per position, in order. Raises
        :class:`~mediaref.cache.MultiModalCacheMissError`, changing nothing, when a ``None``
        item is neither cached nor supplied at another position with the same hash.
        """
        if len(mm_items) != len(mm_hashes):
            raise ValueError(f"{len(mm_items)} items but {len(mm_hashes)} hashes")
        with self._lock:
            return self._get_and_update_locked(mm_items, mm_hashes)

    def get_and_update_item(self, mm_item: _I | None, mm_hash: str) -> _O:
        """:meth:`get_and_update` for a one-item request.

        Mirroring needs both sides to batch alike: call this on both sides or on neither.
        """
        return self.get_and_update([mm_item], [mm_hash])[0]

    def _get_and_update_locked(
        self, mm_items: Sequence[_I | None], mm_hashes: Sequence[str]
    ) -> list[_O]:
        store = self._store
        supplied: dict[str, _I] = {}
        for mm_item, mm_hash in zip(mm_items, mm_hashes, strict=True):  # checked by the caller
            if mm_item is not None:
                supplied.setdefault(mm_hash, mm_item)
        missing = [
            mm_hash
            for mm_item, mm_hash in zip(mm_items, mm_hashes, strict=True)
            if mm_item is None and mm_hash not in store and mm_hash not in supplied
        ]
        if missing:
            raise MultiModalCacheMissError(missing)

        outputs: dict[int, _O] = {}
        to_store: list[int] = []
        for index, mm_hash in enumerate(mm_hashes):  # hits first: see the class docstring
            stored = store.get(mm_hash)
            if stored is None:
                to_store.append(index)
            else:
                outputs[index] = self._serve_hit(stored)
        hits = len(outputs)

        for index in to_store:
            mm_hash = mm_hashes[index]
            stored = store.get(mm_hash)
            if stored is not None:  # stored moments ago for an earlier position with this hash
                outputs[index] = self._serve_hit(stored)
                hits += 1
                continue
            mm_item = mm_items[index]
            outputs[index] = self._store_miss(
                mm_hash, mm_item if mm_item is not None else supplied[mm_hash]
            )

        self._hits += hits
        self._total += len(mm_hashes)
        return [outputs[index] for index in range(len(mm_hashes))]

    def _touch(self, mm_hash: str) -> None:
        with self._lock:
            self._store.touch(mm_hash)

    def cached_hashes(self) -> set[str]:
        """The hashes stored now (for diagnostics and tests)."""
        with self._lock:
            return self._store.keys()

    def clear_cache(self) -> None:
        """Drop every stored item (the query counters keep counting).

        Clearing one side of a sender/receiver pair breaks the mirror: clear both.
        """
        with self._lock:
            self._store.clear()

    def make_stats(self, *, delta: bool = False) -> CacheInfo:
        """Hits and queries so far, and the bytes stored now.

        ``delta=True`` counts since the previous ``delta=True`` call instead.
        """
        with self._lock:
            info = CacheInfo(self._hits, self._total, self._store.size_bytes)
            if not delta:
                return info
            since_last, self._last_info = info - self._last_info, info
            return since_last


class BaseMultiModalProcessorCache(
    BaseMultiModalCache[tuple[MultiModalKwargsItem, Sequence[Any]], MultiModalProcessorCacheOutItem]
):
    """The interface the processor talks to, on the frontend (P0).

    Items go in as ``(kwargs_item, prompt_updates)`` for an item the processor has just
    processed, or ``None`` for one :meth:`is_cached` reported; they come back as
    ``(kwargs_item_or_None, prompt_updates)``.
    """

    def touch_sender_cache_item(self, mm_hash: str) -> None:
        """Mark ``mm_hash`` most recently used, if stored, without changing it.

        Under a sender/receiver pair the engine core must touch the same hash at the same point.
        """
        self._touch(mm_hash)

    def close(self) -> None:
        """Release resources the cache holds outside Python memory (none here)."""


class MultiModalFeatureLike(Protocol):
    """What :meth:`BaseMultiModalReceiverCache.get_and_update_features` reads and writes, like
    vLLM's ``MultiModalFeatureSpec``: ``data`` (the item, ``None`` when the frontend sent
    nothing) and ``identifier`` (the cache key; an ``mm_hash`` attribute, when set, wins)."""

    data: MultiModalKwargsItem | None
    identifier: str


_Feature = TypeVar("_Feature", bound=MultiModalFeatureLike)


class BaseMultiModalReceiverCache(BaseMultiModalCache[MultiModalKwargsItem, MultiModalKwargsItem]):
    """The interface the engine core (P1) talks to: ``None`` items are filled from the store."""

    def get_and_update_features(self, mm_features: list[_Feature]) -> list[_Feature]:
        """Fill each feature's ``data`` from the store, or store it, as one batch; in place."""
        mm_hashes = [
            getattr(feature, "mm_hash", None) or feature.identifier for feature in mm_features
        ]
        items = self.get_and_update([feature.data for feature in mm_features], mm_hashes)
        for feature, item in zip(mm_features, items, strict=True):  # one output per feature
            feature.data = item
        return mm_features

    def touch_receiver_cache_item(
        self, mm_hash: str, mm_item: MultiModalKwargsItem | None = None
    ) -> None:
        """Mark ``mm_hash`` most recently used, if stored (the mirror of
        :meth:`BaseMultiModalProcessorCache.touch_sender_cache_item`); ``mm_item`` is unused."""
        self._touch(mm_hash)
