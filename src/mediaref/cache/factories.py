"""Which processor caches a deployment builds (vLLM's ``cache/factories.py``).

The cache type follows vLLM's rules. None when the model takes no multimodal input or the budget
(``mm_processor_cache_gb``) is 0. Processor-only when the engine core cannot mirror the frontend:
several API-server processes, or data parallelism behind an internal load balancer — and, in
mediaref, when the config is a bare model config without a ``parallel_config`` (a frontend
running on its own, with no engine-core process to mirror). Otherwise ``mm_processor_cache_type``:
``"lru"`` (the key-replicated pair: a sender on the frontend, a receiver in the engine core) or
``"shm"`` (a shared-memory object store written by the frontend and read by the workers).

``vllm_config`` is a ``VllmConfig``-shaped object (``.model_config``, ``.parallel_config``) or a
model config alone (mediaref's :class:`~mediaref.processing.context.ModelConfig`).
"""

from __future__ import annotations

from multiprocessing.synchronize import Lock as LockType
from typing import Any, Literal

from mediaref.cache._base import BaseMultiModalProcessorCache, BaseMultiModalReceiverCache
from mediaref.cache._lru import capacity_bytes_from_gb
from mediaref.cache._processor_only import MultiModalProcessorOnlyCache
from mediaref.cache._settings import cache_type_of, capacity_gb_of, model_config_of
from mediaref.cache.lru import LruKeyReplicatedReceiverCache, LruKeyReplicatedSenderCache
from mediaref.cache.shm import ShmObjectStoreReceiverCache, ShmObjectStoreSenderCache

_CacheType = Literal["processor_only", "lru", "shm"]


def _cache_type(vllm_config: Any) -> _CacheType | None:
    model_config = model_config_of(vllm_config)
    if not getattr(model_config, "supports_multimodal_inputs", True):
        return None
    if capacity_bytes_from_gb(capacity_gb_of(model_config)) <= 0:
        return None
    parallel = getattr(vllm_config, "parallel_config", None)
    if parallel is None:
        return "processor_only"
    one_api_process = getattr(parallel, "_api_process_count", 1) == 1
    mirrorable = getattr(parallel, "data_parallel_size", 1) == 1 or getattr(
        parallel, "data_parallel_external_lb", False
    )
    if not (one_api_process and mirrorable):
        return "processor_only"
    return cache_type_of(model_config)


def processor_cache_from_config(vllm_config: Any) -> BaseMultiModalProcessorCache | None:
    """The frontend's processor cache for this deployment; None when caching is off."""
    cache_type = _cache_type(vllm_config)
    model_config = model_config_of(vllm_config)
    if cache_type is None:
        return None
    if cache_type == "processor_only":
        return MultiModalProcessorOnlyCache(model_config)
    if cache_type == "lru":
        return LruKeyReplicatedSenderCache(model_config)
    return ShmObjectStoreSenderCache(vllm_config)


def processor_only_cache_from_config(vllm_config: Any) -> MultiModalProcessorOnlyCache | None:
    """A processor-only cache whenever caching is on, whatever the cache type (the encoder
    budget's profiling run uses one: it must not feed an engine-core mirror)."""
    if _cache_type(vllm_config) is None:
        return None
    return MultiModalProcessorOnlyCache(model_config_of(vllm_config))


def engine_receiver_cache_from_config(vllm_config: Any) -> BaseMultiModalReceiverCache | None:
    """The engine core's cache: the LRU receiver under ``"lru"``, else None."""
    if _cache_type(vllm_config) != "lru":
        return None
    return LruKeyReplicatedReceiverCache(model_config_of(vllm_config))


def worker_receiver_cache_from_config(
    vllm_config: Any, shared_worker_lock: LockType | None
) -> BaseMultiModalReceiverCache | None:
    """A worker's cache: the shared-memory reader under ``"shm"``, else None.

    ``shared_worker_lock`` (one ``multiprocessing.Lock`` shared by all workers) guards the
    readers' acknowledgements; ``"shm"`` without it is a ``ValueError``.
    """
    if _cache_type(vllm_config) != "shm":
        return None
    if shared_worker_lock is None:
        raise ValueError(
            "Missing `shared_worker_lock` argument from executor. "
            "This argument is needed for mm_processor_cache_type='shm'."
        )
    return ShmObjectStoreReceiverCache(vllm_config, shared_worker_lock)


__all__ = [
    "engine_receiver_cache_from_config",
    "processor_cache_from_config",
    "processor_only_cache_from_config",
    "worker_receiver_cache_from_config",
]
