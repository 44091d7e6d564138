"""Dummy text and media for a model: the stand-in prompt for HF calls, and warmup/profiling inputs.

The renderer tokenizes the prompt before multimodal processing, so the HF processor never sees the
real text. Processors whose ``__call__`` insists on text with placeholders get
:meth:`BaseDummyInputsBuilder.get_dummy_text` instead: one placeholder per item.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import numpy as np
from PIL import Image

from mediaref.processing.context import BaseProcessingInfo

_I = TypeVar("_I", bound=BaseProcessingInfo)


class BaseDummyInputsBuilder(ABC, Generic[_I]):
    """Builds the dummy text and dummy media a model's processor is exercised with."""

    def __init__(self, info: _I) -> None:
        self.info = info

    @abstractmethod
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        """Text with one input placeholder per item, e.g. ``"<image><image>"`` for two images."""

    @abstractmethod
    def get_dummy_mm_data(self, seq_len: int, mm_counts: Mapping[str, int]) -> dict[str, Any]:
        """Media that exercises the processor (for warmup and profiling), per modality."""

    # Small, deterministic building blocks for the per-model builders.

    @staticmethod
    def _get_dummy_images(*, width: int, height: int, num_images: int) -> list[Image.Image]:
        if num_images == 0:
            return []
        return [Image.new("RGB", (width, height), color=255)] * num_images

    @staticmethod
    def _get_dummy_videos(
        *, width: int, height: int, num_frames: int, num_videos: int
    ) -> list[np.ndarray]:
        if num_videos == 0:
            return []
        return [np.full((num_frames, height, width, 3), 255, dtype=np.uint8)] * num_videos

    @staticmethod
    def _get_dummy_audios(*, length: int, num_audios: int) -> list[np.ndarray]:
        if num_audios == 0:
            return []
        return [np.zeros((length,), dtype=np.float32)] * num_audios


__all__ = ["BaseDummyInputsBuilder"]
