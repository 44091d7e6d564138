"""The multimodal processor: parsed media in, prompt token ids with placeholders and model inputs out.

A cached apply runs in two phases around a decode wait:

* :meth:`BaseMultiModalProcessor.apply_phase1` hashes the items (refs hash as their keys, so
  nothing decodes), looks the hashes up in the processor cache, and submits decodes of the
  misses to the media pool without joining them, so the worker that runs it stays free;
* :meth:`MultiModalApplyState.wait_decodes` (or ``_async``) drains those decodes off the worker;
* :meth:`BaseMultiModalProcessor.apply_phase2` re-derives the cache state (other requests ran in
  between), runs the HF processor on the misses, merges the cache, and applies prompt updates.

:meth:`BaseMultiModalProcessor.apply` (``apply(inputs, timing_ctx)``, as vLLM's renderer calls it)
is the synchronous composition of the same steps. This module is vLLM's public path and holds no
code: the processor is three levels, one per module, each complete over the ones below (the HF
call's stages in ``_hf_stages``, the prompt updates in ``_prompt_stages``, the flow in
``_base_processor``); vLLM's free functions over prompt updates come from :mod:`.prompt_updates`.
The item and input types vLLM's module imports from ``inputs``, ``parse`` and ``dummy_inputs``
are re-exported here as well.
"""

from __future__ import annotations

from mediaref.inputs import (
    MultiModalFieldConfig,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    MultiModalKwargsOptionalItems,
    PlaceholderRange,
)
from mediaref.parse import MultiModalDataItems, MultiModalUUIDItems
from mediaref.processing._apply_state import MultiModalApplyState
from mediaref.processing._base_processor import BaseMultiModalProcessor
from mediaref.processing._enc_dec_processor import (
    EncDecMultiModalProcessor,
    MultiModalEncDecInputs,
)
from mediaref.processing._fast_encode import cached_encode
from mediaref.processing._hf_stages import HFMultiModalInputs
from mediaref.processing._prompt.placeholders import (
    apply_matches_as_segments,
    apply_token_matches_with_placeholders,
)
from mediaref.processing._prompt_stages import MultiModalProcessingResult
from mediaref.processing._timing import ApplyTimings
from mediaref.processing.context import BaseProcessingInfo, TimingContext
from mediaref.processing.dummy_inputs import BaseDummyInputsBuilder, MultiModalDummyOptions
from mediaref.processing.inputs import ProcessorInputs
from mediaref.processing.prompt_updates import (
    MultiModalIsCached,
    MultiModalPromptUpdates,
    MultiModalPromptUpdatesApplyResult,
    PlaceholderFeaturesInfo,
    PromptIndex,
    PromptIndexTargets,
    PromptInsertion,
    PromptReplacement,
    PromptTargetMatch,
    PromptUpdate,
    PromptUpdateContent,
    PromptUpdateDetails,
    PromptUpdateInfo,
    PromptUpdateTarget,
    ResolvedPromptUpdate,
    UpdateMode,
    UpdateTarget,
    apply_token_matches,
    find_mm_placeholders,
    full_groupby_modality,
    iter_token_matches,
    replace_token_matches,
)

# vLLM's private functions of this module, which its own tests import.
_apply_matches = apply_matches_as_segments
_apply_token_matches_with_placeholders = apply_token_matches_with_placeholders

__all__ = [
    "ApplyTimings",
    "BaseDummyInputsBuilder",
    "BaseMultiModalProcessor",
    "BaseProcessingInfo",
    "EncDecMultiModalProcessor",
    "HFMultiModalInputs",
    "MultiModalApplyState",
    "MultiModalDataItems",
    "MultiModalDummyOptions",
    "MultiModalEncDecInputs",
    "MultiModalFieldConfig",
    "MultiModalIsCached",
    "MultiModalKwargsItem",
    "MultiModalKwargsItems",
    "MultiModalKwargsOptionalItems",
    "MultiModalProcessingResult",
    "MultiModalPromptUpdates",
    "MultiModalPromptUpdatesApplyResult",
    "MultiModalUUIDItems",
    "PlaceholderFeaturesInfo",
    "PlaceholderRange",
    "ProcessorInputs",
    "PromptIndex",
    "PromptIndexTargets",
    "PromptInsertion",
    "PromptReplacement",
    "PromptTargetMatch",
    "PromptUpdate",
    "PromptUpdateContent",
    "PromptUpdateDetails",
    "PromptUpdateInfo",
    "PromptUpdateTarget",
    "ResolvedPromptUpdate",
    "TimingContext",
    "UpdateMode",
    "UpdateTarget",
    "apply_token_matches",
    "cached_encode",
    "find_mm_placeholders",
    "full_groupby_modality",
    "iter_token_matches",
    "replace_token_matches",
]
