"""The prompt half of a multimodal processor: the model's prompt updates resolved per item,
applied to the prompt's token ids, and checked so that every item found its place.

The hooks keep vLLM's names and signatures, so a model file overriding one (say
``_postprocess_prompt`` or ``_recompute_cached_prompt_update``) runs unchanged; the work is done by
the prompt-update package (:mod:`mediaref.processing._prompt`). This is the processor's second
level: it builds on the HF stages (``_hf_stages``) and needs nothing from the class above it.
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import NamedTuple, TypeVar

from mediaref.inputs import MultiModalHashes, MultiModalKwargsItems
from mediaref.parse import MultiModalDataItems
from mediaref.processing._fast_encode import encode_text
from mediaref.processing._hf_stages import HfProcessorStages
from mediaref.processing._prompt.apply import (
    apply_updates_via_text,
    check_item_counts,
    check_placeholders_survived,
    matched_updates,
)
from mediaref.processing._prompt.placeholders import apply_token_matches_with_placeholders
from mediaref.processing.context import BaseProcessingInfo
from mediaref.processing.inputs import ProcessorInputs
from mediaref.processing.prompt_updates import (
    MultiModalPromptUpdates,
    MultiModalPromptUpdatesApplyResult,
    PlaceholderFeaturesInfo,
    PromptUpdate,
    ResolvedPromptUpdate,
    TokenizerLike,
    apply_token_matches,
    find_mm_placeholders,
    resolve_prompt_updates,
)

_I = TypeVar("_I", bound=BaseProcessingInfo)


class MultiModalProcessingResult(NamedTuple):
    """What HF processing (cached or not) gives the prompt-update stage."""

    prompt_ids: list[int]
    kwargs: MultiModalKwargsItems
    """Per modality, each item's model inputs (None for an item the engine's cache holds)."""
    hashes: MultiModalHashes
    prompt_updates: MultiModalPromptUpdates


class PromptUpdateStages(HfProcessorStages[_I]):
    """Prompt updates: declared by the model, resolved per item, applied to the token ids."""

    @abstractmethod
    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        """The prompt updates of ``mm_items``, given their processed outputs."""

    def _get_mm_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> MultiModalPromptUpdates:
        updates = self._get_prompt_updates(
            mm_items=mm_items,
            hf_processor_mm_kwargs=hf_processor_mm_kwargs,
            out_mm_kwargs=out_mm_kwargs,
        )
        return self._bind_and_group_updates(updates, mm_items.get_all_counts())

    def _bind_and_group_updates(
        self, prompt_updates: Sequence[PromptUpdate], mm_item_counts: Mapping[str, int]
    ) -> MultiModalPromptUpdates:
        return resolve_prompt_updates(prompt_updates, mm_item_counts)

    def _recompute_cached_prompt_update(
        self, cached_update: ResolvedPromptUpdate, new_item_idx: int
    ) -> ResolvedPromptUpdate:
        """A cached item's update for its position in this request (override to recompute more
        than the item index)."""
        if cached_update.item_idx == new_item_idx:
            return cached_update
        return dataclasses.replace(cached_update, item_idx=new_item_idx)

    def _tokenize_prompt(self, inputs: ProcessorInputs) -> list[int]:
        if isinstance(inputs.prompt, str):
            tokenizer = self.info.get_tokenizer()
            token_ids = encode_text(tokenizer, inputs.prompt, **inputs.tokenization_kwargs)
        else:
            token_ids = list(inputs.prompt)
        return self._postprocess_prompt(token_ids)

    def _postprocess_prompt(self, prompt: list[int]) -> list[int]:
        """Prompt transforms the HF processor applies regardless of media (none by default)."""
        return prompt

    def _tokenizer(self) -> TokenizerLike | None:
        # The processing info's, as vLLM's text fallback asks it (a family may override
        # get_tokenizer; an info object need offer no more than that); None without one.
        ctx = getattr(self.info, "ctx", None)
        if ctx is not None and not ctx.has_tokenizer():
            return None
        tokenizer: TokenizerLike = self.info.get_tokenizer()
        return tokenizer

    def _find_mm_placeholders(
        self, new_token_ids: list[int], mm_prompt_updates: MultiModalPromptUpdates
    ) -> Mapping[str, list[PlaceholderFeaturesInfo]]:
        return find_mm_placeholders(new_token_ids, mm_prompt_updates, tokenizer=self._tokenizer())

    def _apply_token_matches(
        self, prompt: list[int], mm_prompt_updates: MultiModalPromptUpdates
    ) -> tuple[list[int], MultiModalPromptUpdatesApplyResult]:
        return apply_token_matches(prompt, mm_prompt_updates, tokenizer=self._tokenizer())

    def _apply_token_matches_with_placeholders(
        self, token_ids: list[int], mm_prompt_updates: MultiModalPromptUpdates
    ) -> tuple[
        list[int], MultiModalPromptUpdatesApplyResult, Mapping[str, list[PlaceholderFeaturesInfo]]
    ]:
        """The updates applied to the token ids: the new ids, which alternative each item used
        (None: its target was not found), and the placed items' placeholders. vLLM's model files
        override it (Gemma 3 merges the newlines it puts beside an image, as its tokenizer
        would), so :meth:`_apply_prompt_updates` goes through it, as vLLM's does."""
        return apply_token_matches_with_placeholders(
            token_ids, mm_prompt_updates, tokenizer=self._tokenizer()
        )

    def _matched_updates_from_result(
        self,
        mm_prompt_updates: MultiModalPromptUpdates,
        match_result: MultiModalPromptUpdatesApplyResult,
    ) -> dict[str, list[Sequence[ResolvedPromptUpdate]]]:
        """Each item's update as ``match_result`` chose it (every item must have matched)."""
        return matched_updates(mm_prompt_updates, match_result)

    def _apply_prompt_updates(
        self, token_ids: list[int], mm_prompt_updates: MultiModalPromptUpdates
    ) -> tuple[list[int], Mapping[str, list[PlaceholderFeaturesInfo]]]:
        """Apply the updates to the token ids, falling back to the decoded text for a target the
        tokenizer merged with its neighbours. A prompt lacking a placeholder for some item is a
        ``VLLMValidationError`` (400) naming the modality."""
        new_token_ids, match_result, placeholders = self._apply_token_matches_with_placeholders(
            token_ids, mm_prompt_updates
        )
        if all(idx is not None for idxs in match_result.values() for idx in idxs):
            return new_token_ids, {m: found for m, found in placeholders.items() if found}
        # The text fallback; what it placed is then found through _find_mm_placeholders, which a
        # model may override, as vLLM's fallback finds it.
        found_on_tokens = {
            m: sum(idx is not None for idx in idxs) for m, idxs in match_result.items()
        }
        new_token_ids, text_result = apply_updates_via_text(
            token_ids, mm_prompt_updates, self._tokenizer(), found_on_tokens
        )
        applied = self._matched_updates_from_result(mm_prompt_updates, text_result)
        found = self._find_mm_placeholders(new_token_ids, applied)
        check_placeholders_survived(found, applied)
        return new_token_ids, found

    def _validate_mm_kwargs(
        self, mm_kwargs: MultiModalKwargsItems, mm_item_counts: Mapping[str, int]
    ) -> None:
        check_item_counts(
            mm_kwargs,
            mm_item_counts,
            "Expected {count} {modality} item(s) in the processed keyword arguments, found "
            "{found}: the model's `_get_mm_fields_config` does not match what "
            "`_apply_hf_processor_main` returns.",
        )

    def _validate_mm_updates(
        self, mm_updates: MultiModalPromptUpdates, mm_item_counts: Mapping[str, int]
    ) -> None:
        check_item_counts(
            mm_updates,
            mm_item_counts,
            "Expected {count} prompt update(s) for {count} {modality} item(s), found {found}: "
            "the model's `_get_prompt_updates` gives no update for {modality}.",
        )

    def _validate_mm_placeholders(
        self,
        mm_placeholders: Mapping[str, list[PlaceholderFeaturesInfo]],
        mm_item_counts: Mapping[str, int],
    ) -> None:
        check_item_counts(
            mm_placeholders,
            mm_item_counts,
            "Expected {count} prompt placeholder(s) for {count} {modality} item(s), found {found}.",
        )

    def _maybe_apply_prompt_updates(
        self, mm_items: MultiModalDataItems, mm_res: MultiModalProcessingResult
    ) -> tuple[list[int], Mapping[str, list[PlaceholderFeaturesInfo]]]:
        counts = mm_items.get_all_counts()
        self._validate_mm_kwargs(mm_res.kwargs, counts)
        self._validate_mm_updates(mm_res.prompt_updates, counts)
        prompt_ids, placeholders = self._apply_prompt_updates(
            mm_res.prompt_ids, mm_res.prompt_updates
        )
        self._validate_mm_placeholders(placeholders, counts)
        return prompt_ids, placeholders


__all__ = ["MultiModalProcessingResult", "PromptUpdateStages"]
