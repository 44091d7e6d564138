"""The processor cache a model config asks for (vLLM's ``cache/factories.py``).

Only the frontend's processor-only cache is built from a config here; the sender/receiver mirror
pair is built by whoever runs the engine core (:mod:`mediaref.cache`).
"""

from __future__ import annotations

from typing import Protocol

from mediaref.cache._lru import capacity_bytes_from_gb
from mediaref.cache._processor_only import MultiModalProcessorOnlyCache


class ProcessorCacheConfig(Protocol):
    """What sizes a processor cache: ``mm_processor_cache_gb`` (None: the setting's default)."""

    @property
    def mm_processor_cache_gb(self) -> float | None: ...


def processor_only_cache_from_config(
    model_config: ProcessorCacheConfig,
) -> MultiModalProcessorOnlyCache | None:
    """A processor-only cache of ``mm_processor_cache_gb`` GiB; None when that is 0."""
    if capacity_bytes_from_gb(model_config.mm_processor_cache_gb) == 0:
        return None
    return MultiModalProcessorOnlyCache(model_config.mm_processor_cache_gb)


def processor_cache_from_config(
    model_config: ProcessorCacheConfig,
) -> MultiModalProcessorOnlyCache | None:
    """The frontend's processor cache for ``model_config`` (processor-only; None when disabled)."""
    return processor_only_cache_from_config(model_config)


__all__ = [
    "ProcessorCacheConfig",
    "processor_cache_from_config",
    "processor_only_cache_from_config",
]
