"""The mirrored pair: a frontend cache of sizes that predicts an engine-core cache of tensors.

Both follow the protocol on :class:`~mediaref.cache.BaseMultiModalCache`. Their stored values
measure the same (:meth:`MultiModalProcessorCacheItemMetadata.wraps` applies the receiver's
measure to the full item), so the same sequence of batches evicts the same hashes on both sides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mediaref.cache._base import BaseMultiModalProcessorCache, BaseMultiModalReceiverCache
from mediaref.cache._items import (
    MultiModalProcessorCacheItemMetadata,
    MultiModalProcessorCacheOutItem,
)
from mediaref.inputs import MultiModalKwargsItem, estimate_nbytes


class MultiModalProcessorSenderCache(BaseMultiModalProcessorCache):
    """The frontend (P0) half: stores each item's size and prompt updates, never its tensors.

    A hit returns ``(None, prompt_updates)``: the engine core holds the item, so nothing is sent.
    A processed item is recorded (if it fits the budget, exactly as the receiver will decide) and
    returned as given, to be sent.
    """

    def _stored_nbytes(self, stored: MultiModalProcessorCacheItemMetadata) -> int:
        # Only the engine core's bytes count; the prompt updates kept here are not mirrored
        # there, and counting them would make the two sides evict differently.
        return stored.item_size

    def _serve_hit(
        self, stored: MultiModalProcessorCacheItemMetadata
    ) -> MultiModalProcessorCacheOutItem:
        return None, stored.prompt_updates

    def _store_miss(
        self, mm_hash: str, mm_item: tuple[MultiModalKwargsItem, Sequence[Any]]
    ) -> MultiModalProcessorCacheOutItem:
        item, prompt_updates = mm_item
        self._store.put(mm_hash, MultiModalProcessorCacheItemMetadata.wraps(item, prompt_updates))
        return item, prompt_updates


class MultiModalReceiverCache(BaseMultiModalReceiverCache):
    """The engine-core (P1) half: stores the items the frontend sends and fills in the ``None``s.

    Driven by the sender's output in the sender's order, it never misses; a miss
    (:class:`~mediaref.cache.MultiModalCacheMissError`) means the two have drifted apart.
    """

    def _stored_nbytes(self, stored: MultiModalKwargsItem) -> int:
        return estimate_nbytes(stored)

    def _serve_hit(self, stored: MultiModalKwargsItem) -> MultiModalKwargsItem:
        return stored

    def _store_miss(self, mm_hash: str, mm_item: MultiModalKwargsItem) -> MultiModalKwargsItem:
        self._store.put(mm_hash, mm_item)
        return mm_item
