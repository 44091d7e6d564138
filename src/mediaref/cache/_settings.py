"""The cache settings read from vLLM-shaped configs, and from mediaref's own ``ModelConfig``.

vLLM passes a ``VllmConfig`` (``.model_config``, ``.parallel_config``) to the factories and a
``ModelConfig`` to the LRU caches, whose multimodal settings sit behind
``get_multimodal_config()``. mediaref's :class:`~mediaref.processing.context.ModelConfig` carries
``mm_processor_cache_gb`` itself and has no parallel config. Both are read here, duck-typed, so
the caches need neither config class.
"""

from __future__ import annotations

from typing import Any, Literal

MMCacheType = Literal["lru", "shm"]

SHM_MAX_OBJECT_SIZE_MB_DEFAULT = 128
"""vLLM's default ``mm_shm_cache_max_object_size_mb``."""


def model_config_of(vllm_config: Any) -> Any:
    """The model config of a ``VllmConfig``; a model config is its own."""
    return getattr(vllm_config, "model_config", vllm_config)


def multimodal_setting(config: Any, name: str, default: Any) -> Any:
    """A multimodal setting of a model config, mediaref's or vLLM's.

    mediaref's ``ModelConfig`` carries its settings flat (None: the environment's or vLLM's
    default, which the reader applies). vLLM's keeps them on its ``MultiModalConfig``
    (``multimodal_config`` / ``get_multimodal_config()``), leaving the constructor fields of the
    same names None on the config itself. ``default`` when neither has it.
    """
    value = getattr(config, name, None)
    if value is not None or (hasattr(config, name) and _is_mediarefs(config)):
        return value
    multimodal = getattr(config, "multimodal_config", None)
    if multimodal is None:
        getter = getattr(config, "get_multimodal_config", None)
        try:
            multimodal = getter() if callable(getter) else None
        except ValueError:  # vLLM's, for a text-only model: "The model is not multimodal."
            multimodal = None
    value = getattr(multimodal, name, None) if multimodal is not None else None
    return default if value is None else value


def _is_mediarefs(config: Any) -> bool:
    # By module: the config class lives above the caches, which must not import it.
    return type(config).__module__.startswith("mediaref.")


def capacity_gb_of(model_config: Any) -> float | None:
    """``mm_processor_cache_gb`` of a model config; a number is taken as the GiB themselves;
    ``None`` (or a config without the setting) means ``MEDIAREF_MM_PROCESSOR_CACHE_GB``."""
    if model_config is None:
        return None
    if isinstance(model_config, (int, float)) and not isinstance(model_config, bool):
        return float(model_config)
    value = multimodal_setting(model_config, "mm_processor_cache_gb", None)
    return None if value is None else float(value)


def cache_type_of(model_config: Any) -> MMCacheType:
    """``mm_processor_cache_type`` (vLLM's default ``"lru"``)."""
    value = multimodal_setting(model_config, "mm_processor_cache_type", "lru")
    if value not in ("lru", "shm"):
        raise ValueError(f"Unknown cache type: {value!r}")
    return value  # type: ignore[no-any-return]


def shm_max_object_bytes_of(model_config: Any) -> int:
    """``mm_shm_cache_max_object_size_mb`` in bytes (vLLM's default 128 MiB)."""
    value = multimodal_setting(
        model_config, "mm_shm_cache_max_object_size_mb", SHM_MAX_OBJECT_SIZE_MB_DEFAULT
    )
    return int(value) << 20


def world_size_of(vllm_config: Any) -> int:
    """How many worker processes read a shared-memory cache (``parallel_config.world_size``)."""
    parallel = getattr(vllm_config, "parallel_config", None)
    return int(getattr(parallel, "world_size", 1))


__all__ = [
    "SHM_MAX_OBJECT_SIZE_MB_DEFAULT",
    "MMCacheType",
    "cache_type_of",
    "capacity_gb_of",
    "model_config_of",
    "multimodal_setting",
    "shm_max_object_bytes_of",
    "world_size_of",
]
