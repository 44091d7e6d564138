"""Fetch and decode: the connector, the decoders, the decoded-bytes budget (vLLM's
``vllm.multimodal.media``).

The package re-exports vLLM's names from the modules that hold them, imported on first use
(:mod:`mediaref.media.reexports`): ``from mediaref.media import MediaConnector`` works, and
importing one submodule (``mediaref.media.base``, say) does not pull in every decoder's libraries.
Each modality's decoder is a package here: ``image/``, ``audio/`` and ``video/`` (loaders,
sampling rules and codecs included).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mediaref.media.reexports import lazy_exports

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


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


if TYPE_CHECKING:
    from mediaref.media.audio import AudioEmbeddingMediaIO, AudioMediaIO
    from mediaref.media.base import MediaDecodedBudget, MediaIO, MediaWithBytes
    from mediaref.media.connector import MEDIA_CONNECTOR_REGISTRY, MediaConnector
    from mediaref.media.image import ImageEmbeddingMediaIO, ImageMediaIO
    from mediaref.media.video import VIDEO_LOADER_REGISTRY, VideoMediaIO
