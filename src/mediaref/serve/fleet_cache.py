"""The processor cache of a server: its local cache over the stores it shares items through.

With ``--workers N``, the workers' shared-memory store (:mod:`mediaref.serve.workers`); with
``--cache-redis-url``, the fleet's Redis under that (:mod:`mediaref.cache.layered`). A worker's
local cache is 1/N of ``--mm-processor-cache-gb``: the shared store holds the rest.

Every server of a fleet that serves the same model with the same settings must find the same
entries, and no server may find another's entries for different output. So the Redis namespace
is derived from what decides a processed item beyond its hash (which already names the model
argument, the item and the request's kwargs): the model directory's config files, the resolved
dtype and device normalization, mediaref's version (its entry layout) and the approximation
switches that change pixels.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import mediaref
from mediaref import envs
from mediaref.cache import MultiModalProcessorOnlyCache
from mediaref.cache.layered import LayeredProcessorCache, SharedStore
from mediaref.cache.redis_l2 import RedisL2Settings, RedisL2Store, load_secret, settings_namespace
from mediaref.processing.context import ModelConfig
from mediaref.processing.stored_updates import PROMPT_UPDATES_JSON
from mediaref.serve.options import ServeOptions

if TYPE_CHECKING:
    from mediaref.serve.worker_plan import WorkerPlan

# Settings outside the model config that change a processed item's values.
_OUTPUT_ENV = ("MEDIAREF_QWEN2_VL_APPROX",)
_CONFIG_FILES = (
    "config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "tokenizer_config.json",
)


def model_namespace(model_id: str, config: ModelConfig) -> str:
    """The Redis namespace of a served model: equal exactly on servers whose output is equal."""
    files = hashlib.sha256()
    for name in _CONFIG_FILES:
        path = Path(config.model) / name
        if path.is_file():
            files.update(name.encode() + b"\0" + path.read_bytes())
    return settings_namespace(
        model_id,
        {
            "configs": files.hexdigest(),
            "dtype": str(config.dtype),
            "mm_device_do_normalize": config.get_mm_device_do_normalize(),
            "mm_processor_kwargs": dict(config.mm_processor_kwargs),
            "media_io_kwargs": {k: dict(v) for k, v in config.media_io_kwargs.items()},
            "mediaref": mediaref.__version__,
            "env": {name: os.environ.get(name, "") for name in _OUTPUT_ENV},
        },
    )


def layered_cache(
    model_id: str, config: ModelConfig, options: ServeOptions, plan: WorkerPlan | None
) -> LayeredProcessorCache | None:
    """The model's processor cache over the workers' store and the fleet's Redis; None when the
    server shares items with nobody (the renderer's own cache is then the whole cache)."""
    stores: list[SharedStore] = []
    local_config = config
    if plan is not None and model_id in plan.stores:
        from mediaref.cache.worker_store import WorkerSharedStore

        stores.append(WorkerSharedStore.attach(plan.stores[model_id], secret=plan.secret))
        gigabytes = config.mm_processor_cache_gb
        if gigabytes is None:
            gigabytes = envs.MEDIAREF_MM_PROCESSOR_CACHE_GB
        local_config = dataclasses.replace(config, mm_processor_cache_gb=gigabytes / plan.count)
    if options.cache_redis_url:
        stores.append(
            RedisL2Store(
                RedisL2Settings(
                    url=options.cache_redis_url,
                    secret=load_secret(options.cache_redis_secret_file or None),
                    namespace=model_namespace(model_id, config),
                    ttl_s=options.cache_redis_ttl_s,
                    max_entry_bytes=int(options.cache_redis_max_entry_mb * 1024 * 1024),
                )
            )
        )
    if not stores:
        return None
    local = MultiModalProcessorOnlyCache(local_config)
    return LayeredProcessorCache(local, stores, PROMPT_UPDATES_JSON)


__all__ = ["layered_cache", "model_namespace"]
