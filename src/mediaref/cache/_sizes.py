"""The one measure of a cached value's size, and the byte-budget LRU built on it.

A sender and its receiver must measure an item identically (see
:class:`~mediaref.cache.base.BaseMultiModalCache`), so every cache sizes values here.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any, TypeAlias, TypeVar

import torch

from mediaref.cache._items import MultiModalProcessorCacheItem, MultiModalProcessorCacheItemMetadata
from mediaref.cache._lru import ByteBudgetLRU, GiB_bytes
from mediaref.inputs import (
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    NestedTensors,
    estimate_nbytes,
)

logger = logging.getLogger(__name__)

MultiModalCacheValue: TypeAlias = (
    MultiModalProcessorCacheItem
    | MultiModalProcessorCacheItemMetadata
    | MultiModalKwargsItems
    | MultiModalKwargsItem
    | Mapping[str, NestedTensors]
)
"""What a multimodal cache may store."""

_V = TypeVar("_V")


class MultiModalCache:
    """Sizes of cached values, and the LRU that budgets them."""

    @classmethod
    def get_leaf_size(cls, leaf: object) -> int:
        """The bytes one non-container value holds (a cached item counts its tensors)."""
        if isinstance(leaf, MultiModalProcessorCacheItemMetadata):
            return leaf.item_size
        if isinstance(leaf, (MultiModalProcessorCacheItem, MultiModalKwargsItem)):
            return leaf.nbytes
        if isinstance(leaf, MultiModalKwargsItems):
            return cls.get_item_size(leaf.data)
        if isinstance(leaf, MultiModalFieldElem):
            return cls.get_item_size(leaf.data)
        if isinstance(leaf, torch.Tensor):
            return leaf.element_size() * leaf.nelement()
        return estimate_nbytes(leaf) if hasattr(leaf, "nbytes") else sys.getsizeof(leaf)

    @classmethod
    def get_item_size(cls, value: Any, *, debug: bool = False) -> int:
        """The bytes ``value`` holds: the sum of its leaves through dicts, lists and tuples."""
        size = sum(cls.get_leaf_size(leaf) for leaf in _leaves(value))
        if debug:
            logger.debug(
                "Calculated size of %s to be %.6f GiB (%d leaves)",
                type(value).__name__,
                size / GiB_bytes,
                cls.get_item_complexity(value),
            )
        return size

    @classmethod
    def get_item_complexity(cls, value: Any) -> int:
        """How many leaves ``value`` has (its structural size, for diagnostics)."""
        return sum(1 for _ in _leaves(value))

    @classmethod
    def get_lru_cache(
        cls, capacity_gb: float, value_type: type[_V], *, debug: bool = False
    ) -> ByteBudgetLRU[str, _V]:
        """An LRU of ``capacity_gb`` GiB whose entries count :meth:`get_item_size` bytes."""

        def getsizeof(value: _V) -> int:
            return cls.get_item_size(value, debug=debug)

        return ByteBudgetLRU(int(capacity_gb * GiB_bytes), getsizeof)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


__all__ = ["MultiModalCache", "MultiModalCacheValue"]
