"""``BaseMultiModalProcessor``: parsed media in, prompt token ids with placeholders and model
inputs out, serving repeated items from the processor cache (see :mod:`.processor`).

The flow of one request, top to bottom:

1. inputs: :meth:`~BaseMultiModalProcessor.build_inputs` (forks of the caller's refs), the dummy
   inputs of warmup and profiling, ``__call__``;
2. the two phases: ``apply_phase1`` (hash, cache lookup, submit the misses' decodes), the decode
   wait, ``apply_phase2`` (HF processing, then prompt updates); ``apply`` composes them;
3. HF processing with the cache (``_cached_apply_hf_processor``: what the cache lacks now goes
   through the HF processor, the rest is merged back) or without it (``_apply_hf_processor``).

The class tops three levels, one per module, each complete over the ones below: the HF call's
four stages (``_hf_stages``), the prompt updates (``_prompt_stages``), this flow. Every hook keeps
vLLM's name and signature, so a model file overriding one runs unchanged; the work behind the hooks
is done by stages with explicit arguments: the request's state between the phases
(``_apply_state``), the cache lookup and merge (``_cached_apply``), prompt updates (``_prompt``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from mediaref.inputs import (
    MultiModalDataDict,
    MultiModalHashes,
    MultiModalInputs,
    MultiModalKwargsItems,
    build_kwargs_items,
)
from mediaref.parse import MultiModalDataItems, MultiModalDataParser
from mediaref.processing._apply_state import (
    ApplyStates,
    MultiModalApplyState,
    caller_ref_ids,
    fork_media_refs,
    owned_refs_of,
    release_media_refs,
)
from mediaref.processing._cached_apply import (
    cache_hits,
    merge_with_cache,
    missing_indices,
    refuse_uuid_only_misses,
)
from mediaref.processing._fast_encode import cached_encode
from mediaref.processing._model_config import max_model_len_of
from mediaref.processing._prompt_stages import MultiModalProcessingResult, PromptUpdateStages
from mediaref.processing.context import BaseProcessingInfo, TimingContext
from mediaref.processing.dummy_inputs import BaseDummyInputsBuilder, BaseDummyOptions
from mediaref.processing.inputs import (
    MultiModalUUIDItems,
    ProcessorInputs,
    uuid_items_from,
    validate_mm_uuids,
)
from mediaref.processing.prompt_updates import MultiModalIsCached, MultiModalPromptUpdates

if TYPE_CHECKING:
    from mediaref.cache import BaseMultiModalProcessorCache
    from mediaref.inputs import MultiModalUUIDDict

# Logged under the public module, where users look for the processor.
logger = logging.getLogger("mediaref.processing.processor")

_I = TypeVar("_I", bound=BaseProcessingInfo)

_TWO_PHASE_METHODS = ("apply", "_cached_apply_hf_processor", "_apply_hf_processor")
_logged_blocking_fallback: set[type] = set()


class BaseMultiModalProcessor(PromptUpdateStages[_I]):
    """Turns parsed multimodal items into model inputs, serving repeated items from a cache.

    A model family subclasses this and supplies :meth:`_get_mm_fields_config` (how the HF output
    splits into items) and :meth:`_get_prompt_updates` (where each item's tokens go).
    """

    requires_tokenizer: ClassVar[bool] = True

    def __init__(
        self,
        info: _I,
        dummy_inputs: BaseDummyInputsBuilder[_I],
        *,
        cache: BaseMultiModalProcessorCache | None = None,
    ) -> None:
        if self.requires_tokenizer and not info.ctx.has_tokenizer():
            raise ValueError(
                f"{type(self).__name__} requires a tokenizer and cannot be initialized when "
                "`skip_tokenizer_init=True`. Disable `--skip-tokenizer-init`."
            )
        super().__init__(info, dummy_inputs)
        self.cache = cache
        """The cache :meth:`build_inputs` hands its inputs (mediaref; vLLM's callers put the
        cache in ``ProcessorInputs.cache``)."""
        self._states = ApplyStates()

    @property
    def data_parser(self) -> MultiModalDataParser:
        """The model's parser (the processing info's, built on first use)."""
        return self.info.data_parser

    # -- 1. inputs -------------------------------------------------------------------------

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
        """Parse ``mm_data`` into :class:`ProcessorInputs` for this processor's cache, owning
        forks of its refs (released after the apply; the caller's refs stay usable)."""
        owned = fork_media_refs(mm_data)
        try:
            mm_items = self.info.parse_mm_data(owned)
            mm_uuid_items = uuid_items_from(mm_uuids)
            validate_mm_uuids(mm_items, mm_uuid_items)
        except BaseException:
            release_media_refs(owned)  # a rejected request gives its forks back at once
            raise
        callers = caller_ref_ids(mm_data)
        return ProcessorInputs(
            prompt,
            mm_items,
            mm_uuid_items or None,
            hf_processor_mm_kwargs=dict(hf_processor_mm_kwargs or {}),
            media_io_kwargs=dict(media_io_kwargs or {}),
            cache=self.cache,
            tokenization_kwargs=dict(tokenization_kwargs or {}),
            owned_refs=[ref for ref in owned_refs_of(mm_items) if id(ref) not in callers],
        )

    def get_dummy_inputs(
        self,
        seq_len: int,
        mm_counts: Mapping[str, int],
        mm_options: Mapping[str, BaseDummyOptions] | None = None,
    ) -> ProcessorInputs:
        """Inputs that, processed, give the most placeholder tokens (warmup and profiling)."""
        builder = self.dummy_inputs
        text = builder.get_dummy_text(mm_counts)
        mm_items = self.info.parse_mm_data(
            builder.get_dummy_mm_data(seq_len, mm_counts, mm_options), validate=False
        )
        tokenizer = self.info.ctx.tokenizer
        # Without a tokenizer only embeddings are taken, so the dummy prompt has no tokens.
        prompt = [] if tokenizer is None else cached_encode(tokenizer, text, truncation=False)
        return ProcessorInputs(prompt=prompt, mm_data_items=mm_items)

    def get_dummy_mm_inputs(
        self,
        mm_counts: Mapping[str, int],
        *,
        cache: BaseMultiModalProcessorCache | None = None,
        scheduler_config: Any | None = None,
    ) -> MultiModalInputs:
        """The processed dummy inputs, the prompt padded to the sequence length profiling uses."""
        model_config = self.info.ctx.model_config
        seq_len = max_model_len_of(model_config)
        if scheduler_config is not None and getattr(
            scheduler_config, "enable_chunked_prefill", False
        ):
            seq_len = min(seq_len, int(scheduler_config.max_num_batched_tokens))
        # By keyword, as vLLM calls them: a subclass (or a test's stand-in) may take them so.
        inputs = self.get_dummy_inputs(
            seq_len=seq_len,
            mm_counts=mm_counts,
            mm_options=self.info.ctx.get_mm_config().limit_per_prompt,
        )
        inputs.cache = cache
        mm_inputs = self.apply(inputs, timing_ctx=TimingContext(enabled=False))
        token_ids = mm_inputs["prompt_token_ids"]
        if len(token_ids) < seq_len:
            token_ids.extend([0] * (seq_len - len(token_ids)))
        return mm_inputs

    def __call__(
        self,
        prompt: str | list[int],
        mm_items: MultiModalDataItems,
        mm_uuid_items: MultiModalUUIDItems | None = None,
        hf_processor_mm_kwargs: Mapping[str, object] | None = None,
        cache: BaseMultiModalProcessorCache | None = None,
    ) -> MultiModalInputs:
        """Process already parsed items (a text prompt is encoded with the model's defaults)."""
        if isinstance(prompt, str):
            encode_kwargs = self.info.default_tok_params.get_encode_kwargs()
            prompt = list(self.info.get_tokenizer().encode(prompt, **encode_kwargs))
        inputs = ProcessorInputs(
            prompt,
            mm_items,
            mm_uuid_items,
            hf_processor_mm_kwargs=hf_processor_mm_kwargs or {},
            cache=cache,
        )
        return self.apply(inputs, TimingContext(enabled=False))

    # -- 2. the two phases -----------------------------------------------------------------

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

    def apply_phase1(
        self,
        inputs: ProcessorInputs,
        timing_ctx: TimingContext | None = None,
        *,
        claim_misses: bool = False,
    ) -> MultiModalApplyState:
        """Hash, look up the cache and submit the misses' decodes; never waits for a decode.

        ``claim_misses``: take the cache's claims on the misses, so that of concurrent requests
        missing one item only one decodes and processes it (:mod:`mediaref.cache.claims`); for
        a caller that waits with ``wait_decodes_async`` off the processing worker."""
        state = MultiModalApplyState(
            inputs,
            use_cache=inputs.can_use_cache(),
            timing_ctx=timing_ctx or TimingContext(enabled=False),
        )
        try:
            with state.timings.phase("phase1_s"):
                if state.use_cache:
                    assert inputs.cache is not None
                    with state.timing_ctx.record("get_mm_hashes"):
                        state.mm_hashes = self._get_mm_hashes(inputs)
                    with state.timing_ctx.record("get_cache_missing_items"):
                        misses = missing_indices(cache_hits(inputs.cache, state.mm_hashes))
                else:
                    counts = inputs.mm_data_items.get_all_counts()
                    misses = {m: list(range(c)) for m, c in counts.items()}
                # Nothing can stand in for an item sent as a UUID only that the cache lacks:
                # refuse before decoding its siblings.
                refuse_uuid_only_misses(inputs.mm_data_items, misses)
                if claim_misses and state.use_cache:
                    misses = state.claim_misses(misses)
                for modality, indices in misses.items():
                    state.submit_decodes(modality, indices)
        except BaseException:
            state.close()  # ownership never reached the caller
            raise
        return state

    def apply_phase2(self, state: MultiModalApplyState) -> MultiModalInputs:
        """Run the HF processor on what the cache lacks now, merge, and apply prompt updates."""
        inputs, timing_ctx = state.inputs, state.timing_ctx
        with state.timings.phase("phase2_s"), self._states.running(state):
            if state.use_cache:
                result = self._cached_apply_hf_processor(inputs, timing_ctx)
            else:
                result = self._apply_hf_processor(inputs, timing_ctx)
            with timing_ctx.record("apply_prompt_updates"):
                return self._inputs_with_prompt_updates(inputs, result)

    def _inputs_with_prompt_updates(
        self, inputs: ProcessorInputs, result: MultiModalProcessingResult
    ) -> MultiModalInputs:
        """The model inputs of a processed request: its prompt updates applied."""
        prompt_ids, placeholders = self._maybe_apply_prompt_updates(inputs.mm_data_items, result)
        return MultiModalInputs(
            type="multimodal",
            prompt_token_ids=prompt_ids,
            mm_kwargs=result.kwargs,
            mm_hashes=result.hashes,
            mm_placeholders={
                modality: [info.to_range() for info in infos]
                for modality, infos in placeholders.items()
                if infos
            },
            # Whether pixel fields are raw uint8 for the model's FusedMMInputNorm (cache hits
            # included: the cache holds what this processor, with this setting, produced).
            mm_device_do_normalize=self.info.mm_device_do_normalize,
        )

    def apply(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext | None = None
    ) -> MultiModalInputs:
        """Process one request synchronously: phase 1, the decode wait, phase 2. Stage times go
        to ``timing_ctx`` (vLLM's stages, plus ``decode_media``)."""
        with self.apply_phase1(inputs, timing_ctx) as state:
            state.wait_decodes()
            return self.apply_phase2(state)

    @contextmanager
    def _standalone_state(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext
    ) -> Iterator[MultiModalApplyState]:
        """A hook called outside :meth:`apply` (by a model's override, say) runs phase 1 and the
        decode wait itself."""
        with self.apply_phase1(inputs, timing_ctx) as state, self._states.running(state):
            state.wait_decodes()
            yield state

    # -- 3. HF processing, with and without the cache --------------------------------------

    def _cached_apply_hf_processor(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext
    ) -> MultiModalProcessingResult:
        """Process only what the cache lacks *now*, then merge it with the cached items."""
        state = self._states.find(inputs)
        if state is None:
            with self._standalone_state(inputs, timing_ctx):
                return self._cached_apply_hf_processor(inputs, timing_ctx)
        if not state.use_cache or inputs.cache is None:
            return self._apply_hf_processor(inputs, timing_ctx)
        if state.mm_hashes is None:
            with timing_ctx.record("get_mm_hashes"):
                state.mm_hashes = self._get_mm_hashes(inputs)
        mm_hashes = state.mm_hashes
        with timing_ctx.record("get_cache_missing_items"):
            is_cached, miss_items = self._get_cache_missing_items(
                inputs.cache, inputs.mm_data_items, mm_hashes
            )
        misses = missing_indices(is_cached)
        refuse_uuid_only_misses(inputs.mm_data_items, misses)
        for modality, indices in misses.items():
            state.submit_decodes(modality, indices)  # hits evicted since phase 1
        state.wait_decodes()  # only the late decodes; phase 1's were drained before phase 2

        num_misses = sum(len(indices) for indices in misses.values())
        if num_misses:
            hf_kwargs = self._get_cache_missing_processor_kwargs(inputs, is_cached)
            miss_kwargs, miss_updates = self._process_items(state, miss_items, hf_kwargs)
        else:  # all hits: no HF call, no field or prompt-update construction
            miss_kwargs, miss_updates = MultiModalKwargsItems(), {}
        with timing_ctx.record("merge_mm_kwargs"):
            mm_kwargs, mm_updates = self._merge_mm_kwargs(
                inputs.cache, mm_hashes, is_cached, miss_kwargs, miss_updates
            )
        state.release_claims()  # stored: the requests waiting for these items find them
        state.timings.num_misses = num_misses
        state.timings.num_hits = sum(len(h) for h in mm_hashes.values()) - num_misses
        return MultiModalProcessingResult(
            self._tokenize_prompt(inputs), mm_kwargs, mm_hashes, mm_updates
        )

    def _apply_hf_processor(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext
    ) -> MultiModalProcessingResult:
        """The uncached path: every item through the HF processor, hashes computed afterwards."""
        state = self._states.find(inputs)
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

    def _process_items(
        self,
        state: MultiModalApplyState,
        mm_items: MultiModalDataItems,
        hf_kwargs: Mapping[str, object],
    ) -> tuple[MultiModalKwargsItems, MultiModalPromptUpdates]:
        """HF-process ``mm_items``; their per-item model inputs and resolved prompt updates."""
        with state.timings.phase("hf_processor_s"), state.timing_ctx.record("apply_hf_processor"):
            processed = self._apply_hf_processor_main(mm_items, hf_kwargs)
        fields = self._get_mm_fields_config(processed, hf_kwargs)
        kwargs_items = build_kwargs_items(processed, fields)
        return kwargs_items, self._get_mm_prompt_updates(mm_items, hf_kwargs, kwargs_items)

    def _get_mm_hashes(self, inputs: ProcessorInputs) -> MultiModalHashes:
        """Each item's processor and encoder cache identity."""
        algorithm = self.info.ctx.get_mm_config().mm_hasher_algorithm
        return inputs.get_mm_hashes(self.info.model_id, algorithm)

    def _get_cache_missing_items(
        self,
        cache: BaseMultiModalProcessorCache,
        mm_data_items: MultiModalDataItems,
        mm_hashes: MultiModalHashes,
    ) -> tuple[MultiModalIsCached, MultiModalDataItems]:
        """Which items the cache holds, and the others, selected without re-parsing them (each
        keeps its ref, decode transforms and request index)."""
        is_cached = cache_hits(cache, mm_hashes)
        missing = {m: indices for m, indices in missing_indices(is_cached).items() if indices}
        return is_cached, mm_data_items.select(missing)

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
        """Every item's kwargs and updates in request order (see :func:`merge_with_cache`)."""
        return merge_with_cache(
            cache,
            mm_hashes,
            mm_is_cached,
            mm_missing_kwargs,
            mm_missing_prompt_updates,
            self._recompute_cached_prompt_update,
        )


__all__ = ["BaseMultiModalProcessor", "MultiModalProcessingResult"]
