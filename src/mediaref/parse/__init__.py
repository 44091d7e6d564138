"""The parse layer: ``multi_modal_data`` as per-modality items with two views of each item.

* ``get(index)`` — the decoded object, what the HF processor sees;
* ``get_raw(index)`` — the item as stored (for fetched media the :class:`~mediaref.MediaRef`),
  read by hashing, cache-miss selection and byte release, none of which decodes.

The implementation lives in private modules: items (``_items``), video views (``_video``),
embeddings (``_embeddings``), the parser (``_parser``) and client UUIDs (``_uuids``). Audio
normalization (channels, then rate) is :mod:`mediaref.audio`'s: :class:`AudioResampler` is
re-exported here because vLLM's ``parse`` module names it.
"""

from __future__ import annotations

from mediaref.audio import AudioResampler
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

__all__ = [
    "AudioEmbeddingItems",
    "AudioProcessorItems",
    "AudioResampler",
    "DictEmbeddingItems",
    "EmbeddingFieldRole",
    "EmbeddingItems",
    "ImageEmbeddingItems",
    "ImageProcessorItems",
    "ImageSize",
    "ModalityDataItems",
    "ModalityDataParser",
    "MultiModalDataItems",
    "MultiModalDataParser",
    "MultiModalUUIDItems",
    "ProcessorBatchItems",
    "VideoEmbeddingItems",
    "VideoProcessorItems",
    "VisionChunkProcessorItems",
    "parse_mm_uuids",
    "validate_embedding_ndim",
]
