"""The Triton kernel behind :func:`mediaref.ops.mm_input_norm.fused_mm_input_norm_triton`.

Importing this module imports Triton, and ``@triton.jit`` decides at import time whether the
kernel compiles for a GPU or runs in Triton's CPU interpreter (``TRITON_INTERPRET=1``). The public
module therefore imports it lazily, on the first launch, and ``import mediaref.ops.mm_input_norm``
works where Triton is absent.

The input is seen as a matrix of *segments*: runs of ``segment_len`` consecutive elements that share
one channel, segment ``s`` having channel ``s % NUM_CHANNELS`` (``(N, C, L)`` has ``N * C``
segments of ``L``). A program normalizes a tile of ``BLOCK_SEG`` segments x ``BLOCK_COL`` columns,
so the channel (and its weight and bias) is found once per segment, with a modulo by a compile-time
constant, instead of vLLM's integer division of every flat offset by a run-time ``L``.

Memory access is what this kernel costs, so two details serve the vector units:

- ``segment_len`` arrives as ``segment_units * SEG_ALIGN`` with ``SEG_ALIGN`` a compile-time power
  of two dividing it (8 for Qwen2-VL's 392-element patch segments). Triton then knows every row
  start and the column mask are ``SEG_ALIGN``-aligned and emits vector loads and stores; a plain
  run-time ``392`` would give it no alignment at all and one byte per load.
- the tile's first element offset is a 64-bit scalar, the offsets inside a tile 32-bit (a tile
  spans less than ``segment_len + BLOCK_COL`` elements): int64 arithmetic per element would cost
  issue slots, and a padded output buffer or a long video can exceed 2**31 elements in all.
"""

from __future__ import annotations

import triton
import triton.language as tl


# Triton ships no type information, and the kernel's parameters stay unannotated on purpose:
# Triton reads parameter annotations to decide specialization and hashes them into its cache key.
@triton.jit  # type: ignore[untyped-decorator]  # triton has no stubs
def mm_input_norm_kernel(  # type: ignore[no-untyped-def]  # annotations change what Triton compiles
    x_ptr,
    out_ptr,
    weight_ptr,
    bias_ptr,
    n_segments,
    segment_units,
    n_col_blocks,
    NUM_CHANNELS: tl.constexpr,
    SEG_ALIGN: tl.constexpr,
    BLOCK_SEG: tl.constexpr,
    BLOCK_COL: tl.constexpr,
):
    # One flat grid axis: either tile axis alone can exceed CUDA's 65,535 limit on grid axes 1-2.
    pid = tl.program_id(0)
    seg_block = pid // n_col_blocks
    col_block = pid % n_col_blocks
    segment_len = segment_units * SEG_ALIGN

    first_segment = seg_block.to(tl.int64) * BLOCK_SEG
    tile_start = first_segment * segment_len  # int64 scalar: the only wide arithmetic
    local_segments = tl.arange(0, BLOCK_SEG)[:, None]
    cols = col_block * BLOCK_COL + tl.arange(0, BLOCK_COL)[None, :]
    mask = (first_segment + local_segments < n_segments) & (cols < segment_len)

    # The coefficients are C scalars loaded once per program and picked per segment by selects:
    # gathering them per segment (`tl.load(weight_ptr + channels)`) is replicated across the
    # tile's layout into about two loads per element.
    channels = (first_segment + local_segments) % NUM_CHANNELS
    weight = tl.zeros((BLOCK_SEG, 1), dtype=tl.float32)
    bias = tl.zeros((BLOCK_SEG, 1), dtype=tl.float32)
    for c in tl.static_range(NUM_CHANNELS):
        weight = tl.where(channels == c, tl.load(weight_ptr + c), weight)
        bias = tl.where(channels == c, tl.load(bias_ptr + c), bias)

    offsets = local_segments * segment_len + cols
    # Every byte is read once and written once: keep the stream out of the way of other data in L2.
    x = tl.load(x_ptr + tile_start + offsets, mask=mask, eviction_policy="evict_first")
    # fp32 lives in registers only; the store rounds straight to the output dtype.
    y = x.to(tl.float32) * weight + bias
    tl.store(
        out_ptr + tile_start + offsets,
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
        eviction_policy="evict_first",
    )
