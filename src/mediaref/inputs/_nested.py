"""Nested tensors: what one processed field holds, compared and moved as a tree.

A field's value is a tensor, or a list (or tuple) of them when the items' shapes differ and cannot
be stacked; lists nest. Leaves other than tensors (ints, strings) are compared with ``==``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeAlias

import numpy as np
import torch

NestedTensors: TypeAlias = (
    list["NestedTensors"] | list[torch.Tensor] | torch.Tensor | tuple[torch.Tensor, ...]
)
"""A tensor, or a list/tuple of (nested) tensors where shapes differ between items."""

BatchedTensorInputs: TypeAlias = dict[str, NestedTensors]
"""Model keyword arguments, each batched across items (``MultiModalKwargsItems.get_data``)."""


def nested_tensors_equal(a: NestedTensors, b: NestedTensors, check_dtype: bool = True) -> bool:
    """Whether two nested tensors hold the same values in the same structure.

    Tensors must have equal shapes and values (and dtypes, with ``check_dtype``); a list never
    equals a tuple; any other leaves compare with ``==``.
    """
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if check_dtype and a.dtype != b.dtype:
            return False
        return bool(torch.equal(a, b))
    for container in (list, tuple):
        if isinstance(a, container) or isinstance(b, container):
            return (
                isinstance(a, container)
                and isinstance(b, container)
                and len(a) == len(b)
                and all(nested_tensors_equal(x, y, check_dtype) for x, y in zip(a, b, strict=True))
            )
    return bool(a == b)


def batched_tensors_equal(a: BatchedTensorInputs, b: BatchedTensorInputs) -> bool:
    """Whether every key of ``a`` is in ``b`` with an equal nested value (``b`` may have more)."""
    return all(key in b and nested_tensors_equal(value, b[key]) for key, value in a.items())


def iter_leaves(tree: object) -> Iterator[object]:
    """The non-container values of a tree of dicts, lists and tuples, depth first."""
    if isinstance(tree, dict):
        for value in tree.values():
            yield from iter_leaves(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from iter_leaves(value)
    else:
        yield tree


def map_leaves(fn: Callable[[Any], Any], tree: Any) -> Any:
    """``tree`` with ``fn`` applied to each leaf; dicts, lists and tuples keep their shape."""
    if isinstance(tree, dict):
        return {key: map_leaves(fn, value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [map_leaves(fn, value) for value in tree]
    if isinstance(tree, tuple):
        return tuple(map_leaves(fn, value) for value in tree)
    return fn(tree)


def all_tensors_on_cpu(tree: object) -> bool:
    return all(
        not isinstance(leaf, torch.Tensor) or leaf.device.type == "cpu"
        for leaf in iter_leaves(tree)
    )


def _fills_its_storage(tensor: torch.Tensor) -> bool:
    """Contiguous, or a permutation of a contiguous layout (a transposed matrix): such a tensor
    copies to the device in one pitched transfer; a gapped one (a strided slice) does not."""
    if tensor.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted(zip(tensor.stride(), tensor.shape, strict=True)):
        if size > 1:
            if stride != expected:
                return False
            expected *= size
    return True


def to_device(tree: Any, device: torch.types.Device, *, pin_memory: bool = False) -> Any:
    """Every tensor of ``tree`` moved to ``device`` (``None``: left where it is), asynchronously.

    With ``pin_memory``, a CPU tensor is first copied into pinned memory unless it is already
    pinned and dense, because only such a source lets the copy overlap with compute.
    """
    if device is None:
        return tree

    def move(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        if pin_memory and leaf.device.type == "cpu":
            if not (leaf.is_pinned() and _fills_its_storage(leaf)):
                leaf = torch.empty(leaf.shape, dtype=leaf.dtype, pin_memory=True).copy_(leaf)
        return leaf.to(device=device, non_blocking=True)

    return map_leaves(move, tree)


def estimate_nbytes(value: object) -> int:
    """The bytes ``value`` holds: tensors and arrays count their buffers (``sys.getsizeof`` sees
    only a tensor's Python shell), objects with an integer ``nbytes`` report it, containers sum
    their contents, anything else counts as ``sys.getsizeof``."""
    if isinstance(value, torch.Tensor):
        return value.element_size() * value.nelement()
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, (int, np.integer)):
        return int(nbytes)
    if isinstance(value, Mapping):
        return sum(estimate_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(estimate_nbytes(v) for v in value)
    return sys.getsizeof(value)


__all__ = [
    "BatchedTensorInputs",
    "NestedTensors",
    "all_tensors_on_cpu",
    "batched_tensors_equal",
    "estimate_nbytes",
    "iter_leaves",
    "map_leaves",
    "nested_tensors_equal",
    "to_device",
]
