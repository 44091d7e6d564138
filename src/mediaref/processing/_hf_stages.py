"""Calling the HF processor on multimodal items, in four overridable stages.

1. :meth:`HfProcessorStages._get_hf_mm_inputs` extracts and normalizes processor data, kwargs and
   passthrough data, renames ``audios`` to HF's ``audio``, and adds the dummy text (with
   ``truncation=False``, attached only to calls that carry dummy text).
2. :meth:`HfProcessorStages._call_hf_processor` invokes the HF processor.
3. :meth:`HfProcessorStages._finalize_hf_mm_data` merges passthrough fields into the output,
   creating an empty output when nothing went through the processor.
4. :meth:`HfProcessorStages._postprocess_hf_mm_data` applies model-specific output transforms.

:meth:`HfProcessorStages._apply_hf_processor_main` composes them. Most models override one stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from mediaref.processing.context import BaseProcessingInfo

if TYPE_CHECKING:
    from transformers import BatchFeature

    from mediaref.parse import MultiModalDataItems
    from mediaref.processing.dummy_inputs import BaseDummyInputsBuilder

_I = TypeVar("_I", bound=BaseProcessingInfo)


@dataclass
class HfMMInputs:
    """What the HF call receives: text (dummy or none), media, and kwargs; plus passthrough data."""

    text: str | None
    mm_data: dict[str, Any]
    mm_kwargs: dict[str, Any]
    tok_kwargs: dict[str, Any]
    passthrough_data: dict[str, Any] = field(default_factory=dict)


class HfProcessorStages(Generic[_I]):
    """The HF-call half of a multimodal processor (see the module docstring for the stages)."""

    info: _I
    dummy_inputs: BaseDummyInputsBuilder[_I]

    def _get_hf_mm_text(self, mm_counts: Mapping[str, int]) -> str | None:
        """The text to call the HF processor with: one dummy placeholder per item."""
        return self.dummy_inputs.get_dummy_text(mm_counts)

    def _get_hf_mm_inputs(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        tokenization_kwargs: Mapping[str, object],
    ) -> HfMMInputs:
        processor_data: dict[str, Any] = {}
        passthrough_data: dict[str, Any] = {}
        processed_counts: dict[str, int] = {}
        for modality, items in mm_items.items():
            item_data = items.get_processor_data()
            if item_data:
                processed_counts[modality] = items.get_count()
            processor_data.update(item_data)
            passthrough_data.update(items.get_passthrough_data())
        if "audios" in processor_data:
            # vLLM's parse layer says "audios"; HF processors take the standard "audio" keyword.
            processor_data["audio"] = processor_data.pop("audios")

        tok_kwargs = dict(tokenization_kwargs)
        text = None
        if processor_data:
            text = self._get_hf_mm_text(processed_counts)
            if text is not None:
                # The dummy text must never be cut: truncation would drop placeholders.
                tok_kwargs["truncation"] = False
        return HfMMInputs(
            text, processor_data, dict(hf_processor_mm_kwargs), tok_kwargs, passthrough_data
        )

    def _call_hf_processor(
        self,
        prompt: str | None,
        mm_data: Mapping[str, object],
        mm_kwargs: Mapping[str, object],
        tok_kwargs: Mapping[str, object],
    ) -> BatchFeature:
        hf_processor = self.info.get_hf_processor()
        call_kwargs: dict[str, Any] = {**mm_data, **mm_kwargs, **tok_kwargs, "return_tensors": "pt"}
        if prompt is not None:
            call_kwargs["text"] = prompt
        outputs: BatchFeature = hf_processor(**call_kwargs)
        return outputs

    def _finalize_hf_mm_data(
        self, processed: BatchFeature | None, passthrough_data: Mapping[str, object]
    ) -> BatchFeature:
        from transformers import BatchFeature

        output = processed if processed is not None else BatchFeature()
        output.update(passthrough_data)
        return output

    def _postprocess_hf_mm_data(
        self, processed: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> BatchFeature:
        return processed

    def _apply_hf_processor_main(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        tokenization_kwargs: Mapping[str, object],
    ) -> BatchFeature:
        """The processed multimodal data of ``mm_items`` (text outputs are the caller's to drop)."""
        hf_inputs = self._get_hf_mm_inputs(mm_items, hf_processor_mm_kwargs, tokenization_kwargs)
        processed = None
        if hf_inputs.mm_data:
            processed = self._call_hf_processor(
                hf_inputs.text, hf_inputs.mm_data, hf_inputs.mm_kwargs, hf_inputs.tok_kwargs
            )
        finalized = self._finalize_hf_mm_data(processed, hf_inputs.passthrough_data)
        return self._postprocess_hf_mm_data(finalized, hf_processor_mm_kwargs)


__all__ = ["HfMMInputs", "HfProcessorStages"]
