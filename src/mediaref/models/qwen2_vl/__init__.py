"""Qwen2-VL (images and video) on the real ``transformers`` ``Qwen2VLProcessor``.

Each image or video becomes a grid of 14x14 patches (``*_grid_thw``); every ``merge_size**2``
patches make one placeholder token, so ``<|image_pad|>`` expands to ``grid_thw.prod() // 4``
copies. ``pixel_values`` holds all items' patches concatenated, cut per item by the grid sizes.

Qwen2-VL supports ``mm_device_do_normalize`` (on by default, as in vLLM 0.33): the HF processor is
then called with ``do_rescale=False, do_normalize=False`` and emits raw ``uint8``
``pixel_values`` / ``pixel_values_videos`` (a quarter of the fp32 bytes, in the cache and on the
wire), and the model applies :func:`mediaref.ops.mm_input_norm.build_mm_input_norm`'s module on the
device. The processor's output says which path it took (``mm_device_do_normalize``).

**The fused exact path** (on by default; ``MEDIAREF_QWEN2_VL_FUSED=0`` turns it off): images and
videos the HF processor would resize, patchify (and normalize) its own default way never reach it.
Each item is converted, resized once at its ``smart_resize`` target and written straight into
the final patch-row order on the media pool (:mod:`mediaref.models.qwen2_vl._fused`), bit-identical
to HF's default (torchvision) processors whatever the pool size; an item it cannot reproduce
exactly takes the HF call (:mod:`mediaref.models.qwen2_vl._routing`, which puts the outputs back
in item order). ``MEDIAREF_QWEN2_VL_APPROX`` opts into approximate modes
(:mod:`mediaref.models.qwen2_vl._approx`); none is on by default.

The package, in the order a call goes through it:

- ``_processing``: the processing info, data parser, dummy inputs and processor (the family
  registers there, as ``qwen2_vl``, when this package is imported); re-exported here.
- ``_routing``: one HF processor call split into the fused items and the HF rest, put back in
  item order.
- ``_fused_settings``: which items the fused path takes, and their target size.
- ``_fused``: decoded media -> patch rows (``_work_pieces``: one item's work cut across the
  media pool, futures drained whole).
- ``_patch_rows``: the pixel steps (RGB conversion, torch's resize, patch rows), through the
  native pass where it was built (``_patch_rows_native.c`` + ``_aa_resize.c``, the project's one
  C extension, ``mediaref.models.qwen2_vl._patch_rows_native``: torch's uint8 antialiased
  bicubic bit for bit, and patch rows in one pass), or torch and numpy (``_scratch_buffers``:
  the bounded pool their resize temporaries are leased from).
- ``_approx``: the opt-in approximate modes (``MEDIAREF_QWEN2_VL_APPROX``).
"""

from __future__ import annotations

from mediaref.models.qwen2_vl._processing import (
    Qwen2VLDataParser,
    Qwen2VLDummyInputsBuilder,
    Qwen2VLMultiModalProcessor,
    Qwen2VLProcessingInfo,
)
from mediaref.processing.context import device_normalize_kwargs

__all__ = [
    "Qwen2VLDataParser",
    "Qwen2VLDummyInputsBuilder",
    "Qwen2VLMultiModalProcessor",
    "Qwen2VLProcessingInfo",
    "device_normalize_kwargs",
]
