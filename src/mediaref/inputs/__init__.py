"""The shapes of multimodal data on its way in (items) and on its way out (processed inputs).

vLLM's ``vllm.multimodal.inputs``. A :class:`~mediaref.media.base.MediaRef` is a legal item
everywhere a decoded object is: fetched media stays encoded until the processor decides it must
decode it. The implementation lives in private modules: the item aliases and vision chunks
(``_items``), nested tensors (``_nested``), placeholder ranges (``_placeholders``), the field
classes that cut an HF batch into items and merge items back (``_fields``), and the per-item
kwargs, their batching and the engine's per-item feature spec (``_kwargs``). ``MediaWithBytes``
is :mod:`mediaref.media.base`'s, re-exported as vLLM's module imports it.
"""

from __future__ import annotations

from mediaref.inputs._field_config import MultiModalFieldConfig
from mediaref.inputs._fields import (
    BaseMultiModalField,
    MultiModalBatchedField,
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalSharedField,
)
from mediaref.inputs._items import (
    AudioItem,
    HfAudioItem,
    HfImageItem,
    HfVideoItem,
    ImageItem,
    ModalityData,
    MultiModalDataDict,
    MultiModalUUIDDict,
    VideoItem,
    VisionChunk,
    VisionChunkImage,
    VisionChunkVideo,
)
from mediaref.inputs._kwargs import (
    MultiModalFeatureSpec,
    MultiModalHashes,
    MultiModalInputs,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    MultiModalKwargsOptionalItems,
    MultiModalPlaceholderDict,
    batch_items,
    build_kwargs_items,
)
from mediaref.inputs._nested import (
    BatchedTensorInputs,
    NestedTensors,
    batched_tensors_equal,
    estimate_nbytes,
    nested_tensors_equal,
)
from mediaref.inputs._placeholders import PlaceholderRange
from mediaref.media.base import MediaWithBytes

__all__ = [
    "AudioItem",
    "BaseMultiModalField",
    "BatchedTensorInputs",
    "HfAudioItem",
    "HfImageItem",
    "HfVideoItem",
    "ImageItem",
    "MediaWithBytes",
    "ModalityData",
    "MultiModalBatchedField",
    "MultiModalDataDict",
    "MultiModalFeatureSpec",
    "MultiModalFieldConfig",
    "MultiModalFieldElem",
    "MultiModalFlatField",
    "MultiModalHashes",
    "MultiModalInputs",
    "MultiModalKwargsItem",
    "MultiModalKwargsItems",
    "MultiModalKwargsOptionalItems",
    "MultiModalPlaceholderDict",
    "MultiModalSharedField",
    "MultiModalUUIDDict",
    "NestedTensors",
    "PlaceholderRange",
    "VideoItem",
    "VisionChunk",
    "VisionChunkImage",
    "VisionChunkVideo",
    "batch_items",
    "batched_tensors_equal",
    "build_kwargs_items",
    "estimate_nbytes",
    "nested_tensors_equal",
]
