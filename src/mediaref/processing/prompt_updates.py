"""Prompt updates: how a model's placeholder tokens get into the prompt, and where they end up.

A model declares its updates (:class:`PromptReplacement`, :class:`PromptInsertion`, targets from
:class:`PromptIndexTargets`, content as :class:`PromptUpdateDetails`); the processor resolves them
per item (:func:`resolve_prompt_updates`, or a cached item's own :class:`ResolvedPromptUpdate`)
and then either

- applies them to prompt token ids it tokenized itself (:func:`apply_prompt_updates`), or
- finds them where the HF processor already applied them (:func:`find_mm_placeholders`, which
  describes each item as a :class:`PlaceholderFeaturesInfo`, as vLLM's does).

vLLM's token-level functions (:func:`apply_token_matches`, :func:`iter_token_matches`,
:func:`replace_token_matches`) are here too, over the same walks.

This module is the public path and holds no code: the implementation is the private package
``mediaref.processing._prompt`` (one module per step, described in its docstring).
"""

from __future__ import annotations

from mediaref.processing._prompt.apply import (
    apply_prompt_updates,
    apply_prompt_updates_with_placeholders,
)
from mediaref.processing._prompt.codec import PromptSeq, TokenizerLike
from mediaref.processing._prompt.details import (
    IsEmbedFn,
    PromptIndex,
    PromptIndexTargets,
    PromptUpdateDetails,
)
from mediaref.processing._prompt.placeholders import (
    MultiModalIsCached,
    MultiModalPromptUpdatesApplyResult,
    PlaceholderFeaturesInfo,
    apply_token_matches,
    find_mm_placeholders,
    full_groupby_modality,
    iter_token_matches,
    replace_token_matches,
)
from mediaref.processing._prompt.placement import MultiModalPromptUpdates
from mediaref.processing._prompt.updates import (
    PromptInsertion,
    PromptReplacement,
    PromptTargetMatch,
    PromptUpdate,
    PromptUpdateContent,
    PromptUpdateInfo,
    PromptUpdateTarget,
    ResolvedPromptUpdate,
    UpdateMode,
    UpdateTarget,
    resolve_prompt_updates,
)

__all__ = [
    "IsEmbedFn",
    "MultiModalIsCached",
    "MultiModalPromptUpdates",
    "MultiModalPromptUpdatesApplyResult",
    "PlaceholderFeaturesInfo",
    "PromptIndex",
    "PromptIndexTargets",
    "PromptInsertion",
    "PromptReplacement",
    "PromptSeq",
    "PromptTargetMatch",
    "PromptUpdate",
    "PromptUpdateContent",
    "PromptUpdateDetails",
    "PromptUpdateInfo",
    "PromptUpdateTarget",
    "ResolvedPromptUpdate",
    "TokenizerLike",
    "UpdateMode",
    "UpdateTarget",
    "apply_prompt_updates",
    "apply_prompt_updates_with_placeholders",
    "apply_token_matches",
    "find_mm_placeholders",
    "full_groupby_modality",
    "iter_token_matches",
    "replace_token_matches",
    "resolve_prompt_updates",
]
