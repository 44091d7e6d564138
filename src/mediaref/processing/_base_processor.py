"""``BaseMultiModalProcessor``: parsed media in, prompt token ids with placeholders and model
inputs out, serving repeated items from the processor cache (see :mod:`.processor`)."""

from __future__ import annotations

import contextlib
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import MultiModalDataDict, MultiModalHashes, MultiModalInputs
from mediaref.parse import MultiModalDataItems, MultiModalDataParser
from mediaref.processing._apply_state import MultiModalApplyState, owned_refs_of
from mediaref.processing._cached_apply import CachedApplyStages
from mediaref.processing._fast_encode import cached_encode, encode_text
from mediaref.processing._hf_stages import HfProcessorStages
from mediaref.processing._prompt_stages import MultiModalProcessingResult, PromptUpdateStages
from mediaref.processing._ref_ownership import caller_ref_ids, fork_media_refs, release_media_refs
from mediaref.processing.context import BaseProcessingInfo, TimingContext
from mediaref.processing.dummy_inputs import BaseDummyInputsBuilder, BaseDummyOptions
from mediaref.processing.inputs import MultiModalUUIDItems, ProcessorInputs, uuid_items_from

if TYPE_CHECKING:
    from transformers import BatchFeature

    from mediaref.cache import BaseMultiModalProcessorCache
    from mediaref.inputs import MultiModalFieldConfig, MultiModalUUIDDict

# Logged under the public module, where users look for the processor.
logger = logging.getLogger("mediaref.processing.processor")

_I = TypeVar("_I", bound=BaseProcessingInfo)

_TWO_PHASE_METHODS = ("apply", "_cached_apply_hf_processor", "_apply_hf_processor")
_logged_blocking_fallback: set[type] = set()


class BaseMultiModalProcessor(
    CachedApplyStages[_I], PromptUpdateStages[_I], HfProcessorStages[_I], ABC
):
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
        self.info = info
        self.dummy_inputs = dummy_inputs
        self.cache = cache
        """The cache :meth:`build_inputs` hands its inputs (mediaref; vLLM's callers put the
        cache in ``ProcessorInputs.cache``)."""
        self._states: dict[int, MultiModalApplyState] = {}
        self._states_lock = threading.Lock()

    @property
    def data_parser(self) -> MultiModalDataParser:
        """The model's parser (the processing info's, built on first use)."""
        return self.info.data_parser

    @abstractmethod
    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        """How each HF output field batches its items."""

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
        seq_len = model_config.derived_max_model_len
        if scheduler_config is not None and getattr(
            scheduler_config, "enable_chunked_prefill", False
        ):
            seq_len = min(seq_len, int(scheduler_config.max_num_batched_tokens))
        inputs = self.get_dummy_inputs(
            seq_len, mm_counts, self.info.ctx.get_mm_config().limit_per_prompt
        )
        inputs.cache = cache
        mm_inputs = self.apply(inputs, TimingContext(enabled=False))
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

    # -- the two phases --------------------------------------------------------------------

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
        self, inputs: ProcessorInputs, timing_ctx: TimingContext | None = None
    ) -> MultiModalApplyState:
        """Hash, look up the cache and submit the misses' decodes; never waits for a decode."""
        state = MultiModalApplyState(
            inputs,
            use_cache=inputs.can_use_cache(),
            timing_ctx=timing_ctx or TimingContext(enabled=False),
        )
        try:
            with state.timings.phase("phase1_s"):
                if state.use_cache:
                    with state.timing_ctx.record("get_mm_hashes"):
                        state.mm_hashes = self._get_mm_hashes(inputs)
                    with state.timing_ctx.record("get_cache_missing_items"):
                        misses = self._find_misses(inputs, state.mm_hashes)
                else:
                    counts = inputs.mm_data_items.get_all_counts()
                    misses = {m: list(range(c)) for m, c in counts.items()}
                # Nothing can stand in for an item sent as a UUID only that the cache lacks:
                # refuse before decoding its siblings.
                self._check_uuid_only_misses(inputs, misses)
                for modality, indices in misses.items():
                    state.submit_decodes(modality, indices)
        except BaseException:
            state.close()  # ownership never reached the caller
            raise
        return state

    def apply_phase2(self, state: MultiModalApplyState) -> MultiModalInputs:
        """Run the HF processor on what the cache lacks now, merge, and apply prompt updates."""
        inputs, timing_ctx = state.inputs, state.timing_ctx
        with state.timings.phase("phase2_s"), self._running(state):
            if state.use_cache:
                result = self._cached_apply_hf_processor(inputs, timing_ctx)
            else:
                result = self._apply_hf_processor(inputs, timing_ctx)
            with timing_ctx.record("apply_prompt_updates"):
                prompt_ids, placeholders = self._maybe_apply_prompt_updates(
                    inputs.mm_data_items, result
                )
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

    # -- the state behind vLLM's (inputs, timing_ctx) hooks --------------------------------

    @contextlib.contextmanager
    def _running(self, state: MultiModalApplyState) -> Iterator[None]:
        """Make ``state`` the one the hooks find for its inputs while phase 2 runs."""
        key = id(state.inputs)
        with self._states_lock:
            self._states[key] = state
        try:
            yield
        finally:
            with self._states_lock:
                if self._states.get(key) is state:
                    del self._states[key]

    def _state_for(self, inputs: ProcessorInputs) -> MultiModalApplyState | None:
        with self._states_lock:
            return self._states.get(id(inputs))

    @contextlib.contextmanager
    def _standalone_state(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext
    ) -> Iterator[MultiModalApplyState]:
        """A hook called outside :meth:`apply` (by a model's override, say) runs phase 1 itself."""
        with self.apply_phase1(inputs, timing_ctx) as state, self._running(state):
            state.wait_decodes()
            yield state

    def _get_mm_hashes(self, inputs: ProcessorInputs) -> MultiModalHashes:
        """Each item's processor and encoder cache identity."""
        algorithm = self.info.ctx.get_mm_config().mm_hasher_algorithm
        return inputs.get_mm_hashes(self.info.model_id, algorithm)

    def _tokenize_prompt(self, inputs: ProcessorInputs) -> list[int]:
        if isinstance(inputs.prompt, str):
            tokenizer = self.info.get_tokenizer()
            token_ids = encode_text(tokenizer, inputs.prompt, **inputs.tokenization_kwargs)
        else:
            token_ids = list(inputs.prompt)
        return self._postprocess_prompt(token_ids)

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


def validate_mm_uuids(mm_items: MultiModalDataItems, mm_uuid_items: MultiModalUUIDItems) -> None:
    """Client UUIDs, where given, come one per item of a modality the request has."""
    counts = mm_items.get_all_counts()
    for modality, uuids in mm_uuid_items.items():
        if modality not in counts:
            raise VLLMValidationError(
                f"multi_modal_uuids[{modality!r}] is given but the request has no {modality} items",
                parameter="multi_modal_uuids",
            )
        if len(uuids) != counts[modality]:
            raise VLLMValidationError(
                f"multi_modal_uuids[{modality!r}] has {len(uuids)} entries for "
                f"{counts[modality]} {modality} item(s)",
                parameter="multi_modal_uuids",
            )


__all__ = ["BaseMultiModalProcessor", "MultiModalProcessingResult", "validate_mm_uuids"]
