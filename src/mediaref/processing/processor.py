"""The multimodal processor: parsed media in, prompt token ids with placeholders and model inputs out.

A cached apply runs in two phases around a decode wait:

* :meth:`BaseMultiModalProcessor.apply_phase1` hashes the items (refs hash as their keys, so
  nothing decodes), looks the hashes up in the processor cache, and submits decodes of the
  misses to the media pool without joining them, so the worker that runs it stays free;
* :meth:`MultiModalApplyState.wait_decodes` (or ``_async``) drains those decodes off the worker;
* :meth:`BaseMultiModalProcessor.apply_phase2` re-derives the cache state (other requests ran in
  between), runs the HF processor on the misses, merges the cache, and applies prompt updates.

:meth:`BaseMultiModalProcessor.apply` is the synchronous composition of the same steps.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import (
    MultiModalDataDict,
    MultiModalHashes,
    MultiModalInputs,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    MultiModalUUIDDict,
)
from mediaref.parse import MultiModalDataItems, MultiModalDataParser
from mediaref.processing._apply_state import ApplyTimings, MultiModalApplyState
from mediaref.processing._fast_encode import encode_text
from mediaref.processing._hf_stages import HfMMInputs, HfProcessorStages
from mediaref.processing._input_checks import (
    fork_media_refs,
    release_media_refs,
    validate_mm_counts,
    validate_mm_uuids,
)
from mediaref.processing.context import BaseProcessingInfo
from mediaref.processing.dummy_inputs import BaseDummyInputsBuilder
from mediaref.processing.fields import MultiModalFieldConfig, build_kwargs_items
from mediaref.processing.inputs import ProcessorInputs
from mediaref.processing.prompt_updates import (
    MultiModalPromptUpdates,
    PromptIndex,
    PromptIndexTargets,
    PromptInsertion,
    PromptReplacement,
    PromptUpdate,
    PromptUpdateDetails,
    ResolvedPromptUpdate,
    apply_prompt_updates,
    resolve_prompt_updates,
)

if TYPE_CHECKING:
    from transformers import BatchFeature

    from mediaref.cache import BaseMultiModalProcessorCache

logger = logging.getLogger(__name__)

_I = TypeVar("_I", bound=BaseProcessingInfo)

_TWO_PHASE_METHODS = ("apply", "_cached_apply_hf_processor", "_apply_hf_processor")
_logged_blocking_fallback: set[type] = set()


class BaseMultiModalProcessor(HfProcessorStages[_I]):
    """Turns parsed multimodal items into model inputs, serving repeated items from a cache.

    A model family subclasses this and supplies :meth:`_get_mm_fields_config` (how the HF output
    splits into items) and :meth:`_get_prompt_updates` (where each item's tokens go).
    """

    def __init__(
        self,
        info: _I,
        dummy_inputs: BaseDummyInputsBuilder[_I],
        *,
        cache: BaseMultiModalProcessorCache | None = None,
    ) -> None:
        self.info = info
        self.dummy_inputs = dummy_inputs
        self.cache = cache
        self._data_parser: MultiModalDataParser | None = None

    @property
    def data_parser(self) -> MultiModalDataParser:
        """The model's parser, built on first use (it may read the HF processor's settings)."""
        if self._data_parser is None:
            self._data_parser = self._get_data_parser()
        return self._data_parser

    # -- model hooks -----------------------------------------------------------------------

    def _get_data_parser(self) -> MultiModalDataParser:
        return MultiModalDataParser()

    @abstractmethod
    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        """How each HF output field batches its items."""

    @abstractmethod
    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        """The prompt updates of ``mm_items``, given their processed outputs."""

    def _postprocess_prompt(self, token_ids: list[int]) -> list[int]:
        """Prompt transforms the HF processor applies regardless of media (none by default)."""
        return token_ids

    # -- inputs ----------------------------------------------------------------------------

    def build_inputs(
        self,
        prompt: str | list[int],
        mm_data: MultiModalDataDict,
        hf_processor_mm_kwargs: Mapping[str, object] | None = None,
        *,
        tokenization_kwargs: Mapping[str, object] | None = None,
        mm_uuids: MultiModalUUIDDict | None = None,
        media_io_kwargs: Mapping[str, Mapping[str, object]] | None = None,
    ) -> ProcessorInputs:
        """Parse ``mm_data`` into :class:`ProcessorInputs`, taking ownership of forks of its refs."""
        owned = fork_media_refs(mm_data)
        try:
            mm_items = self.data_parser.parse_mm_data(owned)
            validate_mm_counts(mm_items, self.info.get_supported_mm_limits())
            validate_mm_uuids(mm_items, mm_uuids)
        except BaseException:
            release_media_refs(owned)  # a rejected request gives its forks back at once
            raise
        return ProcessorInputs(
            prompt=prompt,
            mm_data_items=mm_items,
            hf_processor_mm_kwargs=dict(hf_processor_mm_kwargs or {}),
            tokenization_kwargs=dict(tokenization_kwargs or {}),
            mm_uuids=mm_uuids,
            media_io_kwargs=dict(media_io_kwargs or {}),
        )

    # -- the two phases ----------------------------------------------------------------------

    @property
    def supports_two_phase_apply(self) -> bool:
        """Whether the split apply is safe: the processor overrides none of the composed methods."""
        overridden = [
            name
            for name in _TWO_PHASE_METHODS
            if getattr(type(self), name) is not getattr(BaseMultiModalProcessor, name)
        ]
        if overridden and type(self) not in _logged_blocking_fallback:
            _logged_blocking_fallback.add(type(self))
            logger.debug(
                "%s overrides %s; multimodal processing uses the blocking path",
                type(self).__name__,
                ", ".join(overridden),
            )
        return not overridden

    def apply_phase1(self, inputs: ProcessorInputs) -> MultiModalApplyState:
        """Hash, look up the cache and submit the misses' decodes; never waits for a decode."""
        start = time.perf_counter()
        state = MultiModalApplyState(inputs, use_cache=inputs.can_use_cache(self.cache))
        try:
            if state.use_cache:
                state.mm_hashes = inputs.get_mm_hashes(self.info.model_id)
                misses = self._find_misses(state.mm_hashes)
            else:
                misses = {
                    m: list(range(c)) for m, c in inputs.mm_data_items.get_all_counts().items()
                }
                # Without the cache nothing can stand in for an item sent as a UUID only.
                self._check_uuid_only_misses(inputs, misses)
            for modality, indices in misses.items():
                state.submit_decodes(modality, indices)
        except BaseException:
            state.close()  # ownership never reached the caller
            raise
        state.timings.phase1_s = time.perf_counter() - start
        return state

    def apply_phase2(self, state: MultiModalApplyState) -> MultiModalInputs:
        """Run the HF processor on what the cache lacks now, merge, and apply prompt updates."""
        start = time.perf_counter()
        if state.use_cache:
            prompt_ids, mm_kwargs, mm_hashes, mm_updates = self._cached_apply_hf_processor(state)
        else:
            prompt_ids, mm_kwargs, mm_hashes, mm_updates = self._apply_hf_processor(state)
        result = self._build_mm_input(state.inputs, prompt_ids, mm_kwargs, mm_hashes, mm_updates)
        state.timings.phase2_s = time.perf_counter() - start
        return result

    def apply(self, inputs: ProcessorInputs) -> MultiModalInputs:
        """Process one request synchronously: phase 1, the decode wait, phase 2."""
        with self.apply_phase1(inputs) as state:
            state.wait_decodes()
            return self.apply_phase2(state)

    # -- phase 2 internals -----------------------------------------------------------------

    def _find_misses(self, mm_hashes: MultiModalHashes) -> dict[str, list[int]]:
        assert self.cache is not None
        misses: dict[str, list[int]] = {}
        for modality, hashes in mm_hashes.items():
            cached = self.cache.is_cached(hashes)
            misses[modality] = [i for i, hit in enumerate(cached) if not hit]
        return misses

    def _process_items(
        self, state: MultiModalApplyState, mm_items: MultiModalDataItems
    ) -> tuple[MultiModalKwargsItems, MultiModalPromptUpdates]:
        """HF-process ``mm_items``; their per-item model inputs and resolved prompt updates."""
        inputs = state.inputs
        start = time.perf_counter()
        processed = self._apply_hf_processor_main(
            mm_items, inputs.hf_processor_mm_kwargs, inputs.tokenization_kwargs
        )
        state.timings.hf_processor_s += time.perf_counter() - start
        fields = self._get_mm_fields_config(processed, inputs.hf_processor_mm_kwargs)
        kwargs_items = build_kwargs_items(processed, fields)
        updates = self._get_prompt_updates(mm_items, inputs.hf_processor_mm_kwargs, kwargs_items)
        return kwargs_items, resolve_prompt_updates(updates, mm_items.get_all_counts())

    def _apply_hf_processor(
        self, state: MultiModalApplyState
    ) -> tuple[list[int], MultiModalKwargsItems, MultiModalHashes, MultiModalPromptUpdates]:
        """The uncached path: every item through the HF processor, hashes computed afterwards."""
        inputs = state.inputs
        state.timings.num_misses = sum(inputs.mm_data_items.get_all_counts().values())
        mm_kwargs, mm_updates = self._process_items(state, inputs.mm_data_items)
        mm_hashes = inputs.get_mm_hashes(self.info.model_id)
        return self._tokenize_prompt(inputs), mm_kwargs, mm_hashes, mm_updates

    def _cached_apply_hf_processor(
        self, state: MultiModalApplyState
    ) -> tuple[list[int], MultiModalKwargsItems, MultiModalHashes, MultiModalPromptUpdates]:
        """Process only what the cache lacks *now*, then merge it with the cached items.

        Other requests' phases ran since phase 1: a miss may have become a hit (skip it), and a
        hit may have been evicted; its decode is submitted here from the payload the state kept.
        """
        assert self.cache is not None and state.mm_hashes is not None
        inputs, mm_hashes = state.inputs, state.mm_hashes
        misses = self._find_misses(mm_hashes)
        self._check_uuid_only_misses(inputs, misses)
        for modality, indices in misses.items():
            state.submit_decodes(modality, indices)
        state.wait_decodes()  # only the late decodes; phase 1's were drained before phase 2

        miss_indices = {m: i for m, i in misses.items() if i}
        if miss_indices:
            miss_items = inputs.mm_data_items.select(miss_indices)
            miss_kwargs, miss_updates = self._process_items(state, miss_items)
        else:  # all hits: no HF call, no field or prompt-update construction
            miss_kwargs, miss_updates = MultiModalKwargsItems(), {}

        order = [(m, i) for m, hashes in mm_hashes.items() for i in range(len(hashes))]
        miss_pos = {(m, i): k for m, indices in misses.items() for k, i in enumerate(indices)}
        entries: list[tuple[MultiModalKwargsItem, tuple[ResolvedPromptUpdate, ...]] | None] = []
        for modality, index in order:
            k = miss_pos.get((modality, index))
            if k is None:
                entries.append(None)
            else:
                item_updates = miss_updates[modality][k] if modality in miss_updates else ()
                entries.append((miss_kwargs[modality][k], tuple(item_updates)))
        merged = self.cache.get_and_update(entries, [mm_hashes[m][i] for m, i in order])

        # A sender-cache hit gives None: the engine core holds that item and fills it in.
        mm_kwargs = MultiModalKwargsItems({m: [] for m in mm_hashes})
        updates_by_modality: dict[str, list[tuple[ResolvedPromptUpdate, ...]]] = {
            m: [] for m in mm_hashes
        }
        # get_and_update returns one output per entry, and entries follow ``order``.
        for (modality, index), (item, updates) in zip(order, merged, strict=True):
            mm_kwargs[modality].append(item)  # type: ignore[arg-type]  # None: sender-cache hit
            updates_by_modality[modality].append(
                tuple(
                    u if u.item_idx == index else dataclasses.replace(u, item_idx=index)
                    for u in updates
                )
            )
        mm_updates: MultiModalPromptUpdates = updates_by_modality
        state.timings.num_misses = len(miss_pos)
        state.timings.num_hits = len(order) - len(miss_pos)
        return self._tokenize_prompt(inputs), mm_kwargs, mm_hashes, mm_updates

    @staticmethod
    def _check_uuid_only_misses(inputs: ProcessorInputs, misses: Mapping[str, list[int]]) -> None:
        for modality, indices in misses.items():
            items = inputs.mm_data_items[modality]
            for index in indices:
                if items.get_raw(index) is None:
                    raise VLLMValidationError(
                        f"{modality} item {items.get_original_index(index)} was sent as a UUID only "
                        "and is not in the processor cache; send the media itself",
                        parameter=modality,
                    )

    def _tokenize_prompt(self, inputs: ProcessorInputs) -> list[int]:
        if isinstance(inputs.prompt, str):
            tokenizer = self.info.get_tokenizer()
            token_ids = encode_text(tokenizer, inputs.prompt, **inputs.tokenization_kwargs)
        else:
            token_ids = list(inputs.prompt)
        return self._postprocess_prompt(token_ids)

    def _build_mm_input(
        self,
        inputs: ProcessorInputs,
        prompt_ids: list[int],
        mm_kwargs: MultiModalKwargsItems,
        mm_hashes: MultiModalHashes,
        mm_updates: MultiModalPromptUpdates,
    ) -> MultiModalInputs:
        tokenizer = self.info.get_tokenizer()
        token_ids, placeholders = apply_prompt_updates(prompt_ids, mm_updates, tokenizer)
        for modality, count in inputs.mm_data_items.get_all_counts().items():
            found = len(placeholders.get(modality, []))
            if found != count:
                raise VLLMValidationError(
                    f"expected {count} {modality} placeholder(s) in the prompt, found {found}",
                    parameter=modality,
                )
        return MultiModalInputs(
            type="multimodal",
            prompt_token_ids=token_ids,
            mm_kwargs=mm_kwargs,
            mm_hashes=mm_hashes,
            mm_placeholders=placeholders,
            # Whether pixel fields are raw uint8 for the model's FusedMMInputNorm (cache hits
            # included: the cache holds what this processor, with this setting, produced).
            mm_device_do_normalize=self.info.mm_device_do_normalize,
        )


__all__ = [
    "ApplyTimings",
    "BaseMultiModalProcessor",
    "HfMMInputs",
    "MultiModalApplyState",
    "MultiModalFieldConfig",
    "PromptIndex",
    "PromptIndexTargets",
    "PromptInsertion",
    "PromptReplacement",
    "PromptUpdate",
    "PromptUpdateDetails",
    "ResolvedPromptUpdate",
]
