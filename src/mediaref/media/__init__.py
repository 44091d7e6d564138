"""Fetch and decode: the connector, the decoders, the decoded-bytes budget (vLLM's
``vllm.multimodal.media``).

The package re-exports vLLM's names from the modules that hold them, imported on first use:
``from mediaref.media import MediaConnector`` works, and importing one submodule
(``mediaref.media.base``, say) does not pull in every decoder's libraries.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "MediaIO": "mediaref.media.base",
    "MediaDecodedBudget": "mediaref.media.base",
    "MediaWithBytes": "mediaref.media.base",
    "AudioEmbeddingMediaIO": "mediaref.media.audio",
    "AudioMediaIO": "mediaref.media.audio",
    "ImageEmbeddingMediaIO": "mediaref.media.image",
    "ImageMediaIO": "mediaref.media.image",
    "VIDEO_LOADER_REGISTRY": "mediaref.media.video",
    "VideoMediaIO": "mediaref.media.video",
    "MEDIA_CONNECTOR_REGISTRY": "mediaref.media.connector",
    "MediaConnector": "mediaref.media.connector",
}

__all__ = [
    "MEDIA_CONNECTOR_REGISTRY",
    "VIDEO_LOADER_REGISTRY",
    "AudioEmbeddingMediaIO",
    "AudioMediaIO",
    "ImageEmbeddingMediaIO",
    "ImageMediaIO",
    "MediaConnector",
    "MediaDecodedBudget",
    "MediaIO",
    "MediaWithBytes",
    "VideoMediaIO",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mediaref.media' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from mediaref.media.audio import AudioEmbeddingMediaIO, AudioMediaIO
    from mediaref.media.base import MediaDecodedBudget, MediaIO, MediaWithBytes
    from mediaref.media.connector import MEDIA_CONNECTOR_REGISTRY, MediaConnector
    from mediaref.media.image import ImageEmbeddingMediaIO, ImageMediaIO
    from mediaref.media.video import VIDEO_LOADER_REGISTRY, VideoMediaIO
