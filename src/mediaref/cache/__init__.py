"""Caches of processed multimodal items, keyed by item hash and bounded by bytes.

Three caches share one protocol (:class:`BaseMultiModalCache`, whose docstring explains why the
order of ``get_and_update`` calls matters):

- :class:`MultiModalProcessorOnlyCache`: the frontend keeps whole items; nothing is mirrored.
- :class:`MultiModalProcessorSenderCache` (frontend) and :class:`MultiModalReceiverCache`
  (engine core): the frontend keeps sizes only and sends ``None`` for items the engine core holds.

The budget is ``mm_processor_cache_gb`` GiB (default ``MEDIAREF_MM_PROCESSOR_CACHE_GB``, 4; 0 stores
nothing). An item larger than the whole budget is served but not stored, and evicts nothing.
"""

from __future__ import annotations

from mediaref.cache._base import (
    BaseMultiModalCache,
    BaseMultiModalProcessorCache,
    BaseMultiModalReceiverCache,
    CacheInfo,
    MultiModalFeatureLike,
)
from mediaref.cache._errors import MultiModalCacheMissError
from mediaref.cache._items import (
    MultiModalProcessorCacheInItem,
    MultiModalProcessorCacheItem,
    MultiModalProcessorCacheItemMetadata,
    MultiModalProcessorCacheOutItem,
)
from mediaref.cache._mirror import MultiModalProcessorSenderCache, MultiModalReceiverCache
from mediaref.cache._processor_only import MultiModalProcessorOnlyCache
from mediaref.cache.factories import processor_cache_from_config, processor_only_cache_from_config

__all__ = [
    "BaseMultiModalCache",
    "BaseMultiModalProcessorCache",
    "BaseMultiModalReceiverCache",
    "CacheInfo",
    "MultiModalCacheMissError",
    "MultiModalFeatureLike",
    "MultiModalProcessorCacheInItem",
    "MultiModalProcessorCacheItem",
    "MultiModalProcessorCacheItemMetadata",
    "MultiModalProcessorCacheOutItem",
    "MultiModalProcessorOnlyCache",
    "MultiModalProcessorSenderCache",
    "MultiModalReceiverCache",
    "processor_cache_from_config",
    "processor_only_cache_from_config",
]
