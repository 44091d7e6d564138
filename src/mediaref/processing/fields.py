"""How an HF processor's batched output splits into per-item model inputs.

The processor cache stores items, not batches: a cached image must be merged with a fresh one into
the same request. Each output field says how it was batched — one row per item (``batched``),
items' rows concatenated (``flat``, e.g. Qwen2-VL's patches), or one value for every item
(``shared``) — so the batch can be cut into items and put back together unchanged.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mediaref.inputs import (
    FieldKind,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
)


@dataclass(frozen=True)
class MultiModalFieldConfig:
    """The batching of one HF output field for one modality."""

    modality: str
    kind: FieldKind
    slices: tuple[slice, ...] | None = None
    batch_size: int | None = None

    @staticmethod
    def batched(modality: str) -> MultiModalFieldConfig:
        """Item ``i`` is row ``i`` of the field."""
        return MultiModalFieldConfig(modality, "batched")

    @staticmethod
    def flat(modality: str, slices: Sequence[slice]) -> MultiModalFieldConfig:
        """Item ``i`` is ``field[slices[i]]`` along dim 0."""
        return MultiModalFieldConfig(modality, "flat", slices=tuple(slices))

    @staticmethod
    def flat_from_sizes(
        modality: str, size_per_item: torch.Tensor | Sequence[int]
    ) -> MultiModalFieldConfig:
        """Item ``i`` holds ``size_per_item[i]`` consecutive rows."""
        sizes = [int(s) for s in size_per_item]
        if any(s < 0 for s in sizes):
            raise ValueError(f"item sizes must be non-negative, got {sizes}")
        bounds = [0]
        for size in sizes:
            bounds.append(bounds[-1] + size)
        return MultiModalFieldConfig.flat(
            modality, [slice(a, b) for a, b in itertools.pairwise(bounds)]
        )

    @staticmethod
    def shared(modality: str, batch_size: int) -> MultiModalFieldConfig:
        """Every one of the ``batch_size`` items sees the whole field."""
        return MultiModalFieldConfig(modality, "shared", batch_size=batch_size)

    def build_elems(self, key: str, batch: Any) -> list[MultiModalFieldElem]:
        if self.kind == "batched":
            rows = list(batch) if not isinstance(batch, torch.Tensor) else list(batch.unbind(0))
            return [MultiModalFieldElem(self.modality, key, row, "batched") for row in rows]
        if self.kind == "flat":
            assert self.slices is not None
            total = len(batch)
            # No items must mean no rows too: otherwise the rows would be dropped silently.
            covered = self.slices[-1].stop if self.slices else 0
            if covered != total:
                raise ValueError(f"field {key!r}: item sizes cover {covered} rows of {total}")
            return [MultiModalFieldElem(self.modality, key, batch[s], "flat") for s in self.slices]
        assert self.batch_size is not None
        return [MultiModalFieldElem(self.modality, key, batch, "shared")] * self.batch_size


def build_kwargs_items(
    hf_inputs: Mapping[str, Any], fields_config: Mapping[str, MultiModalFieldConfig]
) -> MultiModalKwargsItems:
    """Cut the HF output into per-item :class:`MultiModalKwargsItem` s, grouped by modality.

    Fields without a config (``input_ids``, ``attention_mask`` from the dummy text) are dropped.
    """
    elems_by_modality: dict[str, list[list[MultiModalFieldElem]]] = {}
    for key, config in fields_config.items():
        if key not in hf_inputs:
            continue
        elems = config.build_elems(key, hf_inputs[key])
        per_item = elems_by_modality.setdefault(config.modality, [[] for _ in elems])
        if len(per_item) != len(elems):
            raise ValueError(
                f"field {key!r} has {len(elems)} {config.modality} items, other fields have {len(per_item)}"
            )
        for item_elems, elem in zip(per_item, elems, strict=True):  # lengths checked above
            item_elems.append(elem)
    return MultiModalKwargsItems(
        {
            modality: [MultiModalKwargsItem.from_elems(elems) for elems in items]
            for modality, items in elems_by_modality.items()
        }
    )


__all__ = ["MultiModalFieldConfig", "build_kwargs_items"]
