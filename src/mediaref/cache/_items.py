"""What the frontend caches store for one multimodal item, and what they exchange with callers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mediaref.inputs import MultiModalKwargsItem, estimate_nbytes

PROMPT_UPDATE_NBYTES = 256
"""A flat estimate per prompt update. Updates are opaque here (a few token ids, a callable); they
are not free, and counting them keeps a cache of tiny items from growing without bound."""


@dataclass(frozen=True)
class MultiModalProcessorCacheItem:
    """One processed item as :class:`~mediaref.cache.MultiModalProcessorOnlyCache` keeps it.

    ``prompt_updates`` are the processor's resolved prompt updates for ``item``; this package
    never looks inside them.
    """

    item: MultiModalKwargsItem
    prompt_updates: Sequence[Any]

    @property
    def nbytes(self) -> int:
        """The item's bytes plus a flat estimate per prompt update (mediaref addition: vLLM counts
        the item alone)."""
        return estimate_nbytes(self.item) + PROMPT_UPDATE_NBYTES * len(self.prompt_updates)


class MultiModalProcessorCacheItemMetadata:
    """One processed item as :class:`~mediaref.cache.LruKeyReplicatedSenderCache` keeps it.

    The engine core holds the tensors; the frontend keeps only their size (``item_size``), which
    is what it needs to evict exactly as the engine core does, and the prompt updates, which it
    needs itself (for some models they depend on the processed tensors).
    """

    __slots__ = ("item_size", "prompt_updates")

    def __init__(self, item: MultiModalKwargsItem, prompt_updates: Sequence[Any]) -> None:
        # The same measure the receiver applies to the full item: equal sizes on both sides are
        # half of the mirroring contract (the other half is the order of operations).
        self.item_size = estimate_nbytes(item)
        self.prompt_updates = prompt_updates


MultiModalProcessorCacheInItem = tuple[MultiModalKwargsItem, Sequence[Any]] | None
"""What the processor hands a frontend cache per item: ``(item, prompt_updates)`` for an item it
processed, ``None`` for one it expects the cache to hold."""

MultiModalProcessorCacheOutItem = tuple[MultiModalKwargsItem | None, Sequence[Any]]
"""What a frontend cache hands back per item: the kwargs item (``None`` from the sender cache
when the engine core already holds it, so nothing is sent) and its prompt updates."""
