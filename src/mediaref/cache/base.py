"""vLLM's ``vllm.multimodal.cache.base``: the cache protocol, its items and the processor-only cache.

The protocol (and why the order of ``get_and_update`` calls matters) is documented on
:class:`BaseMultiModalCache`; the implementations live in this package's private modules. The
item types vLLM's module imports from ``vllm.multimodal.inputs`` are re-exported from
:mod:`mediaref.inputs`.
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
from mediaref.inputs import (
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    NestedTensors,
)

__all__ = [
    "BaseMultiModalCache",
    "BaseMultiModalProcessorCache",
    "BaseMultiModalReceiverCache",
    "CacheInfo",
    "MultiModalCache",
    "MultiModalCacheMissError",
    "MultiModalCacheValue",
    "MultiModalFeatureLike",
    "MultiModalFeatureSpec",
    "MultiModalFieldElem",
    "MultiModalKwargsItem",
    "MultiModalKwargsItems",
    "MultiModalProcessorCacheInItem",
    "MultiModalProcessorCacheItem",
    "MultiModalProcessorCacheItemMetadata",
    "MultiModalProcessorCacheOutItem",
    "MultiModalProcessorOnlyCache",
    "NestedTensors",
]
