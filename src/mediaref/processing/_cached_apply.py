"""The processor output cache's part in an apply: which items it holds, and merging them back.

With a cache, phase 2 re-derives the cache state (other requests' phases ran since phase 1: a miss
may have become a hit, a hit may have been evicted and now needs its payload decoded), runs the HF
processor on the misses only, and merges them with the cached items in request order through the
cache's ``get_and_update`` (:func:`merge_with_cache`) — the one call that keeps the frontend and
engine-core caches evicting alike. An item sent as a UUID only that the cache lacks is refused
before any decode (:func:`refuse_uuid_only_misses`): nothing can stand in for it. The processor's
hooks (``_get_cache_missing_items``, ``_merge_mm_kwargs``) keep vLLM's names and delegate here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import MultiModalHashes, MultiModalKwargsItem, MultiModalKwargsItems
from mediaref.processing.prompt_updates import (
    MultiModalIsCached,
    MultiModalPromptUpdates,
    ResolvedPromptUpdate,
)

if TYPE_CHECKING:
    from mediaref.cache import BaseMultiModalProcessorCache
    from mediaref.parse import MultiModalDataItems


RecomputeUpdate = Callable[[ResolvedPromptUpdate, int], ResolvedPromptUpdate]
"""``(a cached item's update, its index in this request) -> the update for that index``."""


def cache_hits(
    cache: BaseMultiModalProcessorCache, mm_hashes: MultiModalHashes
) -> MultiModalIsCached:
    """Per modality, whether the cache holds each item."""
    return {modality: list(cache.is_cached(hashes)) for modality, hashes in mm_hashes.items()}


def missing_indices(is_cached: MultiModalIsCached) -> dict[str, list[int]]:
    """Per modality, the indices of the items the cache does not hold."""
    return {m: [i for i, hit in enumerate(hits) if not hit] for m, hits in is_cached.items()}


def merge_with_cache(
    cache: BaseMultiModalProcessorCache,
    mm_hashes: MultiModalHashes,
    mm_is_cached: MultiModalIsCached,
    mm_missing_kwargs: MultiModalKwargsItems,
    mm_missing_prompt_updates: MultiModalPromptUpdates,
    recompute: RecomputeUpdate,
) -> tuple[MultiModalKwargsItems, MultiModalPromptUpdates]:
    """Every item's kwargs and updates in request order: the misses' fresh ones stored, the
    hits' read back (each update recomputed for its index here), in one ``get_and_update``. A
    sender-cache hit reads back None: the engine core holds that item."""
    order = [(m, i) for m, hashes in mm_hashes.items() for i in range(len(hashes))]
    next_miss = dict.fromkeys(mm_hashes, 0)
    entries: list[tuple[MultiModalKwargsItem, tuple[ResolvedPromptUpdate, ...]] | None] = []
    for modality, index in order:
        if mm_is_cached[modality][index]:
            entries.append(None)
            continue
        k = next_miss[modality]
        next_miss[modality] += 1
        modality_updates = mm_missing_prompt_updates.get(modality, ())
        item_updates = tuple(modality_updates[k]) if k < len(modality_updates) else ()
        entries.append((mm_missing_kwargs[modality][k], item_updates))
    hashes = [mm_hashes[m][i] for m, i in order]
    # As vLLM's frontend does: touch every hash first, so storing one miss cannot evict another
    # item of this request, then update in request order, then end the protection.
    try:
        for item_hash in hashes:
            cache.touch_sender_cache_item(item_hash)
        merged = cache.get_and_update(entries, hashes)
    finally:
        cache.release_sender_touches()

    mm_kwargs = MultiModalKwargsItems({m: [] for m in mm_hashes})
    mm_updates: dict[str, list[Sequence[ResolvedPromptUpdate]]] = {m: [] for m in mm_hashes}
    # get_and_update returns one output per entry, and entries follow ``order``.
    for (modality, index), (item, updates) in zip(order, merged, strict=True):
        mm_kwargs[modality].append(item)  # type: ignore[arg-type]  # None: sender-cache hit
        mm_updates[modality].append(tuple(recompute(u, index) for u in updates))
    return mm_kwargs, mm_updates


def refuse_uuid_only_misses(
    mm_data_items: MultiModalDataItems, misses: Mapping[str, list[int]]
) -> None:
    """Refuse an item sent as a UUID only that the cache lacks: nothing can stand in for it."""
    for modality, indices in misses.items():
        items = mm_data_items[modality]
        for index in indices:
            if items.get_raw(index) is None:
                raise VLLMValidationError(
                    f"{modality} item {items.get_original_index(index)} was sent as a UUID only "
                    "and is not in the processor cache; send the media itself",
                    parameter=modality,
                )


__all__ = [
    "RecomputeUpdate",
    "cache_hits",
    "merge_with_cache",
    "missing_indices",
    "refuse_uuid_only_misses",
]
