"""Batching processed items for the model, and tagging gathered embeddings with their modality."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import groupby

import torch

from mediaref.inputs import BatchedTensorInputs, MultiModalKwargsItem, batch_items


def group_and_batch_mm_items(
    items: Sequence[MultiModalKwargsItem],
    *,
    device: torch.types.Device = None,
    pin_memory: bool = False,
) -> Iterator[tuple[int, BatchedTensorInputs]]:
    """Runs of consecutive items (of any requests) that form one valid batch, each merged:
    ``(number of items, model kwargs)``.

    A run ends where the next item has other fields, fields of another kind, or another value in
    a shared field. The merged tensors go to ``device`` (pinned first when ``pin_memory``).
    """
    yield from batch_items(items, device=device, pin_memory=pin_memory)


def group_and_batch_mm_kwargs(
    mm_kwargs: Sequence[tuple[str, MultiModalKwargsItem]],
    *,
    device: torch.types.Device = None,
    pin_memory: bool = False,
) -> Iterator[tuple[str, int, BatchedTensorInputs]]:
    """:func:`group_and_batch_mm_items` over ``(modality, item)`` pairs, with a batch never
    spanning two modalities: ``(modality, number of items, model kwargs)``."""
    for modality, pairs in groupby(mm_kwargs, key=lambda pair: pair[0]):
        items = [item for _, item in pairs]
        for count, batch in batch_items(items, device=device, pin_memory=pin_memory):
            yield modality, count, batch


def set_mm_embedding_modality(embed: torch.Tensor, modality: str) -> torch.Tensor:
    """Tag ``embed`` (in place) with the modality it encodes; returns it."""
    embed.modality = modality  # type: ignore[attr-defined]
    return embed


def copy_mm_embedding_modality(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Tag ``dst`` with ``src``'s modality, when ``src`` has one; returns ``dst``."""
    modality = getattr(src, "modality", None)
    if modality is not None:
        dst.modality = modality  # type: ignore[attr-defined]
    return dst


def get_mm_embedding_modalities(multimodal_embeddings: Sequence[torch.Tensor]) -> list[str]:
    """The modality of each embedding, in order; ``ValueError`` naming the first untagged one."""
    modalities = []
    for index, embed in enumerate(multimodal_embeddings):
        modality = getattr(embed, "modality", None)
        if modality is None:
            raise ValueError(
                f"the multimodal embedding at index {index} has no modality: tag it with "
                "set_mm_embedding_modality when the encoder outputs are gathered"
            )
        modalities.append(str(modality))
    return modalities


__all__ = [
    "copy_mm_embedding_modality",
    "get_mm_embedding_modalities",
    "group_and_batch_mm_items",
    "group_and_batch_mm_kwargs",
    "set_mm_embedding_modality",
]
