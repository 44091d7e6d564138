"""A request's layout from its items' headers: the token ids, placeholders and hashes of a full
render, with no medium decoded, no HF call, and the processor cache neither read nor written.

A router (llm-d's precise prefix-cache routing) asks a render server only for a request's
``token_ids``, ``mm_hashes`` and ``mm_placeholders`` (``mm_payload: "none"``). Where a model can
tell from an item's header what its prompt updates read (Qwen2-VL's images: the grid, from the
size through ``smart_resize``; the model's ``_get_layout_hf_inputs``), those fields need no pixel:
:func:`apply_layout` builds the items' layout fields and hands them to the processor's own stages
(the same hashing, tokenization, prompt updates and placeholder search a full render runs), so
its answer is the full render's for every item that decodes.

What it cannot see is a payload whose header parses and whose pixels do not: a full render
refuses it (422), the layout does not look (``docs/compat.md``). Its ``mm_kwargs`` carry only the
layout fields, never the processed tensors: the caller must not send them as an item's data.
"""

from __future__ import annotations

from typing import Any

from mediaref.inputs import MultiModalInputs, build_kwargs_items
from mediaref.processing._base_processor import BaseMultiModalProcessor
from mediaref.processing._prompt_stages import MultiModalProcessingResult
from mediaref.processing.inputs import ProcessorInputs

__all__ = ["apply_layout"]


def apply_layout(
    processor: BaseMultiModalProcessor[Any], inputs: ProcessorInputs
) -> MultiModalInputs | None:
    """``inputs`` rendered from its items' headers (see the module docstring); None when the
    model needs an item's pixels to place it, or ``inputs`` holds no item."""
    items = inputs.mm_data_items
    if not items.get_all_counts():
        return None
    hf_kwargs = inputs.hf_processor_mm_kwargs
    layout = processor._get_layout_hf_inputs(items, hf_kwargs)
    if layout is None:
        return None
    from transformers import BatchFeature  # loaded already: the processor is built on it

    outputs = BatchFeature(dict(layout))
    kwargs = build_kwargs_items(outputs, processor._get_mm_fields_config(outputs, hf_kwargs))
    result = MultiModalProcessingResult(
        processor._tokenize_prompt(inputs),
        kwargs,
        processor._get_mm_hashes(inputs),
        processor._get_mm_prompt_updates(items, hf_kwargs, kwargs),
    )
    return processor._inputs_with_prompt_updates(inputs, result)
