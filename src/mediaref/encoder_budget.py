"""How many multimodal items the encoder may take per prompt and per batch (vLLM's
``vllm.multimodal.encoder_budget``).

An engine sizes its encoder cache and profiles its memory from the largest item each modality can
produce: the model's processing info may state it (``get_mm_max_tokens_per_item``), otherwise it is
measured by processing dummy inputs at the largest sizes. From those counts and the scheduler's
limits follow the encoder's compute budget and cache size (both in tokens), and how many items of
each modality fit one prompt and one batch.

``vllm_config`` is ``VllmConfig``-shaped: ``.model_config`` (``get_multimodal_config()``,
``max_model_len``) and ``.scheduler_config`` (``max_num_seqs``, ``max_num_batched_tokens``,
``enable_chunked_prefill``, ``disable_chunked_mm_input``, ``max_num_encoder_input_tokens``,
``encoder_cache_size``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mediaref.cache import BaseMultiModalProcessorCache, processor_only_cache_from_config
from mediaref.inputs import MultiModalKwargsItem
from mediaref.processing import BaseMultiModalProcessor
from mediaref.processing.context import max_model_len_of
from mediaref.processing.torch_threads import set_default_torch_num_threads
from mediaref.registry import MultiModalRegistry

logger = logging.getLogger(__name__)


def get_mm_max_toks_per_item(
    processor: Any, mm_counts: Mapping[str, int], cache: BaseMultiModalProcessorCache | None
) -> Mapping[str, int]:
    """The most embedding tokens one item of each modality can take.

    The model's ``info.get_mm_max_tokens_per_item`` answers when it knows; otherwise dummy inputs
    at their largest (``processor.get_dummy_mm_inputs``) are processed and their placeholders'
    embedding positions counted, per modality.
    """
    seq_len = max_model_len_of(processor.info.ctx.model_config)
    known = processor.info.get_mm_max_tokens_per_item(seq_len=seq_len, mm_counts=mm_counts)
    if known is not None:
        return dict(known)
    dummy = processor.get_dummy_mm_inputs(mm_counts, cache=cache)
    return {
        modality: sum(placeholder.get_num_embeds() for placeholder in placeholders)
        for modality, placeholders in dummy["mm_placeholders"].items()
    }


def _encoder_budgets(
    scheduler_config: Any, max_toks_per_item: Mapping[str, int]
) -> tuple[int, int]:
    """``(compute budget, cache size)`` in tokens: the scheduler's settings, raised to at least
    one largest item (an item must always fit)."""
    if not max_toks_per_item:
        logger.warning(
            "All non-text modalities supported by the model have been explicitly disabled via "
            "limit_mm_per_prompt. Encoder cache will not be initialized."
        )
        return 0, 0
    largest = max(max_toks_per_item.values())
    if (
        scheduler_config.disable_chunked_mm_input
        and largest > scheduler_config.max_num_batched_tokens
    ):
        raise ValueError(
            f"Chunked MM input disabled but max_tokens_per_mm_item ({largest}) is larger than "
            f"max_num_batched_tokens ({scheduler_config.max_num_batched_tokens}). Please increase "
            "max_num_batched_tokens."
        )
    compute = max(int(scheduler_config.max_num_encoder_input_tokens), largest)
    cache_size = max(int(scheduler_config.encoder_cache_size), largest)
    return compute, cache_size


class MultiModalBudget:
    """The encoder's budgets and per-modality item limits for one model deployment.

    ``enable_cache`` builds a processor-only cache for the dummy-input runs, so processing them
    again (profiling) hits it; ``reset_cache`` drops it afterwards.
    """

    def __init__(self, vllm_config: Any, mm_registry: Any, *, enable_cache: bool = True) -> None:
        self.model_config = model_config = vllm_config.model_config
        self.scheduler_config = scheduler_config = vllm_config.scheduler_config
        self.max_model_len = max_model_len_of(model_config)
        self.max_num_reqs = int(scheduler_config.max_num_seqs)

        with set_default_torch_num_threads():  # a processor's own thread pool can hang startup
            self.cache = processor_only_cache_from_config(vllm_config) if enable_cache else None
            self.processor = processor = mm_registry.create_processor(model_config)
            mm_config = model_config.get_multimodal_config()
            embeds_enabled = mm_config is not None and bool(mm_config.enable_mm_embeds)
            supported = processor.info.supported_mm_limits
            self.mm_limits = limits = processor.info.allowed_mm_limits
            # The encoder tower sees the modalities a prompt may carry; with embeddings enabled,
            # a modality limited to 0 still arrives, as precomputed embeddings, and needs room in
            # the encoder cache.
            tower = {modality for modality in supported if limits.get(modality, 0) > 0}
            embed_only = {
                modality
                for modality in supported
                if embeds_enabled and limits.get(modality, 0) == 0
            }
            active = tower | embed_only
            all_max = get_mm_max_toks_per_item(
                processor, mm_counts=dict.fromkeys(active, 1), cache=self.cache
            )

        if embed_only:
            logger.info(
                "enable_mm_embeds is True; modalities handled as embedding-only: %s",
                tuple(sorted(embed_only)),
            )
        # Modalities sharing another's placeholders (audio inside a video) have no entry.
        active_max = {modality: all_max[modality] for modality in active if modality in all_max}
        self.encoder_compute_budget, self.encoder_cache_size = _encoder_budgets(
            scheduler_config, active_max
        )
        self.mm_max_toks_per_item: Mapping[str, int] = {
            modality: active_max[modality] for modality in tower if modality in active_max
        }
        per_prompt: dict[str, int] = {}
        per_batch: dict[str, int] = {}
        for modality, max_tokens in self.mm_max_toks_per_item.items():
            per_prompt[modality], per_batch[modality] = self._get_max_items(modality, max_tokens)
        self.mm_max_items_per_prompt: Mapping[str, int] = per_prompt
        self.mm_max_items_per_batch: Mapping[str, int] = per_batch

    def _get_max_items(self, modality: str, max_tokens_per_item: int) -> tuple[int, int]:
        """``(items per prompt, items per batch)`` for items of ``max_tokens_per_item`` tokens."""
        if max_tokens_per_item == 0:
            return 0, 0
        budget = self.get_encoder_budget()
        if budget == 0:
            return 0, 0
        by_encoder = budget // max_tokens_per_item
        per_prompt = max(
            1, min(self.mm_limits[modality], self.max_model_len // max_tokens_per_item)
        )
        max_num_reqs = self.max_num_reqs
        if not self.scheduler_config.enable_chunked_prefill:
            # Without chunking a request's whole prompt must fit one step.
            max_num_reqs = min(
                max_num_reqs, self.scheduler_config.max_num_batched_tokens // max_tokens_per_item
            )
        by_decoder = max_num_reqs * per_prompt
        return per_prompt, max(1, min(by_encoder, by_decoder))

    def get_modality_with_max_tokens(self) -> str:
        """The modality with the largest items (ties: the greater name)."""
        modality, _ = max(self.mm_max_toks_per_item.items(), key=lambda entry: (entry[1], entry[0]))
        return modality

    def get_encoder_budget(self) -> int:
        """Tokens the encoder may take per step: the smaller of its compute budget and cache."""
        return min(self.encoder_compute_budget, self.encoder_cache_size)

    def get_dummy_encoder_profile_inputs(
        self, modality: str | None = None, max_items_per_batch: int | None = None
    ) -> list[tuple[str, MultiModalKwargsItem]]:
        """A batch of largest items to profile the encoder with: ``max_items_per_batch`` copies
        of one dummy item of ``modality`` (default: the modality with the largest items, as many
        as a batch may hold); empty when the encoder has no budget."""
        if self.get_encoder_budget() <= 0 or not self.mm_max_toks_per_item:
            return []
        if modality is None:
            modality = self.get_modality_with_max_tokens()
        if max_items_per_batch is None:
            max_items_per_batch = self.mm_max_items_per_batch[modality]
        # One item processed once: the copies are the same object, as the batch's cost is the
        # encoder's, not the processor's. Passing the cache stores it without reading from it.
        dummy = self.processor.get_dummy_mm_inputs(mm_counts={modality: 1}, cache=self.cache)
        item = dummy["mm_kwargs"][modality][0]
        if item is None:
            raise RuntimeError(f"the dummy {modality} item came back as a cache hit, with no data")
        return [(modality, item)] * max_items_per_batch

    def reset_cache(self) -> None:
        """Drop what the dummy-input runs put in the cache."""
        if self.cache is not None:
            self.cache.clear_cache()


__all__ = [
    "BaseMultiModalProcessor",
    "MultiModalBudget",
    "MultiModalRegistry",
    "get_mm_max_toks_per_item",
]
