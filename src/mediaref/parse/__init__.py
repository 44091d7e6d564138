"""The parse layer: ``multi_modal_data`` as per-modality items with two views of each item.

* ``get(index)`` — the decoded object, what the HF processor sees;
* ``get_raw(index)`` — the item as stored (for fetched media the :class:`~mediaref.MediaRef`),
  read by hashing, cache-miss selection and byte release, none of which decodes.

The implementation lives in private modules: items (``_items``), video views (``_video``),
embeddings (``_embeddings``), the parser (``_parser``) and client UUIDs (``_uuids``). Audio
normalization (channels, then rate) is :mod:`mediaref.audio`'s: :class:`AudioResampler` is
re-exported here because vLLM's ``parse`` module names it.

The other names vLLM's module imports (the item aliases and field config from ``inputs``, the
image and audio helpers, ``MediaWithBytes``, ``DecodedFrames``) are re-exported too, so code
that imports them from ``vllm.multimodal.parse`` works here. ``DecodedFrames`` is imported on
first use (:mod:`mediaref.media.reexports`): its home, :mod:`mediaref.video`, registers every
video loader and pulls in PyAV, which parsing does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mediaref.audio import AudioResampler, AudioSpec, normalize_audio
from mediaref.image import convert_image_mode, normalize_image
from mediaref.inputs import (
    AudioItem,
    HfAudioItem,
    HfImageItem,
    HfVideoItem,
    ImageItem,
    MultiModalFieldConfig,
    MultiModalKwargsItems,
    VideoItem,
)
from mediaref.media.base import MediaWithBytes
from mediaref.media.reexports import lazy_exports
from mediaref.parse._embeddings import (
    AudioEmbeddingItems,
    DictEmbeddingItems,
    EmbeddingFieldRole,
    EmbeddingItems,
    ImageEmbeddingItems,
    VideoEmbeddingItems,
    validate_embedding_ndim,
)
from mediaref.parse._items import (
    AudioProcessorItems,
    ImageProcessorItems,
    ImageSize,
    ModalityDataItems,
    MultiModalDataItems,
    ProcessorBatchItems,
    VisionChunkProcessorItems,
)
from mediaref.parse._parser import ModalityDataParser, MultiModalDataParser
from mediaref.parse._uuids import MultiModalUUIDItems, parse_mm_uuids
from mediaref.parse._video import VideoProcessorItems

_EXPORTS = {"DecodedFrames": "mediaref.video"}

__all__ = [
    "AudioEmbeddingItems",
    "AudioItem",
    "AudioProcessorItems",
    "AudioResampler",
    "AudioSpec",
    "DecodedFrames",
    "DictEmbeddingItems",
    "EmbeddingFieldRole",
    "EmbeddingItems",
    "HfAudioItem",
    "HfImageItem",
    "HfVideoItem",
    "ImageEmbeddingItems",
    "ImageItem",
    "ImageProcessorItems",
    "ImageSize",
    "MediaWithBytes",
    "ModalityDataItems",
    "ModalityDataParser",
    "MultiModalDataItems",
    "MultiModalDataParser",
    "MultiModalFieldConfig",
    "MultiModalKwargsItems",
    "MultiModalUUIDItems",
    "ProcessorBatchItems",
    "VideoEmbeddingItems",
    "VideoItem",
    "VideoProcessorItems",
    "VisionChunkProcessorItems",
    "convert_image_mode",
    "normalize_audio",
    "normalize_image",
    "parse_mm_uuids",
    "validate_embedding_ndim",
]

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from mediaref.video import DecodedFrames
