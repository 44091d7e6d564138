"""Calling the HF processor on multimodal items, in four overridable stages (vLLM's signatures).

1. :meth:`HfProcessorStages._get_hf_mm_inputs` extracts the processor data and passthrough data
   (:class:`HFMultiModalInputs`), renames vLLM's ``audios`` to HF's ``audio``, and adds the dummy
   text when the family needs one (:meth:`~HfProcessorStages._get_hf_mm_text`; none by default),
   with ``truncation=False`` attached only to calls that carry dummy text.
2. :meth:`HfProcessorStages._call_hf_processor` invokes the HF processor through the context.
3. :meth:`HfProcessorStages._finalize_hf_mm_data` merges passthrough fields into the output,
   creating an empty output when nothing went through the processor, then runs
4. :meth:`HfProcessorStages._postprocess_hf_mm_data`, the model-specific output transform.

:meth:`HfProcessorStages._apply_hf_processor_main` composes them, and the model's
``_get_mm_fields_config`` says how the output splits into items. Most models override one stage.
This class is the first of the processor's three levels (then ``_prompt_stages``, then
``_base_processor``, each complete over the ones below): it needs nothing from the levels above.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from mediaref.processing.context import BaseProcessingInfo
from mediaref.processing.dummy_inputs import BaseDummyInputsBuilder

if TYPE_CHECKING:
    from transformers import BatchFeature

    from mediaref.inputs import MultiModalFieldConfig
    from mediaref.parse import MultiModalDataItems

_I = TypeVar("_I", bound=BaseProcessingInfo)


class HFMultiModalInputs(NamedTuple):
    """What the HF call receives, and what bypasses it."""

    hf_data: dict[str, object]
    """The data arguments (``images=``, ``audio=``..., ``text=`` when there is dummy text)."""

    hf_kwargs: Mapping[str, object]
    """The other arguments."""

    passthrough_data: dict[str, object]
    """Fields put into the output as they are (precomputed embeddings)."""


class HfProcessorStages(ABC, Generic[_I]):
    """The HF call of a multimodal processor (see the module docstring for the stages)."""

    def __init__(self, info: _I, dummy_inputs: BaseDummyInputsBuilder[_I]) -> None:
        self.info = info
        self.dummy_inputs = dummy_inputs

    def _get_hf_mm_text(self, mm_counts: Mapping[str, int]) -> str | None:
        """The text to call the HF processor with: none by default. A family whose HF processor
        insists on text with one placeholder per item returns
        ``self.dummy_inputs.get_dummy_text(mm_counts)``."""
        return None

    def _get_hf_mm_inputs(
        self, mm_items: MultiModalDataItems, hf_kwargs: Mapping[str, object]
    ) -> HFMultiModalInputs:
        hf_data: dict[str, object] = {}
        passthrough_data: dict[str, object] = {}
        processed_counts: dict[str, int] = {}
        for modality, items in mm_items.items():
            if items.get_count() == 0:
                continue
            item_data = items.get_processor_data()
            if item_data:
                processed_counts[modality] = items.get_count()
            hf_data.update(item_data)
            passthrough_data.update(items.get_passthrough_data())
        if hf_data:
            # Counted: the items the HF processor sees. Embeddings bypass it, so a placeholder
            # for them in the dummy text would have no media to go with.
            text = self._get_hf_mm_text(processed_counts)
            if text is not None:
                hf_data = {"text": text, **hf_data}
                # The dummy text must never be cut: truncation would drop placeholders.
                hf_kwargs = {"truncation": False, **hf_kwargs}
        if "audios" in hf_data:
            # vLLM's parse layer says "audios"; HF processors take the standard "audio" keyword.
            hf_data["audio"] = hf_data.pop("audios")
        return HFMultiModalInputs(hf_data, hf_kwargs, passthrough_data)

    def _call_hf_processor(
        self, hf_data: Mapping[str, object], hf_kwargs: Mapping[str, object]
    ) -> BatchFeature:
        """Call the HF processor on the normalized inputs."""
        return self.info.ctx.call_hf_processor(
            self.info.get_hf_processor(**hf_kwargs), hf_data, hf_kwargs
        )

    def _postprocess_hf_mm_data(
        self,
        mm_inputs: Mapping[str, object],
        hf_processor_mm_kwargs: Mapping[str, object],
        processed_data: BatchFeature,
    ) -> BatchFeature:
        """The combined processor and passthrough output, transformed (as it is by default)."""
        return processed_data

    def _finalize_hf_mm_data(
        self,
        hf_data: Mapping[str, object],
        hf_kwargs: Mapping[str, object],
        passthrough_data: Mapping[str, object],
        processed_data: BatchFeature | None = None,
    ) -> BatchFeature:
        """Merge the passthrough fields, then run the model's postprocessing."""
        if processed_data is None:
            from transformers import BatchFeature

            processed_data = BatchFeature()
        processed_data.update(passthrough_data)
        return self._postprocess_hf_mm_data(hf_data, hf_kwargs, processed_data)

    def _apply_hf_processor_main(
        self, mm_items: MultiModalDataItems, hf_kwargs: Mapping[str, object]
    ) -> BatchFeature:
        """The processed multimodal data of ``mm_items`` (text outputs are the caller's to drop)."""
        hf_data, hf_kwargs, passthrough_data = self._get_hf_mm_inputs(mm_items, hf_kwargs)
        processed = self._call_hf_processor(hf_data, hf_kwargs) if hf_data else None
        return self._finalize_hf_mm_data(hf_data, hf_kwargs, passthrough_data, processed)

    def _get_layout_hf_inputs(
        self, mm_items: MultiModalDataItems, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, Any] | None:
        """The HF outputs this model's prompt updates read (Qwen2-VL's grids), from the items'
        headers with nothing decoded; None, the default: they need the pixels (mediaref, see
        :mod:`mediaref.processing.layout`)."""
        return None

    @abstractmethod
    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        """How each HF output field batches its items."""


__all__ = ["HFMultiModalInputs", "HfProcessorStages"]
