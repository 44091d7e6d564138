"""The key-replicated LRU pair: a frontend cache of sizes that predicts an engine-core cache.

vLLM's ``vllm.multimodal.cache.lru``. Both follow the protocol on
:class:`~mediaref.cache.base.BaseMultiModalCache`. Their stored values measure the same
(:class:`~mediaref.cache.base.MultiModalProcessorCacheItemMetadata` applies the receiver's measure
to the full item), so the same sequence of batches evicts the same hashes on both sides. Each
takes a request as one atomic batch (hits first, then misses; see ``get_and_update``).

``model_config`` sizes the budget: a model config (its ``mm_processor_cache_gb``, through
``get_multimodal_config()`` when it has one), a number of GiB, or ``None`` for
``MEDIAREF_MM_PROCESSOR_CACHE_GB`` (default 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mediaref.cache._base import (
    BaseMultiModalProcessorCache,
    BaseMultiModalReceiverCache,
    _Feature,
    feature_cache_key,
)
from mediaref.cache._batched import BatchedLRUCache
from mediaref.cache._items import (
    MultiModalProcessorCacheItemMetadata,
    MultiModalProcessorCacheOutItem,
)
from mediaref.cache.base import (
    MultiModalCache,
    MultiModalCacheMissError,
    MultiModalProcessorCacheInItem,
)
from mediaref.inputs import MultiModalKwargsItem, estimate_nbytes


class LruKeyReplicatedSenderCache(
    BatchedLRUCache[tuple[MultiModalKwargsItem, Sequence[Any]], MultiModalProcessorCacheOutItem],
    BaseMultiModalProcessorCache,
):
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
        self.cache_if_fits(
            self._store, mm_hash, MultiModalProcessorCacheItemMetadata(item, prompt_updates)
        )
        return item, prompt_updates

    def touch_sender_cache_item(self, mm_hash: str) -> None:
        """Mark ``mm_hash`` most recently used, if stored; the engine core must touch it too."""
        self._touch(mm_hash)

    def invalidate(self, mm_hash: str) -> None:
        """Forget ``mm_hash``: the engine core reported it missing, so the next request for it
        must carry the data (and the engine core stores it again)."""
        with self._lock:
            self._store.pop(mm_hash)


class LruKeyReplicatedReceiverCache(
    BatchedLRUCache[MultiModalKwargsItem, MultiModalKwargsItem], BaseMultiModalReceiverCache
):
    """The engine-core (P1) half: stores the items the frontend sends and fills in the ``None``s.

    An item the frontend sent replaces whatever is stored under its hash (after independent
    eviction the frontend may resend an item under a known identity, and the model must see what
    was sent). Driven by the sender's output in the sender's order, it never misses; a miss
    (:class:`~mediaref.cache.MultiModalCacheMissError`) means the two have drifted apart.
    """

    supplied_replaces_stored = True

    def _stored_nbytes(self, stored: MultiModalKwargsItem) -> int:
        return estimate_nbytes(stored)

    def _serve_hit(self, stored: MultiModalKwargsItem) -> MultiModalKwargsItem:
        return stored

    def _store_miss(self, mm_hash: str, mm_item: MultiModalKwargsItem) -> MultiModalKwargsItem:
        self.cache_if_fits(self._store, mm_hash, mm_item)
        return mm_item

    def touch_receiver_cache_item(
        self, mm_hash: str, mm_item: MultiModalKwargsItem | None = None
    ) -> None:
        """Mark ``mm_hash`` most recently used, if stored; ``mm_item`` is unused."""
        self._touch(mm_hash)

    def get_and_update_features(self, mm_features: list[_Feature]) -> list[_Feature]:
        """Fill each feature's ``data`` from the store, or store it, as one batch; in place.

        Raises :class:`~mediaref.cache.MultiModalCacheMissError` naming every missing hash,
        changing nothing.
        """
        keys = [feature_cache_key(feature) for feature in mm_features]
        items = self.get_and_update([feature.data for feature in mm_features], keys)
        for feature, item in zip(mm_features, items, strict=True):  # one output per feature
            feature.data = item
        return mm_features


MultiModalProcessorSenderCache = LruKeyReplicatedSenderCache
"""The name vLLM used before 0.33 (kept for callers of mediaref's earlier releases)."""

MultiModalReceiverCache = LruKeyReplicatedReceiverCache
"""The name vLLM used before 0.33 (kept for callers of mediaref's earlier releases)."""


__all__ = [
    "LruKeyReplicatedReceiverCache",
    "LruKeyReplicatedSenderCache",
    "MultiModalCache",
    "MultiModalCacheMissError",
    "MultiModalProcessorCacheInItem",
    "MultiModalProcessorSenderCache",
    "MultiModalReceiverCache",
]
