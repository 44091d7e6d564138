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
in neither Pillow nor PyAV nor soundfile.
"""

from __future__ import annotations

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

__all__ = [
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
    "set_mm_embedding_modality",
    "strip_covered_mm_data",
]
