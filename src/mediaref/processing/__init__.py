"""Multimodal processing: the processor, its model context and dummy inputs, prompt updates,
and the token layout (:class:`TokenLayout`) a request's ids, placeholders and positions derive from.

The package re-exports vLLM's ``vllm.multimodal.processing`` names, so a model file's
``from vllm.multimodal.processing import ...`` becomes ``from mediaref.processing import ...``.
:func:`set_multimodal_model_support` is how the registry, above this package, answers
``ModelConfig.is_multimodal_model``.
"""

from mediaref.processing._model_config import set_multimodal_model_support
from mediaref.processing.context import BaseProcessingInfo, InputProcessingContext, TimingContext
from mediaref.processing.dummy_inputs import BaseDummyInputsBuilder
from mediaref.processing.inputs import ProcessorInputs
from mediaref.processing.processor import (
    BaseMultiModalProcessor,
    EncDecMultiModalProcessor,
    PromptIndexTargets,
    PromptInsertion,
    PromptReplacement,
    PromptUpdate,
    PromptUpdateDetails,
    cached_encode,
)
from mediaref.processing.token_layout import MediaSpan, TextSpan, TokenLayout

__all__ = [
    "BaseDummyInputsBuilder",
    "BaseMultiModalProcessor",
    "BaseProcessingInfo",
    "EncDecMultiModalProcessor",
    "InputProcessingContext",
    "MediaSpan",
    "ProcessorInputs",
    "PromptIndexTargets",
    "PromptInsertion",
    "PromptReplacement",
    "PromptUpdate",
    "PromptUpdateDetails",
    "TextSpan",
    "TimingContext",
    "TokenLayout",
    "cached_encode",
    "set_multimodal_model_support",
]
