"""The shapes of multimodal data on its way in: items per modality, and vision chunks.

A :class:`~mediaref.media.base.MediaRef` is a legal item everywhere a decoded object is: fetched
media stays encoded until the processor decides it must decode it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict, TypeVar, Union

import numpy as np
import torch

from mediaref.media.base import MediaRef

if TYPE_CHECKING:
    from PIL.Image import Image

_T = TypeVar("_T")

HfImageItem = Union["Image", np.ndarray, torch.Tensor]
"""An image the HF processor accepts: PIL, an (H, W, C) array or a (C, H, W) tensor."""

HfVideoItem = list["Image"] | np.ndarray | torch.Tensor | list[np.ndarray] | list[torch.Tensor]
"""A video the HF processor accepts: its frames, as a list or a (T, H, W, C) array."""

HfAudioItem = list[float] | np.ndarray | torch.Tensor
"""Audio samples the HF processor accepts."""

ImageItem = HfImageItem | MediaRef[Any]
"""An image, decoded or as a lazy reference (which decodes to a PIL image)."""

VideoItem = HfVideoItem | tuple[HfVideoItem, dict[str, Any]] | MediaRef[Any]
"""A video: frames, ``(frames, metadata)``, or a lazy reference decoding to ``(frames, metadata)``."""

AudioItem = HfAudioItem | tuple[HfAudioItem, float] | MediaRef[Any]
"""Audio: samples, ``(samples, sample_rate)``, or a lazy reference decoding to the latter."""

# Explicit TypeAlias: mypy reads a bare ``_T | ...`` assignment as a variable, not a generic alias.
ModalityData: TypeAlias = _T | list[_T | None] | None
"""One item, a list of items (``None`` for an item the client identifies by UUID), or nothing."""

MultiModalDataDict = Mapping[str, ModalityData[Any]]
"""Modality name (``"image"``, ``"video"``, ``"audio"``, ...) to its data."""

MultiModalUUIDDict = Mapping[str, Sequence[str | None] | str | None]
"""Client-supplied identities, per modality and item, that replace content hashing."""


class VisionChunkImage(TypedDict):
    """One image of the unified ``vision_chunk`` modality."""

    type: Literal["image"]
    image: Image
    uuid: str | None


class VisionChunkVideo(TypedDict):
    """A run of frames cut from one video for the ``vision_chunk`` modality, with the prompt text
    that introduces it and the index of the video it came from."""

    type: Literal["video_chunk"]
    video_chunk: list[Image]
    uuid: str | None
    prompt: str
    video_idx: int


VisionChunk: TypeAlias = VisionChunkImage | VisionChunkVideo
"""An item of the ``vision_chunk`` modality: an image or a chunk of a video."""


__all__ = [
    "AudioItem",
    "HfAudioItem",
    "HfImageItem",
    "HfVideoItem",
    "ImageItem",
    "ModalityData",
    "MultiModalDataDict",
    "MultiModalUUIDDict",
    "VideoItem",
    "VisionChunk",
    "VisionChunkImage",
    "VisionChunkVideo",
]
