"""A tracker's loaded items as the renderer takes them: ``mm_data`` and ``mm_uuids`` per modality.

Embedding items join their modality (``image_embeds`` -> ``"image"``), merged into one batch; a
modality may come as raw media or as embeddings in one request, not both. ``vision_chunk`` items
become chunks. ``prompt_embeds`` pass through, without UUIDs. Every other modality is the list of
its items (``None`` for an item the client gave by UUID only) with the list of their UUIDs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.renderers.chat_utils._embeds import ProcessorSource, merge_embeds
from mediaref.renderers.chat_utils._vision_chunk import build_vision_chunks

_RAW_MODALITIES = ("image", "audio", "video")
_KNOWN = frozenset(
    {*_RAW_MODALITIES, *(f"{m}_embeds" for m in _RAW_MODALITIES), "vision_chunk", "prompt_embeds"}
)


def resolve_tracked_items(
    items: Mapping[str, Sequence[tuple[object, str | None]]],
    processor_source: ProcessorSource,
    modality_order: Mapping[str, Sequence[str]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(mm_data, mm_uuids)`` from each modality's ``(item, uuid)`` pairs, in request order."""
    for modality in _RAW_MODALITIES:
        if modality in items and f"{modality}_embeds" in items:
            raise VLLMValidationError(
                f"Mixing raw {modality} and embedding inputs is not allowed",
                parameter=f"{modality}_embeds",
            )
    mm_data: dict[str, Any] = {}
    mm_uuids: dict[str, Any] = {}
    for modality in _RAW_MODALITIES:
        for stored in (f"{modality}_embeds", modality):
            pairs = items.get(stored)
            if pairs is None:
                continue
            values = [data for data, _ in pairs]
            if stored != modality:
                mm_data[modality] = merge_embeds(modality, values, processor_source)
            else:
                mm_data[modality] = values
            mm_uuids[modality] = [uuid for _, uuid in pairs]
    if "vision_chunk" in items:
        chunks, uuids = build_vision_chunks(
            items["vision_chunk"], modality_order.get("vision_chunk", ()), processor_source()
        )
        mm_data["vision_chunk"] = chunks
        mm_uuids["vision_chunk"] = uuids
    if "prompt_embeds" in items:
        mm_data["prompt_embeds"] = [data for data, _ in items["prompt_embeds"]]
    for modality, pairs in items.items():  # a modality of the model's own, added directly
        if modality not in _KNOWN:
            mm_data[modality] = [data for data, _ in pairs]
            mm_uuids[modality] = [uuid for _, uuid in pairs]
    return mm_data, mm_uuids


__all__ = ["resolve_tracked_items"]
