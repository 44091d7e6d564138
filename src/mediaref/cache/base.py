"""vLLM's ``vllm.multimodal.cache.base``: the cache protocol, its items and the processor-only cache.

The protocol (and why the order of ``get_and_update`` calls matters) is documented on
:class:`BaseMultiModalCache`; the implementations live in this package's private modules.
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
from mediaref.cache._processor_only import MultiModalProcessorOnlyCache
from mediaref.cache._sizes import MultiModalCache, MultiModalCacheValue

__all__ = [
    "BaseMultiModalCache",
    "BaseMultiModalProcessorCache",
    "BaseMultiModalReceiverCache",
    "CacheInfo",
    "MultiModalCache",
    "MultiModalCacheMissError",
    "MultiModalCacheValue",
    "MultiModalFeatureLike",
    "MultiModalProcessorCacheInItem",
    "MultiModalProcessorCacheItem",
    "MultiModalProcessorCacheItemMetadata",
    "MultiModalProcessorCacheOutItem",
    "MultiModalProcessorOnlyCache",
]
