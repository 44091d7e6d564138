"""Dummy text and media for a model: the stand-in prompt for HF calls, and warmup/profiling inputs.

The renderer tokenizes the prompt before multimodal processing, so the HF processor never sees the
real text. Processors whose ``__call__`` insists on text with placeholders get
:meth:`BaseDummyInputsBuilder.get_dummy_text` instead: one placeholder per item.

Warmup and profiling build the largest inputs a model takes (:meth:`get_dummy_mm_data`); the
``--limit-mm-per-prompt`` options (``mm_options``) may make them smaller, never larger.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import numpy as np
from PIL import Image

from mediaref.processing._dummy_options import (
    AudioDummyOptions,
    BaseDummyOptions,
    ImageDummyOptions,
    MultiModalDummyOptions,
    VideoDummyOptions,
)
from mediaref.processing.context import BaseProcessingInfo

logger = logging.getLogger(__name__)

_I = TypeVar("_I", bound=BaseProcessingInfo)


def _capped(name: str, model_max: int, override: int | None) -> int:
    """``override`` when it is smaller than the model's maximum; a larger one is ignored."""
    if not override:
        return model_max
    if override > model_max:
        logger.warning(
            "%s override (%d) exceeds the model's maximum (%d), will be ignored",
            name,
            override,
            model_max,
        )
    return min(model_max, override)


class BaseDummyInputsBuilder(ABC, Generic[_I]):
    """Builds the dummy text and dummy media a model's processor is exercised with."""

    def __init__(self, info: _I) -> None:
        self.info = info

    @abstractmethod
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        """Text with one input placeholder per item, e.g. ``"<image><image>"`` for two images."""

    @abstractmethod
    def get_dummy_mm_data(
        self,
        seq_len: int,
        mm_counts: Mapping[str, int],
        mm_options: Mapping[str, BaseDummyOptions] | None = None,
    ) -> dict[str, Any]:
        """Media that, processed, gives the most placeholder tokens, per modality; ``mm_options``
        (the ``--limit-mm-per-prompt`` options) may shrink it."""

    # Deterministic building blocks for the per-model builders.

    def _get_dummy_images(
        self,
        *,
        width: int,
        height: int,
        num_images: int,
        overrides: ImageDummyOptions | None = None,
    ) -> list[Image.Image]:
        if num_images == 0:
            return []
        if overrides is not None:
            width = _capped("image.width", width, overrides.width)
            height = _capped("image.height", height, overrides.height)
        return [Image.new("RGB", (width, height), color=255)] * num_images

    def _get_dummy_videos(
        self,
        *,
        width: int,
        height: int,
        num_frames: int,
        num_videos: int,
        overrides: VideoDummyOptions | None = None,
    ) -> list[np.ndarray]:
        if num_videos == 0:
            return []
        if overrides is not None:
            num_frames = _capped("video.num_frames", num_frames, overrides.num_frames)
            width = _capped("video.width", width, overrides.width)
            height = _capped("video.height", height, overrides.height)
        return [np.full((num_frames, height, width, 3), 255, dtype=np.uint8)] * num_videos

    def _get_dummy_audios(
        self,
        *,
        length: int,
        num_audios: int,
        overrides: AudioDummyOptions | None = None,
    ) -> list[np.ndarray]:
        if num_audios == 0:
            return []
        if overrides is not None:
            length = _capped("audio.length", length, overrides.length)
        return [np.zeros((length,))] * num_audios


__all__ = [
    "AudioDummyOptions",
    "BaseDummyInputsBuilder",
    "BaseDummyOptions",
    "ImageDummyOptions",
    "MultiModalDummyOptions",
    "VideoDummyOptions",
]
