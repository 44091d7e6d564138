"""vLLM's ``vllm.multimodal.utils``: offline fetch helpers, media encoders, and the helpers the
engine uses on processed items.

- Offline fetches that return decoded media: :func:`fetch_image`, :func:`fetch_video`,
  :func:`fetch_audio` (the serving path stays lazy and calls ``MediaConnector.fetch_*``).
- Media to base64 and ``data:`` URLs: ``encode_{image,audio,video}_{base64,url}``.
- Items in the prompt: :func:`argsort_mm_positions`, :func:`get_mm_features_in_window`,
  :func:`strip_covered_mm_data`.
- Batching for the model: :func:`group_and_batch_mm_items`, :func:`group_and_batch_mm_kwargs`;
  tagging gathered embeddings with their modality: :func:`set_mm_embedding_modality`,
  :func:`copy_mm_embedding_modality`, :func:`get_mm_embedding_modalities`.

The decoders are imported inside the functions that need them, so importing this package pulls
in neither Pillow nor PyAV nor soundfile. The names vLLM's module imports from
``vllm.multimodal.inputs`` and ``vllm.multimodal.media`` are re-exported too; the media ones
(``ImageMediaIO``, ``MediaConnector``, ...) on first use (:mod:`mediaref.media.reexports`), for
the same reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mediaref.inputs import (
    BatchedTensorInputs,
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalSharedField,
    nested_tensors_equal,
)
from mediaref.media.reexports import lazy_exports
from mediaref.utils._batching import (
    copy_mm_embedding_modality,
    get_mm_embedding_modalities,
    group_and_batch_mm_items,
    group_and_batch_mm_kwargs,
    set_mm_embedding_modality,
)
from mediaref.utils._encode import (
    encode_audio_base64,
    encode_audio_url,
    encode_image_base64,
    encode_image_url,
    encode_video_base64,
    encode_video_url,
)
from mediaref.utils._features import (
    argsort_mm_positions,
    get_mm_features_in_window,
    strip_covered_mm_data,
)
from mediaref.utils._fetch import fetch_audio, fetch_image, fetch_video

_EXPORTS = {
    "AudioMediaIO": "mediaref.media",
    "ImageMediaIO": "mediaref.media",
    "MediaConnector": "mediaref.media",
    "MediaWithBytes": "mediaref.media",
    "VideoMediaIO": "mediaref.media",
}

__all__ = [
    "AudioMediaIO",
    "BatchedTensorInputs",
    "ImageMediaIO",
    "MediaConnector",
    "MediaWithBytes",
    "MultiModalFeatureSpec",
    "MultiModalFieldElem",
    "MultiModalKwargsItem",
    "MultiModalSharedField",
    "VideoMediaIO",
    "argsort_mm_positions",
    "copy_mm_embedding_modality",
    "encode_audio_base64",
    "encode_audio_url",
    "encode_image_base64",
    "encode_image_url",
    "encode_video_base64",
    "encode_video_url",
    "fetch_audio",
    "fetch_image",
    "fetch_video",
    "get_mm_embedding_modalities",
    "get_mm_features_in_window",
    "group_and_batch_mm_items",
    "group_and_batch_mm_kwargs",
    "nested_tensors_equal",
    "set_mm_embedding_modality",
    "strip_covered_mm_data",
]

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from mediaref.media import (
        AudioMediaIO,
        ImageMediaIO,
        MediaConnector,
        MediaWithBytes,
        VideoMediaIO,
    )
