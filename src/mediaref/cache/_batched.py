"""The byte-budget LRU store behind mediaref's in-process caches, taking a request as one batch.

**One batch.** ``get_and_update`` first serves every item already cached (marking each most
recently used, in position order), then stores the others in position order. Serving hits first
means a hit is never evicted by a miss stored earlier in the same request, which a plain
position-by-position loop allows once a request's items fill the budget. A ``None`` for an item
neither cached nor supplied elsewhere in the batch is refused before anything changes, naming
every such hash, so a refused batch leaves the cache as it was: a caller whose earlier
``is_cached`` answer went stale re-asks and retries. This is why the processor hands over a whole
request (all modalities, flattened in a fixed order) in one call, where vLLM touches each hash and
then updates item by item.

**The lock** makes each batch atomic, so a caller on another thread never sees or causes a
half-applied batch; a lock cannot order requests, though (see ``BaseMultiModalCache``).
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from mediaref.cache._base import CacheInfo
from mediaref.cache._errors import MultiModalCacheMissError
from mediaref.cache._lru import ByteBudgetLRU, capacity_bytes_from_gb
from mediaref.cache._settings import capacity_gb_of

_I = TypeVar("_I")
_O = TypeVar("_O")


class BatchedLRUCache(Generic[_I, _O]):
    """A lock-guarded byte-budget LRU with the batch semantics above.

    ``model_config``: the budget's source — a model config (its ``mm_processor_cache_gb``, read
    through ``get_multimodal_config()`` when it has one), a number of GiB, or ``None`` for
    ``MEDIAREF_MM_PROCESSOR_CACHE_GB`` (default 4). ``0`` stores nothing.
    """

    #: A supplied item replaces a stored one under the same hash (the receiver: what P0 sent is
    #: what the model must see); otherwise the stored one is served (the frontend caches).
    supplied_replaces_stored = False

    def __init__(self, model_config: object = None) -> None:
        self._lock = threading.Lock()
        self._store: ByteBudgetLRU[str, Any] = ByteBudgetLRU(
            capacity_bytes_from_gb(capacity_gb_of(model_config)), self._stored_nbytes
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
        for index, mm_hash in enumerate(mm_hashes):  # hits first: see the module docstring
            replaces = self.supplied_replaces_stored and mm_items[index] is not None
            stored = None if replaces else store.get(mm_hash)
            if stored is None:
                to_store.append(index)
            else:
                outputs[index] = self._serve_hit(stored)
        hits = len(outputs)

        stored_now: set[str] = set()
        for index in to_store:
            mm_hash = mm_hashes[index]
            mm_item = mm_items[index]
            if mm_item is None or mm_hash in stored_now:
                stored = store.get(mm_hash)
                if stored is not None:  # stored moments ago for an earlier position
                    outputs[index] = self._serve_hit(stored)
                    hits += 1
                    continue
            if mm_item is not None and self.supplied_replaces_stored:
                store.pop(mm_hash)  # a too-large replacement must not leave the old one behind
            outputs[index] = self._store_miss(
                mm_hash, mm_item if mm_item is not None else supplied[mm_hash]
            )
            stored_now.add(mm_hash)

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


__all__ = ["BatchedLRUCache"]
