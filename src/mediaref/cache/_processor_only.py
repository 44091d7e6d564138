"""The frontend cache when the engine core keeps no cache of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mediaref.cache._base import BaseMultiModalProcessorCache
from mediaref.cache._items import MultiModalProcessorCacheItem, MultiModalProcessorCacheOutItem
from mediaref.inputs import MultiModalKwargsItem


class MultiModalProcessorOnlyCache(BaseMultiModalProcessorCache):
    """Keeps whole processed items on the frontend (no engine-core mirror).

    A hit returns the stored ``(item, prompt_updates)``, which the frontend then sends to the
    engine core in full; a processed item is stored (unless larger than the whole budget, then
    it is only passed through) and returned as given.
    """

    def _stored_nbytes(self, stored: MultiModalProcessorCacheItem) -> int:
        return stored.nbytes

    def _serve_hit(self, stored: MultiModalProcessorCacheItem) -> MultiModalProcessorCacheOutItem:
        return stored.item, stored.prompt_updates

    def _store_miss(
        self, mm_hash: str, mm_item: tuple[MultiModalKwargsItem, Sequence[Any]]
    ) -> MultiModalProcessorCacheOutItem:
        item, prompt_updates = mm_item
        self._store.put(mm_hash, MultiModalProcessorCacheItem(item, prompt_updates))
        return item, prompt_updates
