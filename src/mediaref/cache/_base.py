"""The cache protocol shared by the frontend (P0) and engine-core (P1) multimodal caches."""

from __future__ import annotations

import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from mediaref.cache._errors import MultiModalCacheMissError
from mediaref.cache._items import MultiModalProcessorCacheInItem, MultiModalProcessorCacheOutItem
from mediaref.cache._lru import ByteBudgetLRU, GiB_bytes
from mediaref.cache.claims import ItemClaims
from mediaref.inputs import MultiModalKwargsItem

logger = logging.getLogger(__name__)

_I = TypeVar("_I")  # what a caller hands in for an item (``None``: "you have it")
_O = TypeVar("_O")  # what the cache hands back for each item
_K = TypeVar("_K")
_V = TypeVar("_V")


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
    """Reads and writes processed multimodal items by item hash.

    **The mirroring protocol.** The frontend (P0) and the engine core (P1) each hold a cache.
    P1's :class:`~mediaref.cache.LruKeyReplicatedReceiverCache` holds the tensors; P0's
    :class:`~mediaref.cache.LruKeyReplicatedSenderCache` holds only each item's size, yet knows
    exactly which items P1 holds without ever asking it: both start empty, have the same byte
    budget, measure an item the same way, and apply the same operations in the same order, so
    every eviction decision comes out the same. When P0 finds an item cached it sends ``None``
    instead of the tensors, and P1 fills the ``None`` from its own store::

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
    ``_mm_executor`` has exactly one worker.

    Subclasses implement :meth:`get_and_update_item` and :meth:`clear_cache`; the default
    :meth:`get_and_update` updates item by item. mediaref's LRU caches override it to take a
    request as one atomic batch (see ``mediaref.cache.lru``).
    """

    @abstractmethod
    def get_and_update_item(self, mm_item: _I, mm_hash: str) -> _O:
        """The output for one item: served from the cache, or stored (if it fits) and passed on.
        Updates the eviction order."""

    def get_and_update(self, mm_items: Sequence[_I], mm_hashes: Sequence[str]) -> list[_O]:
        """:meth:`get_and_update_item` for each position, in order; one output per position."""
        if len(mm_items) != len(mm_hashes):
            raise ValueError(f"{len(mm_items)} items but {len(mm_hashes)} hashes")
        return [
            self.get_and_update_item(mm_item, mm_hash)
            for mm_item, mm_hash in zip(mm_items, mm_hashes, strict=True)
        ]

    def cache_if_fits(self, cache: ByteBudgetLRU[_K, _V], key: _K, value: _V) -> bool:
        """Store ``value`` in ``cache`` unless it alone exceeds the budget; whether it was stored.

        An item larger than the whole cache could never be a hit: it is served uncached (with a
        warning naming the budget to raise) instead of failing the request.
        """
        if cache.put_if_fits(key, value):
            return True
        if getattr(self, "_warned_oversize", False):
            return False
        self._warned_oversize = True  # once per cache: every oversize item would repeat it
        logger.warning(
            "Skipping multi-modal processor cache insert for an item of %.3f GiB because it "
            "exceeds --mm-processor-cache-gb=%.3f; the item is processed uncached.",
            cache.getsizeof(value) / GiB_bytes,
            cache.maxsize / GiB_bytes,
        )
        return False

    @abstractmethod
    def clear_cache(self) -> None:
        """Drop every stored item. Clearing one side of a sender/receiver pair breaks the mirror:
        clear both."""


class BaseMultiModalProcessorCache(
    BaseMultiModalCache[MultiModalProcessorCacheInItem, MultiModalProcessorCacheOutItem]
):
    """The interface the processor talks to, on the frontend (P0).

    Items go in as ``(kwargs_item, prompt_updates)`` for an item the processor has just
    processed, or ``None`` for one :meth:`is_cached` reported; they come back as
    ``(kwargs_item_or_None, prompt_updates)``.
    """

    @abstractmethod
    def is_cached_item(self, mm_hash: str) -> bool:
        """Whether ``mm_hash`` is stored. Does not change the eviction order."""

    @functools.cached_property
    def item_claims(self) -> ItemClaims:
        """Who processes each item missing now (:mod:`mediaref.cache.claims`): in this process
        by default; a cache over a store shared with other processes claims across them."""
        return ItemClaims()

    def is_cached(self, mm_hashes: Sequence[str]) -> list[bool]:
        """For each hash, whether it is stored. Does not change the eviction order."""
        return [self.is_cached_item(mm_hash) for mm_hash in mm_hashes]

    def invalidate(self, mm_hash: str) -> None:
        """Forget ``mm_hash``, so its next request sends the data again (recovery from P0/P1
        drift, see :class:`~mediaref.cache.MultiModalCacheMissError`). A no-op unless the cache
        is a shadow of another one."""

    def close(self) -> None:
        """Release resources the cache holds outside Python memory (none by default)."""

    def validate_input_item(self, mm_item: MultiModalKwargsItem, mm_hash: str) -> None:
        """Check cache metadata a request supplied for ``mm_hash`` before it reaches the engine
        (nothing to check by default)."""

    @abstractmethod
    def touch_sender_cache_item(self, mm_hash: str) -> None:
        """Mark ``mm_hash`` recently used without changing it (the engine core must touch the
        same hash at the same point)."""

    def release_sender_touches(self) -> None:
        """Stop protecting items touched but not looked up afterwards (nothing by default)."""

    @abstractmethod
    def make_stats(self, *, delta: bool = False) -> CacheInfo:
        """Hits and queries so far; ``delta=True`` counts since the previous such call."""


class MultiModalFeatureLike(Protocol):
    """What :meth:`BaseMultiModalReceiverCache.get_and_update_features` reads and writes, as
    :class:`~mediaref.inputs.MultiModalFeatureSpec` has them: ``data`` (the item, ``None`` when
    the frontend sent nothing), ``identifier`` and ``mm_hash`` (the cache key; ``mm_hash``, when
    set, wins)."""

    data: MultiModalKwargsItem | None
    identifier: str
    mm_hash: str | None


_Feature = TypeVar("_Feature", bound=MultiModalFeatureLike)


def feature_cache_key(feature: Any) -> str:
    """The processor-cache key of a feature: its ``mm_hash`` (shared across LoRAs), else its
    ``identifier``."""
    return getattr(feature, "mm_hash", None) or str(feature.identifier)


class BaseMultiModalReceiverCache(
    BaseMultiModalCache[MultiModalKwargsItem | None, MultiModalKwargsItem]
):
    """The interface the engine core (P1) talks to: ``None`` items are filled from the store."""

    def get_and_update_features(self, mm_features: list[_Feature]) -> list[_Feature]:
        """Fill each feature's ``data`` from the cache, or store it; in place.

        Every key is touched first, so an item of this request cannot be evicted by another item
        of the same request. Raises :class:`~mediaref.cache.MultiModalCacheMissError` naming
        every missing hash of the request at once.
        """
        for feature in mm_features:
            self.touch_receiver_cache_item(feature_cache_key(feature), feature.data)
        missing: list[str] = []
        for feature in mm_features:
            try:
                feature.data = self.get_and_update_item(feature.data, feature_cache_key(feature))
            except MultiModalCacheMissError as error:
                missing.extend(error.mm_hashes)
        if missing:
            raise MultiModalCacheMissError(missing)
        return mm_features

    @abstractmethod
    def touch_receiver_cache_item(
        self, mm_hash: str, mm_item: MultiModalKwargsItem | None = None
    ) -> None:
        """Mark ``mm_hash`` recently used (the mirror of
        :meth:`BaseMultiModalProcessorCache.touch_sender_cache_item`); ``mm_item`` is there for
        caches that need the item to find it."""


__all__ = [
    "BaseMultiModalCache",
    "BaseMultiModalProcessorCache",
    "BaseMultiModalReceiverCache",
    "CacheInfo",
    "MultiModalFeatureLike",
    "feature_cache_key",
]
