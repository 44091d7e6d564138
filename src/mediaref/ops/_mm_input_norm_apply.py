"""The two implementations of one ``mm_input_norm`` call: torch (CPU path, test oracle) and Triton.

Both take vLLM's call, ``(inputs, outputs, weight, bias)`` with ``inputs`` ``(N, C, L)``, write
``outputs[:N] = inputs * weight[c] + bias[c]`` computed in fp32, and return ``outputs``. mediaref's
extensions are keyword-only or relax a check, so a vLLM call means the same here:

- ``outputs`` may have more leading rows than ``inputs``: only the first ``N`` are written and the
  rest are left untouched, so one buffer serves a batch of any size;
- ``channel_dim`` (default 1) and any rank: NCHW images, Qwen2-VL's 2-D patch rows
  ``(patches, C * P)`` (the channel packed into the last dimension), channels-last images with
  ``channel_dim=-1`` (see :func:`~mediaref.ops._mm_input_norm_layout.resolve_layout`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any, Final

import torch

from mediaref.ops._mm_input_norm_layout import prepare_call

# The CPU path works in chunks of this many elements: its fp32 temporaries (1 MiB) stay in cache
# and are recycled by the allocator instead of faulting in fresh pages for a full-size tensor.
_CPU_CHUNK_ELEMENTS: Final = 1 << 18
# Elements per Triton program: 16 per lane at 8 warps, so each lane loads one full 16-byte uint8
# vector and stores two of bf16; the CPU interpreter (one Python step per program) stays quick too.
# Picked on an H200 by benchmarks/bench_mm_input_norm.py's sweep: over 4 warps, 8 took a 1 MP
# image from 25 to 16 us and a 32-frame clip from 49 to 35 us, and was the best or level elsewhere.
_TILE_ELEMENTS: Final = 4096
_NUM_WARPS: Final = 8
_MAX_PROGRAMS: Final = 2**31 - 1
# The largest alignment worth telling the compiler: 16 elements fill a 16-byte uint8 vector.
_MAX_SEG_ALIGN: Final = 16


def fused_mm_input_norm_torch(
    inputs: torch.Tensor,
    outputs: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    *,
    channel_dim: int = 1,
) -> torch.Tensor:
    """Torch reference and CPU path: same contract as :func:`fused_mm_input_norm_triton`.

    ``inputs`` may be strided; it is read in place, never modified, never copied whole.
    """
    layout = prepare_call(inputs, outputs, weight, bias, channel_dim)
    if inputs.numel() == 0:
        return outputs
    outer, channels, segment_len = layout.outer, layout.num_channels, layout.segment_len
    x3 = inputs.reshape(outer, channels, segment_len)
    target3 = outputs[: inputs.shape[0]].view(outer, channels, segment_len)
    weight3, bias3 = weight.view(1, channels, 1), bias.view(1, channels, 1)

    # Devices other than the CPU gain nothing from chunks and would pay a launch for each.
    chunk = _CPU_CHUNK_ELEMENTS if inputs.device.type == "cpu" else inputs.numel()
    segment_step = min(segment_len, max(1, chunk // channels))
    outer_step = max(1, chunk // (channels * segment_step))
    for o in range(0, outer, outer_step):
        for s in range(0, segment_len, segment_step):
            block = x3[o : o + outer_step, :, s : s + segment_step]
            # Promotion against the fp32 weight makes the product fp32 for every input dtype, and a
            # new tensor, so the in-place add never touches the inputs.
            normalized = torch.mul(block, weight3)
            normalized.add_(bias3)
            target3[o : o + outer_step, :, s : s + segment_step].copy_(normalized)
    return outputs


@functools.cache
def triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _load_kernel() -> Any:
    try:
        from mediaref.ops._mm_input_norm_kernel import mm_input_norm_kernel
    except ImportError as exc:
        raise RuntimeError(
            "fused_mm_input_norm_triton needs Triton, which is not installed here; "
            "use fused_mm_input_norm_torch"
        ) from exc
    return mm_input_norm_kernel


def _runs_in_interpreter(kernel: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def _next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def segment_alignment(segment_len: int) -> int:
    """The largest power of two up to 16 that divides ``segment_len`` (its lowest set bit)."""
    return min(segment_len & -segment_len, _MAX_SEG_ALIGN)


def fused_mm_input_norm_triton(
    inputs: torch.Tensor,
    outputs: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    *,
    channel_dim: int = 1,
) -> torch.Tensor:
    """Fused per-channel affine map ``outputs[:N] = inputs * weight[c] + bias[c]`` (fp32 compute).

    Args:
        inputs: ``(N, C, L)`` in uint8, fp16, bf16 or fp32; a contiguous copy is made if needed.
        outputs: contiguous, ``(N, C, L)`` or with more rows than ``N``, in the visual dtype.
        weight: per-channel scale ``(C,)``, fp32.
        bias: per-channel shift ``(C,)``, fp32.
        channel_dim: keyword-only extension; other layouts (see the module docstring).

    Returns:
        ``outputs``, for chaining.

    Needs CUDA tensors, or Triton's CPU interpreter (``TRITON_INTERPRET=1`` set before this op's
    kernel module is first imported).
    """
    layout = prepare_call(inputs, outputs, weight, bias, channel_dim)
    kernel = _load_kernel()
    if not inputs.is_cuda and not _runs_in_interpreter(kernel):
        raise ValueError(
            f"fused_mm_input_norm_triton needs CUDA tensors, inputs are on {inputs.device}; use "
            "fused_mm_input_norm_torch, or set TRITON_INTERPRET=1 before importing Triton kernels"
        )
    if inputs.numel() == 0:
        return outputs

    segment_len = layout.segment_len
    n_segments = layout.outer * layout.num_channels
    block_col = min(_next_power_of_2(segment_len), _TILE_ELEMENTS)
    block_seg = max(1, _TILE_ELEMENTS // block_col)
    seg_align = segment_alignment(segment_len)
    n_col_blocks = math.ceil(segment_len / block_col)
    n_programs = math.ceil(n_segments / block_seg) * n_col_blocks
    if n_programs > _MAX_PROGRAMS or segment_len + block_col >= 2**31:
        raise ValueError(
            f"inputs of shape {tuple(inputs.shape)} need more programs than a grid allows"
        )

    device_guard = torch.cuda.device(inputs.device) if inputs.is_cuda else contextlib.nullcontext()
    with device_guard:
        kernel[(n_programs,)](
            inputs.contiguous(),
            outputs,
            weight.contiguous(),
            bias.contiguous(),
            n_segments,
            segment_len // seg_align,
            n_col_blocks,
            NUM_CHANNELS=layout.num_channels,
            SEG_ALIGN=seg_align,
            BLOCK_SEG=block_seg,
            BLOCK_COL=block_col,
            num_warps=_NUM_WARPS,
        )
    return outputs


__all__ = [
    "fused_mm_input_norm_torch",
    "fused_mm_input_norm_triton",
    "segment_alignment",
    "triton_importable",
]
