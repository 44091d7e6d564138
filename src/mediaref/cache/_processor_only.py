"""The frontend cache when the engine core keeps no cache of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mediaref.cache._base import BaseMultiModalProcessorCache
from mediaref.cache._batched import BatchedLRUCache
from mediaref.cache._items import MultiModalProcessorCacheItem, MultiModalProcessorCacheOutItem
from mediaref.inputs import MultiModalKwargsItem


class MultiModalProcessorOnlyCache(
    BatchedLRUCache[tuple[MultiModalKwargsItem, Sequence[Any]], MultiModalProcessorCacheOutItem],
    BaseMultiModalProcessorCache,
):
    """Keeps whole processed items on the frontend (no engine-core mirror).

    A hit returns the stored ``(item, prompt_updates)``, which the frontend then sends to the
    engine core in full; a processed item is stored (unless larger than the whole budget, then
    it is only passed through) and returned as given. ``model_config`` sizes the budget (see
    :class:`~mediaref.cache.lru.LruKeyReplicatedSenderCache`).
    """

    def _stored_nbytes(self, stored: MultiModalProcessorCacheItem) -> int:
        return stored.nbytes

    def _serve_hit(self, stored: MultiModalProcessorCacheItem) -> MultiModalProcessorCacheOutItem:
        return stored.item, stored.prompt_updates

    def _store_miss(
        self, mm_hash: str, mm_item: tuple[MultiModalKwargsItem, Sequence[Any]]
    ) -> MultiModalProcessorCacheOutItem:
        item, prompt_updates = mm_item
        self.cache_if_fits(self._store, mm_hash, MultiModalProcessorCacheItem(item, prompt_updates))
        return item, prompt_updates

    def touch_sender_cache_item(self, mm_hash: str) -> None:
        """Mark ``mm_hash`` most recently used, if stored, without changing it."""
        self._touch(mm_hash)


__all__ = ["MultiModalProcessorOnlyCache"]
