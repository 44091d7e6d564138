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
        return estimate_nbytes(self.item) + PROMPT_UPDATE_NBYTES * len(self.prompt_updates)


@dataclass(frozen=True)
class MultiModalProcessorCacheItemMetadata:
    """One processed item as :class:`~mediaref.cache.MultiModalProcessorSenderCache` keeps it.

    The engine core holds the tensors; the frontend keeps only their size, which is what it needs
    to evict exactly as the engine core does, and the prompt updates, which it needs itself.
    """

    item_size: int
    prompt_updates: Sequence[Any]

    @classmethod
    def wraps(
        cls, item: MultiModalKwargsItem, prompt_updates: Sequence[Any]
    ) -> MultiModalProcessorCacheItemMetadata:
        # The same measure the receiver applies to the full item: equal sizes on both sides are
        # half of the mirroring contract (the other half is the order of operations).
        return cls(item_size=estimate_nbytes(item), prompt_updates=prompt_updates)


MultiModalProcessorCacheInItem = tuple[MultiModalKwargsItem, Sequence[Any]] | None
"""What the processor hands a frontend cache per item: ``(item, prompt_updates)`` for an item it
processed, ``None`` for one it expects the cache to hold."""

MultiModalProcessorCacheOutItem = tuple[MultiModalKwargsItem | None, Sequence[Any]]
"""What a frontend cache hands back per item: the kwargs item (``None`` from the sender cache
when the engine core already holds it, so nothing is sent) and its prompt updates."""
