"""Multimodal processing: the processor, its model context and dummy inputs, prompt updates.

The package re-exports vLLM's ``vllm.multimodal.processing`` names, so a model file's
``from vllm.multimodal.processing import ...`` becomes ``from mediaref.processing import ...``.
"""

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

__all__ = [
    "BaseDummyInputsBuilder",
    "BaseMultiModalProcessor",
    "BaseProcessingInfo",
    "EncDecMultiModalProcessor",
    "InputProcessingContext",
    "ProcessorInputs",
    "PromptIndexTargets",
    "PromptInsertion",
    "PromptReplacement",
    "PromptUpdate",
    "PromptUpdateDetails",
    "TimingContext",
    "cached_encode",
]
