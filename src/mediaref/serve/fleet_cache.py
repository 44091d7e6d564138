"""The processor cache of a server in a fleet: the local cache over Redis (``--cache-redis-url``).

Every server of a fleet that serves the same model with the same settings must find the same
entries, and no server may find another's entries for different output. So the Redis namespace
is derived from what decides a processed item beyond its hash (which already names the model
argument, the item and the request's kwargs): the model directory's config files, the resolved
dtype and device normalization, mediaref's version (its entry layout) and the approximation
switches that change pixels.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import mediaref
from mediaref.cache import MultiModalProcessorOnlyCache
from mediaref.cache.redis_l2 import (
    RedisL2Settings,
    RedisL2Store,
    RedisLayeredProcessorCache,
    load_secret,
    settings_namespace,
)
from mediaref.processing.context import ModelConfig
from mediaref.processing.stored_updates import PROMPT_UPDATES_JSON
from mediaref.serve.options import ServeOptions

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


def redis_layered_cache(
    model_id: str, config: ModelConfig, options: ServeOptions
) -> RedisLayeredProcessorCache:
    """The model's local processor cache with the fleet's Redis under it."""
    store = RedisL2Store(
        RedisL2Settings(
            url=options.cache_redis_url,
            secret=load_secret(options.cache_redis_secret_file or None),
            namespace=model_namespace(model_id, config),
            ttl_s=options.cache_redis_ttl_s,
            max_entry_bytes=int(options.cache_redis_max_entry_mb * 1024 * 1024),
        )
    )
    return RedisLayeredProcessorCache(
        MultiModalProcessorOnlyCache(config), store, PROMPT_UPDATES_JSON
    )


__all__ = ["model_namespace", "redis_layered_cache"]
