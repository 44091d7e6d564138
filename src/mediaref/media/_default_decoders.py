"""The decoders by modality: vLLM's ``MODALITY_IO_MAP``, the merge of a deployment's
``--media-io-kwargs`` with a request's class by class, and the default decoders a connector's
``fetch_*`` builds when its caller brings none (vLLM's calls take no decoder).

Everything here imports the decoders on first use: they pull in Pillow, PyAV, soundfile and
torch, which the transport (the connector's own module) does not need.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mediaref.media.base import MediaIO
from mediaref.media.decode_budget import MediaDecodedBudget

if TYPE_CHECKING:
    import torch

    from mediaref.media.audio import AudioMediaIO
    from mediaref.media.image import ImageMediaIO
    from mediaref.media.video import VideoMediaIO

_lock = threading.Lock()
_modality_io_map: dict[str, type[MediaIO[Any]]] | None = None


def modality_io_map() -> dict[str, type[MediaIO[Any]]]:
    """The process-wide ``{"audio": AudioMediaIO, "image": ImageMediaIO, "video": VideoMediaIO}``
    (vLLM's ``MODALITY_IO_MAP``): one dict, so an entry a plugin adds is seen by every merge."""
    global _modality_io_map
    if _modality_io_map is None:
        from mediaref.media.audio import AudioMediaIO
        from mediaref.media.image import ImageMediaIO
        from mediaref.media.video import VideoMediaIO

        with _lock:
            if _modality_io_map is None:
                _modality_io_map = {
                    "audio": AudioMediaIO,
                    "image": ImageMediaIO,
                    "video": VideoMediaIO,
                }
    return _modality_io_map


def merge_media_io_kwargs(
    defaults: Mapping[str, Mapping[str, Any]] | None,
    overrides: Mapping[str, Mapping[str, Any]] | None,
) -> dict[str, dict[str, Any]] | None:
    """The request's ``overrides`` merged onto the deployment's ``defaults``, modality by modality.

    Each modality's options are merged by its decoder class's ``merge_kwargs`` (the base
    :class:`MediaIO`'s shallow merge for a modality the map does not name), so a decoder whose
    options depend on each other decides how a request overrides them. None when neither side
    has any options.
    """
    if not defaults and not overrides:
        return None
    defaults, overrides = defaults or {}, overrides or {}
    io_classes = modality_io_map()
    merged: dict[str, dict[str, Any]] = {}
    for modality in (*defaults, *(m for m in overrides if m not in defaults)):
        io_class = io_classes.get(modality, MediaIO)
        merged[modality] = io_class.merge_kwargs(defaults.get(modality), overrides.get(modality))
    return merged or None


def default_image_io(image_mode: str | None, budget: MediaDecodedBudget | None) -> ImageMediaIO:
    from mediaref.media.image import ImageMediaIO

    return ImageMediaIO(image_mode, decoded_budget=budget)


def default_video_io(
    image_mode: str | None, video_processor: str | None, budget: MediaDecodedBudget | None
) -> VideoMediaIO:
    """vLLM's default video decoder, on the loader backend bound to ``video_processor`` (an HF
    video processor class name), if one is."""
    from mediaref.media.video import VideoMediaIO
    from mediaref.media.video.loader_registry import get_video_loader_backend_for_processor

    options: dict[str, Any] = {}
    backend = get_video_loader_backend_for_processor(video_processor)
    if backend is not None:
        options["video_backend"] = backend
    return VideoMediaIO(default_image_io(image_mode, budget), **options)


def default_audio_io(budget: MediaDecodedBudget | None) -> AudioMediaIO:
    from mediaref.media.audio import AudioMediaIO

    return AudioMediaIO(decoded_budget=budget)


def load_embedding(modality: str, data: str) -> torch.Tensor:
    """Base64 ``modality`` embeddings (``.npy`` or ``torch.save``), loaded now."""
    from mediaref.media.audio import AudioEmbeddingMediaIO
    from mediaref.media.image import ImageEmbeddingMediaIO
    from mediaref.media.video import VideoEmbeddingMediaIO

    loaders = {
        "image": ImageEmbeddingMediaIO,
        "audio": AudioEmbeddingMediaIO,
        "video": VideoEmbeddingMediaIO,
    }
    return loaders[modality]().load_base64("", data)


__all__ = [
    "default_audio_io",
    "default_image_io",
    "default_video_io",
    "load_embedding",
    "merge_media_io_kwargs",
    "modality_io_map",
]
