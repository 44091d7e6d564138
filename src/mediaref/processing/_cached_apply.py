"""The HF-processing step of an apply, with and without the processor output cache.

With a cache, phase 2 re-derives the cache state (other requests' phases ran since phase 1: a
miss may have become a hit, a hit may have been evicted and now needs its payload decoded), runs
the HF processor on the misses only, and merges them with the cached items in request order
through the cache's ``get_and_update`` — the one call that keeps the frontend and engine-core
caches evicting alike. Without one, every item goes through the HF processor and is hashed after.

The hooks keep vLLM's names and ``(inputs, timing_ctx)`` signatures; the request's
:class:`MultiModalApplyState` is found through its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Generic, TypeVar

from mediaref.inputs import (
    MultiModalHashes,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    build_kwargs_items,
)
from mediaref.parse import MultiModalDataItems
from mediaref.processing._apply_state import MultiModalApplyState
from mediaref.processing._prompt_stages import MultiModalProcessingResult
from mediaref.processing.context import BaseProcessingInfo, TimingContext
from mediaref.processing.inputs import ProcessorInputs
from mediaref.processing.prompt_updates import (
    MultiModalIsCached,
    MultiModalPromptUpdates,
    ResolvedPromptUpdate,
)

if TYPE_CHECKING:
    from transformers import BatchFeature

    from mediaref.cache import BaseMultiModalProcessorCache
    from mediaref.inputs import MultiModalFieldConfig

_I = TypeVar("_I", bound=BaseProcessingInfo)


class CachedApplyStages(Generic[_I]):
    """HF processing of a request's items, served from the cache where it can be."""

    info: _I

    if TYPE_CHECKING:  # supplied by the processor and its other stages

        def _state_for(self, inputs: ProcessorInputs) -> MultiModalApplyState | None: ...

        def _standalone_state(
            self, inputs: ProcessorInputs, timing_ctx: TimingContext
        ) -> AbstractContextManager[MultiModalApplyState]: ...

        def _tokenize_prompt(self, inputs: ProcessorInputs) -> list[int]: ...

        def _get_mm_hashes(self, inputs: ProcessorInputs) -> MultiModalHashes: ...

        @staticmethod
        def _check_uuid_only_misses(
            inputs: ProcessorInputs, misses: Mapping[str, list[int]]
        ) -> None: ...

        def _get_mm_fields_config(
            self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
        ) -> Mapping[str, MultiModalFieldConfig]: ...

        def _get_mm_prompt_updates(
            self,
            mm_items: MultiModalDataItems,
            hf_processor_mm_kwargs: Mapping[str, object],
            out_mm_kwargs: MultiModalKwargsItems,
        ) -> MultiModalPromptUpdates: ...

        def _apply_hf_processor_main(
            self, mm_items: MultiModalDataItems, hf_kwargs: Mapping[str, object]
        ) -> BatchFeature: ...

        def _recompute_cached_prompt_update(
            self, cached_update: ResolvedPromptUpdate, new_item_idx: int
        ) -> ResolvedPromptUpdate: ...

    # -- hooks -----------------------------------------------------------------------------

    def _find_misses(
        self, inputs: ProcessorInputs, mm_hashes: MultiModalHashes
    ) -> dict[str, list[int]]:
        """Per modality, the indices of the items the cache does not hold."""
        assert inputs.cache is not None
        is_cached = {m: list(inputs.cache.is_cached(h)) for m, h in mm_hashes.items()}
        return {m: [i for i, hit in enumerate(c) if not hit] for m, c in is_cached.items()}

    def _get_cache_missing_items(
        self,
        cache: BaseMultiModalProcessorCache,
        mm_data_items: MultiModalDataItems,
        mm_hashes: MultiModalHashes,
    ) -> tuple[MultiModalIsCached, MultiModalDataItems]:
        """Which items the cache holds, and the others, selected without re-parsing them (each
        keeps its ref, decode transforms and request index)."""
        is_cached = {m: list(cache.is_cached(h)) for m, h in mm_hashes.items()}
        missing = {m: [i for i, hit in enumerate(c) if not hit] for m, c in is_cached.items()}
        return is_cached, mm_data_items.select({m: i for m, i in missing.items() if i})

    def _get_cache_missing_processor_kwargs(
        self, inputs: ProcessorInputs, mm_is_cached: MultiModalIsCached
    ) -> Mapping[str, object]:
        """The processor kwargs for the items missing from the cache."""
        return inputs.hf_processor_mm_kwargs

    def _merge_mm_kwargs(
        self,
        cache: BaseMultiModalProcessorCache,
        mm_hashes: MultiModalHashes,
        mm_is_cached: MultiModalIsCached,
        mm_missing_kwargs: MultiModalKwargsItems,
        mm_missing_prompt_updates: MultiModalPromptUpdates,
    ) -> tuple[MultiModalKwargsItems, MultiModalPromptUpdates]:
        """Every item's kwargs and updates in request order: the misses' fresh ones stored, the
        hits' read back, in one ``get_and_update`` (a sender-cache hit reads back None: the engine
        core holds that item)."""
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
        # As vLLM's frontend does: touch every hash first, so storing one miss cannot evict
        # another item of this request, then update in request order, then end the protection.
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
            mm_updates[modality].append(
                tuple(self._recompute_cached_prompt_update(u, index) for u in updates)
            )
        return mm_kwargs, mm_updates

    # -- processing ------------------------------------------------------------------------

    def _process_items(
        self,
        state: MultiModalApplyState,
        mm_items: MultiModalDataItems,
        hf_kwargs: Mapping[str, object],
    ) -> tuple[MultiModalKwargsItems, MultiModalPromptUpdates]:
        """HF-process ``mm_items``; their per-item model inputs and resolved prompt updates."""
        with state.timings.phase("hf_processor_s"), state.timing_ctx.record("apply_hf_processor"):
            processed = self._apply_hf_processor_main(mm_items, hf_kwargs)
        kwargs_items = build_kwargs_items(
            processed, self._get_mm_fields_config(processed, hf_kwargs)
        )
        return kwargs_items, self._get_mm_prompt_updates(mm_items, hf_kwargs, kwargs_items)

    def _apply_hf_processor(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext
    ) -> MultiModalProcessingResult:
        """The uncached path: every item through the HF processor, hashes computed afterwards."""
        state = self._state_for(inputs)
        if state is None:
            with self._standalone_state(inputs, timing_ctx):
                return self._apply_hf_processor(inputs, timing_ctx)
        state.timings.num_misses = sum(inputs.mm_data_items.get_all_counts().values())
        mm_kwargs, mm_updates = self._process_items(
            state, inputs.mm_data_items, inputs.hf_processor_mm_kwargs
        )
        with timing_ctx.record("get_mm_hashes"):
            mm_hashes = self._get_mm_hashes(inputs)
        return MultiModalProcessingResult(
            self._tokenize_prompt(inputs), mm_kwargs, mm_hashes, mm_updates
        )

    def _cached_apply_hf_processor(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext
    ) -> MultiModalProcessingResult:
        """Process only what the cache lacks *now*, then merge it with the cached items."""
        state = self._state_for(inputs)
        if state is None:
            with self._standalone_state(inputs, timing_ctx):
                return self._cached_apply_hf_processor(inputs, timing_ctx)
        if not state.use_cache or inputs.cache is None:
            return self._apply_hf_processor(inputs, timing_ctx)
        cache = inputs.cache
        if state.mm_hashes is None:
            with timing_ctx.record("get_mm_hashes"):
                state.mm_hashes = self._get_mm_hashes(inputs)
        mm_hashes = state.mm_hashes
        with timing_ctx.record("get_cache_missing_items"):
            is_cached, miss_items = self._get_cache_missing_items(
                cache, inputs.mm_data_items, mm_hashes
            )
        misses = {m: [i for i, hit in enumerate(c) if not hit] for m, c in is_cached.items()}
        self._check_uuid_only_misses(inputs, misses)
        for modality, indices in misses.items():
            state.submit_decodes(modality, indices)  # hits evicted since phase 1
        state.wait_decodes()  # only the late decodes; phase 1's were drained before phase 2

        num_misses = sum(len(i) for i in misses.values())
        if num_misses:
            hf_kwargs = self._get_cache_missing_processor_kwargs(inputs, is_cached)
            miss_kwargs, miss_updates = self._process_items(state, miss_items, hf_kwargs)
        else:  # all hits: no HF call, no field or prompt-update construction
            miss_kwargs, miss_updates = MultiModalKwargsItems(), {}
        with timing_ctx.record("merge_mm_kwargs"):
            mm_kwargs, mm_updates = self._merge_mm_kwargs(
                cache, mm_hashes, is_cached, miss_kwargs, miss_updates
            )
        state.timings.num_misses = num_misses
        state.timings.num_hits = sum(len(h) for h in mm_hashes.values()) - num_misses
        return MultiModalProcessingResult(
            self._tokenize_prompt(inputs), mm_kwargs, mm_hashes, mm_updates
        )


__all__ = ["CachedApplyStages"]
