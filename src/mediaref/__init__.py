"""mediaref: vLLM's multimodal layer, built around lazy media decode.

Fetched media travels as a :class:`MediaRef` — encoded bytes, a sha256 key derived from them
without decoding, and a memoized decode — so a processor-cache hit never pays for a decode and
misses decode in parallel. The names below are the ones a user reaches for first; each lives in
the module the architecture map names (``mediaref.media.base``, ``mediaref.media.connector``, ...)
and is imported from there on first use (:func:`mediaref.media.reexports.lazy_exports`), so
``import mediaref`` stays cheap. vLLM's ``vllm.multimodal`` front door (``MULTIMODAL_REGISTRY``,
``MultiModalRegistry``, ``MultiModalHasher``, ``MultiModalKwargsItems``, ``NestedTensors``,
``BatchedTensorInputs``) is all here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mediaref.media.reexports import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "DecodeSpec": "mediaref.media.base",
    "MediaIO": "mediaref.media.base",
    "MediaRef": "mediaref.media.base",
    "derive_media_key": "mediaref.media.base",
    "ImageMediaIO": "mediaref.media.image",
    "VideoMediaIO": "mediaref.media.video",
    "AudioMediaIO": "mediaref.media.audio",
    "MediaConnector": "mediaref.media.connector",
    "MEDIA_CONNECTOR_REGISTRY": "mediaref.media.connector",
    "fetch_image": "mediaref.utils",
    "fetch_video": "mediaref.utils",
    "fetch_audio": "mediaref.utils",
    "MultiModalDataParser": "mediaref.parse",
    "MultiModalHasher": "mediaref.hasher",
    "MULTIMODAL_REGISTRY": "mediaref.registry",
    "MultiModalRegistry": "mediaref.registry",
    "BatchedTensorInputs": "mediaref.inputs",
    "MultiModalKwargsItems": "mediaref.inputs",
    "NestedTensors": "mediaref.inputs",
    "ModelConfig": "mediaref.processing.context",
    "BaseRenderer": "mediaref.renderers.base",
    "MultiModalRequest": "mediaref.renderers.base",
    "VLLMUnprocessableEntityError": "mediaref.exceptions",
    "VLLMValidationError": "mediaref.exceptions",
    "MediaRefError": "mediaref.exceptions",
}

# Written out, not computed from _EXPORTS: type checkers read only a literal ``__all__`` when they
# decide what ``from mediaref import X`` may import. tests/test_package.py keeps the two in step.
__all__ = [
    "MEDIA_CONNECTOR_REGISTRY",
    "MULTIMODAL_REGISTRY",
    "AudioMediaIO",
    "BaseRenderer",
    "BatchedTensorInputs",
    "DecodeSpec",
    "ImageMediaIO",
    "MediaConnector",
    "MediaIO",
    "MediaRef",
    "MediaRefError",
    "ModelConfig",
    "MultiModalDataParser",
    "MultiModalHasher",
    "MultiModalKwargsItems",
    "MultiModalRegistry",
    "MultiModalRequest",
    "NestedTensors",
    "VLLMUnprocessableEntityError",
    "VLLMValidationError",
    "VideoMediaIO",
    "derive_media_key",
    "fetch_audio",
    "fetch_image",
    "fetch_video",
]


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


if TYPE_CHECKING:
    from mediaref.exceptions import MediaRefError, VLLMUnprocessableEntityError, VLLMValidationError
    from mediaref.hasher import MultiModalHasher
    from mediaref.inputs import BatchedTensorInputs, MultiModalKwargsItems, NestedTensors
    from mediaref.media.audio import AudioMediaIO
    from mediaref.media.base import DecodeSpec, MediaIO, MediaRef, derive_media_key
    from mediaref.media.connector import MEDIA_CONNECTOR_REGISTRY, MediaConnector
    from mediaref.media.image import ImageMediaIO
    from mediaref.media.video import VideoMediaIO
    from mediaref.parse import MultiModalDataParser
    from mediaref.processing.context import ModelConfig
    from mediaref.registry import MULTIMODAL_REGISTRY, MultiModalRegistry
    from mediaref.renderers.base import BaseRenderer, MultiModalRequest
    from mediaref.utils import fetch_audio, fetch_image, fetch_video
