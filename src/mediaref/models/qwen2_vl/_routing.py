"""Routing a Qwen2-VL processor call: the items the fused path takes, and HF for the rest.

Every image and video is routed on its own (:mod:`mediaref.models.qwen2_vl._fused_settings`
says which can be fused, before any pixel work); the fused ones fan out on the media pool (a
single item cut into pieces, up to one a core: an image's bands of rows, a video's runs of
frames), the others go to the HF processor in one call, and the outputs are put back together in
item order, so the result reads as one HF call over all items.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from mediaref import envs
from mediaref.exceptions import VLLMValidationError
from mediaref.media.executor import get_media_executor
from mediaref.models.qwen2_vl._fused import fused_rows, joined_rows
from mediaref.models.qwen2_vl._fused_settings import (
    FusedVisionSettings,
    image_settings,
    image_target,
    video_settings,
    video_target,
)

if TYPE_CHECKING:
    from transformers import BatchFeature

__all__ = ["call_with_fused_path"]

_Rows = tuple[torch.Tensor, tuple[int, int, int]]


@dataclass(frozen=True)
class _Modality:
    data_key: str
    pixels_key: str
    grid_key: str
    video: bool


_MODALITIES = (
    _Modality("images", "pixel_values", "image_grid_thw", video=False),
    _Modality("videos", "pixel_values_videos", "video_grid_thw", video=True),
)


def _settings_for(
    modality: _Modality, hf_processor: Any, kwargs: Mapping[str, object], dtype: torch.dtype | None
) -> FusedVisionSettings | None:
    if modality.video:
        return video_settings(getattr(hf_processor, "video_processor", None), kwargs, dtype)
    return image_settings(getattr(hf_processor, "image_processor", None), kwargs, dtype)


def _media_pool_cores() -> int:
    """How many pieces a single item is cut into (an image's bands of rows, a video's runs of
    frames): as many as the media pool has threads and the process has cores (more would only
    queue)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(int(envs.VLLM_MEDIA_LOADING_THREAD_COUNT), cores))


def _split_hf_rows(output: BatchFeature, modality: _Modality) -> list[_Rows]:
    grids = output[modality.grid_key]
    chunks = torch.split(output[modality.pixels_key], grids.prod(-1).tolist())
    return [
        (chunk, (int(t), int(h), int(w)))
        for chunk, (t, h, w) in zip(chunks, grids.tolist(), strict=False)
    ]


def call_with_fused_path(
    hf_data: Mapping[str, object],
    merged_kwargs: Mapping[str, object],
    *,
    hf_processor: Any,
    dtype: torch.dtype | None,
    call_hf: Callable[[Mapping[str, object]], BatchFeature],
) -> BatchFeature:
    """The HF output for ``hf_data``, the fusable items computed without HF.

    ``merged_kwargs`` are the kwargs the HF call would receive (the configured ones merged in);
    ``call_hf(data)`` makes that call on a subset of the data.
    """
    from transformers import BatchFeature

    if not envs.MEDIAREF_QWEN2_VL_FUSED or set(hf_data) - {"images", "videos"}:
        return call_hf(hf_data)
    fused: dict[str, dict[int, _Rows]] = {}
    hf_rest: dict[str, list[object]] = {}
    hf_positions: dict[str, list[int]] = {}
    jobs: list[
        tuple[_Modality, list[int], list[object], list[tuple[int, int]], FusedVisionSettings]
    ] = []
    for modality in _MODALITIES:
        if modality.data_key not in hf_data:
            continue
        items = list(hf_data[modality.data_key])  # type: ignore[call-overload]
        settings = _settings_for(modality, hf_processor, merged_kwargs, dtype)
        check = video_target if modality.video else image_target
        targets = [check(item, settings) if settings else None for item in items]
        taken = [i for i, target in enumerate(targets) if target is not None]
        rest = [i for i, target in enumerate(targets) if target is None]
        if rest:
            hf_rest[modality.data_key] = [items[i] for i in rest]
            hf_positions[modality.data_key] = rest
        if taken and settings is not None:
            fused_targets = [target for target in targets if target is not None]
            jobs.append((modality, taken, [items[i] for i in taken], fused_targets, settings))
    if not jobs:
        return call_hf(hf_data)
    for modality, job_positions, job_items, job_targets, job_settings in jobs:
        try:
            rows = fused_rows(
                job_items,
                job_targets,
                job_settings,
                video=modality.video,
                executor=get_media_executor(),
                pieces=_media_pool_cores(),
            )
        except MemoryError:
            raise
        except Exception as exc:
            # As the HF call's failures surface (a ValueError naming the step), so a caller
            # maps a failing item the same way whichever path it took.
            raise VLLMValidationError(
                f"Failed to apply the fused Qwen2-VL {modality.data_key} path: {exc}"
            ) from exc
        fused[modality.data_key] = dict(zip(job_positions, rows, strict=True))
    hf_output = call_hf(hf_rest) if hf_rest else BatchFeature()
    data: dict[str, Any] = dict(hf_output.data)
    for modality in _MODALITIES:
        if modality.data_key not in hf_data:
            continue
        by_position = dict(fused.get(modality.data_key, {}))
        if modality.data_key in hf_rest:
            positions = hf_positions[modality.data_key]
            by_position.update(zip(positions, _split_hf_rows(hf_output, modality), strict=False))
        ordered = [by_position[i] for i in range(len(by_position))]
        pixels = [rows for rows, _ in ordered]
        # Fused items' rows are one buffer already (a cat would copy megabytes); HF's beside them
        # are joined by a copy.
        data[modality.pixels_key] = joined_rows(pixels)
        data[modality.grid_key] = torch.tensor([grid for _, grid in ordered], dtype=torch.long)
    return BatchFeature(data)
