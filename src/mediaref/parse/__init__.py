"""The parse layer: ``multi_modal_data`` as per-modality items with two views of each item.

* ``get(index)`` — the decoded object, what the HF processor sees;
* ``get_raw(index)`` — the item as stored (for fetched media the :class:`~mediaref.MediaRef`),
  read by hashing, cache-miss selection and byte release, none of which decodes.

The implementation lives in private modules: items (``_parse_items``), video views
(``_parse_video``), embeddings (``_parse_embeddings``), the parser (``_parse_parser``) and audio
normalization (``_audio_resample``).
"""

from __future__ import annotations

from mediaref.parse._audio import AudioResampler
from mediaref.parse._embeddings import (
    AudioEmbeddingItems,
    DictEmbeddingItems,
    EmbeddingItems,
    ImageEmbeddingItems,
    VideoEmbeddingItems,
)
from mediaref.parse._items import (
    AudioProcessorItems,
    ImageProcessorItems,
    ImageSize,
    ModalityDataItems,
    MultiModalDataItems,
    ProcessorBatchItems,
)
from mediaref.parse._parser import ModalityDataParser, MultiModalDataParser
from mediaref.parse._video import VideoProcessorItems

__all__ = [
    "AudioEmbeddingItems",
    "AudioProcessorItems",
    "AudioResampler",
    "DictEmbeddingItems",
    "EmbeddingItems",
    "ImageEmbeddingItems",
    "ImageProcessorItems",
    "ImageSize",
    "ModalityDataItems",
    "ModalityDataParser",
    "MultiModalDataItems",
    "MultiModalDataParser",
    "ProcessorBatchItems",
    "VideoEmbeddingItems",
    "VideoProcessorItems",
]
