"""How an HF processor's batched output splits into per-item model inputs, and back.

The processor cache stores items, not batches: a cached image must be merged with a fresh one into
the same request. Each output field says how it was batched — one row per item
(:class:`MultiModalBatchedField`), the items' rows concatenated along one dimension
(:class:`MultiModalFlatField`, e.g. Qwen2-VL's patches), or one value for every item
(:class:`MultiModalSharedField`) — so the batch can be cut into items (``build_elems``) and items
from any number of requests put back together (``reduce_data``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from mediaref.inputs._nested import (
    NestedTensors,
    all_tensors_on_cpu,
    nested_tensors_equal,
    to_device,
)


@dataclass
class MultiModalFieldElem:
    """One item's value of one field (``data``; ``None`` when the engine core holds it) and the
    field that says how it batches with other items' values."""

    data: NestedTensors
    field: BaseMultiModalField

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return False
        if self.data is None or other.data is None:
            same_data = self.data is None and other.data is None
        else:
            same_data = nested_tensors_equal(self.data, other.data)
        return same_data and type(self.field) is type(other.field)


def _all_tensors(batch: Sequence[object]) -> bool:
    return len(batch) > 0 and all(isinstance(value, torch.Tensor) for value in batch)


def _empty_like_batch(
    first: torch.Tensor, shape: Sequence[int], *, pin_memory: bool, zeros: bool = False
) -> torch.Tensor:
    make = torch.zeros if zeros else torch.empty
    return make(tuple(shape), dtype=first.dtype, device=first.device, pin_memory=pin_memory)


@dataclass(frozen=True, init=False)
class BaseMultiModalField(ABC):
    """How one field's values are cut into items and merged back.

    ``keep_on_cpu``: the merged value stays on the CPU even when the batch is moved to a device
    (fields the model reads on the host, such as grid sizes for position ids).
    """

    # Keyword-only as a dataclass field, so subclasses may declare fields without defaults.
    keep_on_cpu: bool = field(default=False, kw_only=True)

    def __init__(self, keep_on_cpu: bool = False) -> None:
        object.__setattr__(self, "keep_on_cpu", keep_on_cpu)

    def _elem(self, data: NestedTensors) -> MultiModalFieldElem:
        return MultiModalFieldElem(data=data, field=self)

    @abstractmethod
    def build_elems(
        self, modality: str, key: str, data: NestedTensors
    ) -> Sequence[MultiModalFieldElem]:
        """Cut one field's batched ``data`` into one element per item (inverse of
        :meth:`reduce_data`)."""

    @abstractmethod
    def _reduce_data(self, batch: list[NestedTensors], *, pin_memory: bool) -> NestedTensors:
        """Merge the items' values of this field into one batched value."""

    def reduce_data(
        self,
        elems: list[MultiModalFieldElem],
        *,
        device: torch.types.Device = None,
        pin_memory: bool = False,
    ) -> NestedTensors:
        """Merge items' elements of this field into the value the model takes (inverse of
        :meth:`build_elems`), on ``device`` when given (``keep_on_cpu`` fields stay on the CPU).

        Raises ``ValueError`` when the elements come from fields of different kinds.
        """
        kinds = {type(elem.field) for elem in elems}
        if len(kinds) > 1:
            raise ValueError(
                f"Cannot merge elements of different field types: {sorted(k.__name__ for k in kinds)}"
            )
        if self.keep_on_cpu:
            device = "cpu" if device is not None else None
            pin_memory = False
        if device is not None and torch.device(device).type == "cpu":
            pin_memory = False  # pinning only pays off for a copy to an accelerator
        batch = [elem.data for elem in elems]
        if pin_memory and not all_tensors_on_cpu(batch):
            pin_memory = False  # already on a device: there is no host memory to pin
        reduced = self._reduce_data(batch, pin_memory=pin_memory)
        return cast(NestedTensors, to_device(reduced, device, pin_memory=pin_memory))


@dataclass(frozen=True, init=False)
class MultiModalBatchedField(BaseMultiModalField):
    """Item ``i`` is element ``i`` of the field's first dimension (see
    :meth:`MultiModalFieldConfig.batched`)."""

    def __init__(self, *, keep_on_cpu: bool = False) -> None:
        super().__init__(keep_on_cpu)

    def build_elems(
        self, modality: str, key: str, data: NestedTensors
    ) -> Sequence[MultiModalFieldElem]:
        return [self._elem(row) for row in data]

    def _reduce_data(self, batch: list[NestedTensors], *, pin_memory: bool) -> NestedTensors:
        if not _all_tensors(batch):
            return batch
        tensors: list[torch.Tensor] = batch  # type: ignore[assignment]  # checked just above
        if len(tensors) == 1:
            return tensors[0].unsqueeze(0)  # a view: no copy for a single item
        shape = tensors[0].shape
        if any(t.shape != shape for t in tensors):
            return batch  # ragged rows cannot stack: the model receives a list
        out = _empty_like_batch(tensors[0], (len(tensors), *shape), pin_memory=pin_memory)
        return torch.stack(tensors, out=out)


def _position_along(slice_or_tuple: Any, dim: int) -> slice:
    return slice_or_tuple if isinstance(slice_or_tuple, slice) else slice_or_tuple[dim]


@dataclass(frozen=True, init=False)
class MultiModalFlatField(BaseMultiModalField):
    """Item ``i`` is ``data[slices[i]]``: a slice of dimension 0, or (``dim > 0``) a tuple of
    slices whose entry at ``dim`` selects the item (see :meth:`MultiModalFieldConfig.flat`)."""

    slices: Sequence[slice] | Sequence[Sequence[slice]]
    dim: int = 0

    def __init__(
        self,
        slices: Sequence[slice] | Sequence[Sequence[slice]],
        dim: int = 0,
        *,
        keep_on_cpu: bool = False,
    ) -> None:
        super().__init__(keep_on_cpu)
        object.__setattr__(self, "slices", slices)
        object.__setattr__(self, "dim", dim)

    def build_elems(
        self, modality: str, key: str, data: NestedTensors
    ) -> Sequence[MultiModalFieldElem]:
        if isinstance(data, torch.Tensor):
            return [self._elem(data[index]) for index in self.slices]
        # A list cannot take a tuple index; a one-entry tuple along dim 0 is a plain slice.
        if self.dim != 0 or any(
            not isinstance(index, slice) and len(index) != 1 for index in self.slices
        ):
            raise TypeError(f"field {key!r}: slicing along dim {self.dim} needs a tensor")
        return [self._elem(data[_position_along(index, 0)]) for index in self.slices]

    def rows_covered(self) -> int:
        """The extent along ``dim`` that the slices reach (0 for no items)."""
        stops = [_position_along(index, self.dim).stop for index in self.slices]
        return max((stop for stop in stops if stop is not None), default=0)

    def _reduce_data(self, batch: list[NestedTensors], *, pin_memory: bool) -> NestedTensors:
        if not _all_tensors(batch):
            if self.dim != 0:
                raise ValueError("a flat field of nested lists can only be merged along dim 0")
            return [value for item in batch for value in item]
        tensors: list[torch.Tensor] = batch  # type: ignore[assignment]  # checked just above
        if len(tensors) == 1:
            return tensors[0]
        dim = self.dim % tensors[0].ndim
        total = sum(t.shape[dim] for t in tensors)
        others = {(t.shape[:dim], t.shape[dim + 1 :]) for t in tensors}
        if len(others) == 1:
            before, after = next(iter(others))
            out = _empty_like_batch(tensors[0], (*before, total, *after), pin_memory=pin_memory)
            return torch.cat(tensors, dim=dim, out=out)
        # Items differ in a dimension other than the concatenated one (audio clips of different
        # lengths): every other dimension takes its largest size, each item is copied into its
        # run along ``dim`` and the rest stays zero, cheaper than padding each item first.
        shape = [max(t.shape[d] for t in tensors) for d in range(tensors[0].ndim)]
        shape[dim] = total
        out = _empty_like_batch(tensors[0], shape, pin_memory=pin_memory, zeros=True)
        start = 0
        for tensor in tensors:
            region = [slice(0, size) for size in tensor.shape]
            region[dim] = slice(start, start + tensor.shape[dim])
            out[tuple(region)] = tensor
            start += tensor.shape[dim]
        return out


@dataclass(frozen=True, init=False)
class MultiModalSharedField(BaseMultiModalField):
    """Each of ``batch_size`` items sees the whole value (see :meth:`MultiModalFieldConfig.shared`)."""

    batch_size: int

    def __init__(self, batch_size: int, *, keep_on_cpu: bool = False) -> None:
        super().__init__(keep_on_cpu)
        object.__setattr__(self, "batch_size", batch_size)

    def build_elems(
        self, modality: str, key: str, data: NestedTensors
    ) -> Sequence[MultiModalFieldElem]:
        return [self._elem(data)] * self.batch_size

    def _reduce_data(self, batch: list[NestedTensors], *, pin_memory: bool) -> NestedTensors:
        return batch[0]


__all__ = [
    "BaseMultiModalField",
    "MultiModalBatchedField",
    "MultiModalFieldElem",
    "MultiModalFlatField",
    "MultiModalSharedField",
]
