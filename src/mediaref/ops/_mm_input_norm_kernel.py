"""The Triton kernel behind :func:`mediaref.ops.mm_input_norm.fused_mm_input_norm_triton`.

Importing this module imports Triton, and ``@triton.jit`` decides at import time whether the
kernel compiles for a GPU or runs in Triton's CPU interpreter (``TRITON_INTERPRET=1``). The public
module therefore imports it lazily, on the first launch, and ``import mediaref.ops.mm_input_norm``
works where Triton is absent.

The input is seen as a matrix of *segments*: runs of ``segment_len`` consecutive elements that share
one channel, segment ``s`` having channel ``s % num_channels``. A program normalizes a tile of
``BLOCK_SEG`` segments x ``BLOCK_COL`` columns, so the channel (and its weight and bias) is found
once per segment instead of by an integer division per element, which would cost more than the
memory traffic this kernel is bound by.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def mm_input_norm_kernel(
    x_ptr,
    out_ptr,
    weight_ptr,
    bias_ptr,
    n_segments,
    segment_len,
    num_channels,
    n_col_blocks,
    BLOCK_SEG: tl.constexpr,
    BLOCK_COL: tl.constexpr,
):
    # One flat grid axis: either tile axis alone can exceed CUDA's 65,535 limit on grid axes 1-2.
    pid = tl.program_id(0)
    seg_block = pid // n_col_blocks
    col_block = pid % n_col_blocks
    # int64 offsets: a padded output buffer or a long video can exceed 2**31 elements.
    segments = seg_block.to(tl.int64) * BLOCK_SEG + tl.arange(0, BLOCK_SEG)[:, None]
    cols = col_block * BLOCK_COL + tl.arange(0, BLOCK_COL)[None, :]
    mask = (segments < n_segments) & (cols < segment_len)

    # `segments % num_channels` is a valid channel even for masked-off segments: no mask needed.
    channels = segments % num_channels
    weight = tl.load(weight_ptr + channels)
    bias = tl.load(bias_ptr + channels)

    offsets = segments * segment_len + cols
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    # fp32 lives in registers only; the store rounds straight to the output dtype.
    y = x * weight + bias
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)
