"""A request's precomputed embeddings, one content part per item, merged into one batch.

The processor takes a modality's embeddings as one batch: a tensor (or list of tensors) of
``image_embeds``, or a dict of batched fields (Qwen2-VL's ``image_embeds`` with
``image_grid_thw``). Each field is merged the way its values allow — stacked when every item's
value has one shape, concatenated along the first dimension otherwise (bare tensors of different
shapes stay a list, one per item) — and then, where the
model's processor says how a field batches, the way it says: two Qwen2-VL images with the same
token count must still be concatenated, since their ``image_embeds`` batch flat.

Numeric JSON arrays in a dict are metadata (a grid, a size): they become tensors, int64 when
every number is an integer, else float64. Only the keys the model's data parser declares as
metadata (``placeholder_metadata_fields``) may be arrays.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate, pairwise
from typing import Any, cast

import torch
from transformers import BatchFeature

from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import (
    BaseMultiModalField,
    MultiModalBatchedField,
    MultiModalFlatField,
    MultiModalSharedField,
)

logger = logging.getLogger(__name__)

ProcessorSource = Callable[[], Any]
"""The model's multimodal processor, built on first use (only embeddings and chunks need it)."""


class _SingleItemBatch(MultiModalSharedField):
    """A lone ``(1, tokens, hidden)`` tensor: the old way of sending one batched item."""


def _detect_field(tensors: Sequence[torch.Tensor], hidden_size: int | None) -> BaseMultiModalField:
    first = tensors[0]
    if (
        len(tensors) == 1
        and first.ndim == 3
        and first.shape[0] == 1
        and first.shape[-1] == hidden_size
    ):
        logger.warning(
            "Batched multi-modal embedding inputs are deprecated for the chat API; send a "
            "separate content part for each item."
        )
        return _SingleItemBatch(batch_size=1)
    if all(tensor.shape == first.shape for tensor in tensors):
        return MultiModalBatchedField()
    bounds = [0, *accumulate(len(tensor) for tensor in tensors)]
    return MultiModalFlatField(slices=[slice(a, b) for a, b in pairwise(bounds)])


def _hidden_size(processor: Any) -> int | None:
    hf_config = processor.info.get_hf_config()
    get_text_config = getattr(hf_config, "get_text_config", None)
    text_config = get_text_config() if callable(get_text_config) else hf_config
    value = getattr(text_config, "hidden_size", None)
    return value if isinstance(value, int) else None


def _merge(items: list[dict[str, Any]], processor: Any) -> dict[str, Any]:
    keys = set(items[0])
    if any(set(item) != keys for item in items[1:]):
        raise VLLMValidationError(
            "All dictionaries in the list of embeddings must have the same keys."
        )
    hidden_size = _hidden_size(processor)
    fields = {key: _detect_field([item[key] for item in items], hidden_size) for key in keys}
    merged = {
        key: field._reduce_data([item[key] for item in items], pin_memory=False)
        for key, field in fields.items()
    }
    try:
        configured = processor._get_mm_fields_config(BatchFeature(merged), {})
        for key in keys:
            field = configured[key].field if key in configured else fields[key]
            if type(field) is not type(fields[key]) and not isinstance(
                fields[key], _SingleItemBatch
            ):
                merged[key] = field._reduce_data([item[key] for item in items], pin_memory=False)
    except Exception:
        # The processor could not describe these fields (a key it does not know, say): the
        # merge by shape stands, and the processor will say what is wrong with it.
        logger.exception("could not read the processor's fields for merged embeddings")
    return merged


def parse_metadata_array(key: str, value: list[Any], allowed: set[str]) -> torch.Tensor:
    """A JSON array given for an embedding's metadata field (a grid, a size) as a tensor: only
    for ``allowed`` keys, only a flat list of finite numbers (vLLM's rule: nested lists, booleans
    and strings are refused, so nothing recurses over a hostile depth), int64 unless a float is
    in it."""
    if key not in allowed:
        raise VLLMValidationError(f"JSON arrays are only supported for metadata: {key}")
    numbers = isinstance(value, list) and all(
        type(v) is int or (type(v) is float and math.isfinite(v)) for v in value
    )
    if not numbers:
        raise VLLMValidationError(f"Metadata {key} must be a finite numeric array.")
    dtype = torch.float64 if any(isinstance(v, float) for v in value) else torch.int64
    try:
        return torch.tensor(value, dtype=dtype)
    except (ValueError, TypeError, OverflowError, RuntimeError) as exc:  # out of int64's range
        raise VLLMValidationError(f"Invalid metadata array: {key}") from exc


def _metadata_fields(processor: Any, modality: str) -> set[str]:
    return set(processor.info.data_parser.placeholder_metadata_fields(modality))


def merge_embeds(modality: str, values: list[object], processor_source: ProcessorSource) -> object:
    """One modality's embedding items (tensors, dicts, or None for UUID-only) as one batch."""
    if not values or all(value is None for value in values):
        return values
    if all(isinstance(value, torch.Tensor) for value in values):
        tensors = cast("list[torch.Tensor]", values)
        if any(tensor.shape != tensors[0].shape for tensor in tensors):
            # Ragged bare tensors: concatenated, nothing would tell the items apart again
            # (vLLM concatenates them); a list keeps one tensor per item, as the parser takes it.
            return tensors
        key = f"{modality}_embeds"
        return _merge([{key: value} for value in tensors], processor_source())[key]
    if all(isinstance(value, Mapping) for value in values):
        processor = processor_source()
        allowed = _metadata_fields(processor, modality)
        items = [
            {
                key: parse_metadata_array(key, entry, allowed) if isinstance(entry, list) else entry
                for key, entry in cast("Mapping[str, Any]", value).items()
            }
            for value in values
        ]
        return _merge(items, processor)
    raise VLLMValidationError(
        f"{modality} embeddings of one request must all be tensors, all dicts, or all given by "
        "UUID only",
        parameter=f"{modality}_embeds",
    )


__all__ = ["ProcessorSource", "merge_embeds"]
