"""Caches of processed multimodal items, keyed by item hash (vLLM's ``vllm.multimodal.cache``).

Which cache a deployment builds (:mod:`mediaref.cache.factories`):

- :class:`MultiModalProcessorOnlyCache`: the frontend keeps whole items; nothing is mirrored.
- :class:`LruKeyReplicatedSenderCache` (frontend) and :class:`LruKeyReplicatedReceiverCache`
  (engine core): the frontend keeps sizes only and sends ``None`` for items the engine core holds
  (the protocol, and why call order matters, is on :class:`~mediaref.cache.base.BaseMultiModalCache`).
- :class:`ShmObjectStoreSenderCache` (frontend) and :class:`ShmObjectStoreReceiverCache`
  (workers): items live once in shared memory; the workers get signed handles.

The budget is ``mm_processor_cache_gb`` GiB (default ``MEDIAREF_MM_PROCESSOR_CACHE_GB``, 4; 0 stores
nothing). An item larger than the whole budget is served but not stored, and evicts nothing.
"""

from __future__ import annotations

from mediaref.cache._settings import multimodal_setting
from mediaref.cache.base import (
    BaseMultiModalCache,
    BaseMultiModalProcessorCache,
    BaseMultiModalReceiverCache,
    CacheInfo,
    MultiModalCache,
    MultiModalCacheMissError,
    MultiModalFeatureLike,
    MultiModalProcessorCacheInItem,
    MultiModalProcessorCacheItem,
    MultiModalProcessorCacheItemMetadata,
    MultiModalProcessorCacheOutItem,
    MultiModalProcessorOnlyCache,
)
from mediaref.cache.factories import (
    engine_receiver_cache_from_config,
    processor_cache_from_config,
    processor_only_cache_from_config,
    worker_receiver_cache_from_config,
)
from mediaref.cache.lru import (
    LruKeyReplicatedReceiverCache,
    LruKeyReplicatedSenderCache,
    MultiModalProcessorSenderCache,
    MultiModalReceiverCache,
)
from mediaref.cache.shm import ShmObjectStoreReceiverCache, ShmObjectStoreSenderCache

__all__ = [
    "BaseMultiModalCache",
    "BaseMultiModalProcessorCache",
    "BaseMultiModalReceiverCache",
    "CacheInfo",
    "LruKeyReplicatedReceiverCache",
    "LruKeyReplicatedSenderCache",
    "MultiModalCache",
    "MultiModalCacheMissError",
    "MultiModalFeatureLike",
    "MultiModalProcessorCacheInItem",
    "MultiModalProcessorCacheItem",
    "MultiModalProcessorCacheItemMetadata",
    "MultiModalProcessorCacheOutItem",
    "MultiModalProcessorOnlyCache",
    "MultiModalProcessorSenderCache",
    "MultiModalReceiverCache",
    "ShmObjectStoreReceiverCache",
    "ShmObjectStoreSenderCache",
    "engine_receiver_cache_from_config",
    "multimodal_setting",
    "processor_cache_from_config",
    "processor_only_cache_from_config",
    "worker_receiver_cache_from_config",
]
