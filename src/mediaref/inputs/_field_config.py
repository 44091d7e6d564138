"""``MultiModalFieldConfig``: which modality an HF output field belongs to, and how it batches.

A model's processor declares one per output field (``_get_mm_fields_config``); the processor cuts
the HF batch into per-item elements with it (see :mod:`mediaref.inputs._fields`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mediaref.inputs._fields import (
    BaseMultiModalField,
    MultiModalBatchedField,
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalSharedField,
)
from mediaref.inputs._nested import NestedTensors


@dataclass(frozen=True)
class MultiModalFieldConfig:
    """How one HF output field batches (``field``), and which modality's items it belongs to."""

    field: BaseMultiModalField
    modality: str

    @staticmethod
    def batched(modality: str, *, keep_on_cpu: bool = False) -> MultiModalFieldConfig:
        """Item ``i`` is row ``i`` of the field: ``[A, B, C]`` -> ``A``, ``B``, ``C``."""
        return MultiModalFieldConfig(MultiModalBatchedField(keep_on_cpu=keep_on_cpu), modality)

    @staticmethod
    def flat(
        modality: str,
        slices: Sequence[slice] | Sequence[Sequence[slice]],
        dim: int = 0,
        *,
        keep_on_cpu: bool = False,
    ) -> MultiModalFieldConfig:
        """Item ``i`` is ``field[slices[i]]``: with slices ``[0:3], [3:7], [7:9]``, the rows
        ``AAABBBBCC`` give ``AAA``, ``BBBB``, ``CC``. For ``dim > 0`` each entry is a tuple of
        slices, ``slice(None)`` for the leading dimensions."""
        return MultiModalFieldConfig(
            MultiModalFlatField(slices, dim, keep_on_cpu=keep_on_cpu), modality
        )

    @staticmethod
    def flat_from_sizes(
        modality: str,
        size_per_item: torch.Tensor | Sequence[int],
        dim: int = 0,
        *,
        keep_on_cpu: bool = False,
    ) -> MultiModalFieldConfig:
        """:meth:`flat` where item ``i`` holds the next ``size_per_item[i]`` entries along
        ``dim`` (sizes ``[3, 4, 2]``: ``AAABBBBCC`` -> ``AAA``, ``BBBB``, ``CC``).

        ``size_per_item`` is a 1-D tensor (or a sequence of ints) of non-negative sizes.
        """
        sizes = (
            torch.as_tensor(size_per_item)
            if not isinstance(size_per_item, torch.Tensor)
            else size_per_item
        )
        if sizes.ndim != 1:
            raise ValueError(
                f"size_per_item should be a 1-D tensor, but found shape: {tuple(sizes.shape)}"
            )
        counts = [int(size) for size in sizes.tolist()]
        if any(count < 0 for count in counts):
            raise ValueError(f"item sizes must be non-negative, got {counts}")
        bounds = [0, *itertools.accumulate(counts)]
        leading = (slice(None),) * dim
        slices = [(*leading, slice(a, b)) for a, b in itertools.pairwise(bounds)]
        return MultiModalFieldConfig.flat(modality, slices, dim, keep_on_cpu=keep_on_cpu)

    @staticmethod
    def shared(
        modality: str, batch_size: int, *, keep_on_cpu: bool = False
    ) -> MultiModalFieldConfig:
        """Every one of ``batch_size`` items sees the whole field."""
        return MultiModalFieldConfig(
            MultiModalSharedField(batch_size, keep_on_cpu=keep_on_cpu), modality
        )

    def build_elems(self, key: str, batch: NestedTensors) -> Sequence[MultiModalFieldElem]:
        """One element per item of the field ``key``'s batched value."""
        return self.field.build_elems(self.modality, key, batch)


__all__ = ["MultiModalFieldConfig"]
