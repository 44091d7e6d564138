"""Fused rescale + normalize of image inputs on the device: ``y = x * weight[c] + bias[c]``.

HF image processors divide pixels by 255, subtract the mean and divide by the std on the CPU, then
the model casts to its visual dtype. Folding the three steps into one per-channel affine map::

    weight[c] = rescale_factor / image_std[c]
    bias[c]   = -image_mean[c] / image_std[c]
    y         = x * weight[c] + bias[c]  ==  (x * rescale_factor - image_mean[c]) / image_std[c]

lets ``uint8`` pixels travel to the device (1 byte per element instead of 2 for bf16) and be
normalized there in one pass: the input is read in its own dtype (``uint8``, ``float16``,
``bfloat16`` or ``float32``), the arithmetic runs in fp32, and the result is written in
``visual_dtype`` directly, without a global fp32 intermediate.

Where the channel index comes from (``channel_dim``, default 1):

- ``x.shape[channel_dim] == C``: one channel per index, e.g. images ``(N, C, H, W)``, or
  channels-last ``(N, H, W, C)`` with ``channel_dim=-1``.
- the *last* dimension may also hold ``C * inner`` elements with the channel as its slowest axis:
  the flattened patch rows ``(N, C * T * P * P)`` of Qwen2-VL's ``pixel_values``, where
  ``channel = (col // inner) % C``. Only the last dimension may pack channels, so a 6-channel
  image given to a 3-channel normalization is an error rather than a silent misreading.

Dimension 0 is the batch. ``out`` may have more rows than ``x``: only the leading ``x.shape[0]``
rows are written and the rest are left untouched, so one buffer serves calls of any batch size.
Every function returns the written rows.

:class:`FusedMMInputNorm` dispatches to :func:`fused_mm_input_norm_triton` on CUDA and to
:func:`fused_mm_input_norm_torch` elsewhere (vLLM's ``forward_cuda`` / ``forward_native``). The
torch function is both the CPU path and the oracle the kernel is tested against.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Sequence
from typing import Any, Final

import torch
from torch import nn

from mediaref.ops._mm_input_norm_layout import INPUT_DTYPES, VISUAL_DTYPES, prepare_call

# The CPU path works in chunks of this many elements: its fp32 temporaries (1 MiB) stay in cache
# and are recycled by the allocator instead of faulting in fresh pages for a full-size tensor.
_CPU_CHUNK_ELEMENTS: Final = 1 << 18
# Elements per Triton program; large enough that the interpreter (one Python step per program)
# stays quick, small enough to give every SM many programs on real inputs.
_TILE_ELEMENTS: Final = 4096
_NUM_WARPS: Final = 4
_MAX_PROGRAMS: Final = 2**31 - 1


def fused_mm_input_norm_torch(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    *,
    visual_dtype: torch.dtype = torch.bfloat16,
    out: torch.Tensor | None = None,
    channel_dim: int = 1,
) -> torch.Tensor:
    """Torch reference and CPU path: ``x * weight[c] + bias[c]`` in fp32, stored as ``visual_dtype``.

    ``x`` may be strided; ``out`` (optional) must be contiguous, with at least ``x.shape[0]`` rows.
    """
    layout, target = prepare_call(x, weight, bias, visual_dtype, out, channel_dim)
    if x.numel() == 0:
        return target
    outer, channels, segment_len = layout.outer, layout.num_channels, layout.segment_len
    x3 = x.reshape(outer, channels, segment_len)
    target3 = target.view(outer, channels, segment_len)
    weight3, bias3 = weight.view(1, channels, 1), bias.view(1, channels, 1)

    # Devices other than the CPU gain nothing from chunks and would pay a launch for each.
    chunk = _CPU_CHUNK_ELEMENTS if x.device.type == "cpu" else x.numel()
    segment_step = min(segment_len, max(1, chunk // channels))
    outer_step = max(1, chunk // (channels * segment_step))
    for o in range(0, outer, outer_step):
        for s in range(0, segment_len, segment_step):
            block = x3[o : o + outer_step, :, s : s + segment_step]
            # Promotion against the fp32 weight makes the product fp32 for every input dtype, and a
            # new tensor, so the in-place add never touches x.
            normalized = torch.mul(block, weight3)
            normalized.add_(bias3)
            target3[o : o + outer_step, :, s : s + segment_step].copy_(normalized)
    return target


@functools.cache
def _triton_importable() -> bool:
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


def fused_mm_input_norm_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    *,
    visual_dtype: torch.dtype = torch.bfloat16,
    out: torch.Tensor | None = None,
    channel_dim: int = 1,
) -> torch.Tensor:
    """Launch the Triton kernel: same contract as :func:`fused_mm_input_norm_torch`.

    Needs CUDA tensors, or Triton's CPU interpreter (``TRITON_INTERPRET=1`` set before this op's
    kernel module is first imported). A non-contiguous ``x`` is copied to a contiguous one first.
    """
    layout, target = prepare_call(x, weight, bias, visual_dtype, out, channel_dim)
    kernel = _load_kernel()
    if not x.is_cuda and not _runs_in_interpreter(kernel):
        raise ValueError(
            f"fused_mm_input_norm_triton needs CUDA tensors, x is on {x.device}; use "
            "fused_mm_input_norm_torch, or set TRITON_INTERPRET=1 before importing Triton kernels"
        )
    if x.numel() == 0:
        return target

    segment_len = layout.segment_len
    n_segments = layout.outer * layout.num_channels
    block_col = min(_next_power_of_2(segment_len), _TILE_ELEMENTS)
    block_seg = _TILE_ELEMENTS // block_col
    n_col_blocks = math.ceil(segment_len / block_col)
    n_programs = math.ceil(n_segments / block_seg) * n_col_blocks
    if n_programs > _MAX_PROGRAMS:
        raise ValueError(f"x of shape {tuple(x.shape)} needs more programs than a grid allows")

    device_guard = torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()
    with device_guard:
        kernel[(n_programs,)](
            x.contiguous(),
            target,
            weight.contiguous(),
            bias.contiguous(),
            n_segments,
            segment_len,
            layout.num_channels,
            n_col_blocks,
            BLOCK_SEG=block_seg,
            BLOCK_COL=block_col,
            num_warps=_NUM_WARPS,
        )
    return target


class FusedMMInputNorm(nn.Module):
    """Per-channel rescale + normalize as one affine map, held as fp32 ``weight``/``bias`` buffers.

    The buffers are derived from the processor config, not learned, so they are not persistent:
    they stay out of ``state_dict`` and never clash with a checkpoint's keys.
    """

    weight: torch.Tensor
    bias: torch.Tensor

    def __init__(
        self, rescale_factor: float, image_mean: Sequence[float], image_std: Sequence[float]
    ) -> None:
        super().__init__()
        if len(image_mean) != len(image_std) or len(image_mean) == 0:
            raise ValueError(
                f"image_mean ({len(image_mean)}) and image_std ({len(image_std)}) need one "
                "entry per channel, and the same number of them"
            )
        if any(float(std) == 0.0 for std in image_std):
            raise ValueError(f"image_std must not contain zeros, got {list(image_std)}")
        self.rescale_factor = float(rescale_factor)
        self.image_mean = tuple(float(mean) for mean in image_mean)
        self.image_std = tuple(float(std) for std in image_std)
        weight, bias = self._fold_coefficients(torch.device("cpu"))
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer("bias", bias, persistent=False)

    def _fold_coefficients(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        # Folded in float64 so each fp32 coefficient is the correctly rounded value.
        std = torch.tensor(self.image_std, dtype=torch.float64)
        mean = torch.tensor(self.image_mean, dtype=torch.float64)
        weight = (self.rescale_factor / std).to(device=device, dtype=torch.float32)
        return weight, (-mean / std).to(device=device, dtype=torch.float32)

    def _apply(self, fn: Any, recurse: bool = True) -> FusedMMInputNorm:
        super()._apply(fn, recurse)
        # A model-wide cast (`model.to(torch.bfloat16)`, `.half()`) must not reach the coefficients:
        # the op computes in fp32, so refold them at full precision wherever the buffers now live.
        if self.weight.dtype != torch.float32 or self.bias.dtype != torch.float32:
            self.weight, self.bias = self._fold_coefficients(self.weight.device)
        return self

    @classmethod
    def from_image_processor(cls, image_processor: Any) -> FusedMMInputNorm:
        """Build from an HF image processor's ``rescale_factor``/``image_mean``/``image_std``.

        Honours ``do_rescale=False`` (factor 1) and ``do_normalize=False`` (mean 0, std 1), so the
        module reproduces exactly what that processor would have done on the CPU.
        """
        image_mean = list(image_processor.image_mean)
        image_std = list(image_processor.image_std)
        rescale_factor = image_processor.rescale_factor
        if not getattr(image_processor, "do_rescale", True):
            rescale_factor = 1.0
        if not getattr(image_processor, "do_normalize", True):
            image_mean, image_std = [0.0] * len(image_mean), [1.0] * len(image_mean)
        return cls(rescale_factor, image_mean, image_std)

    @property
    def num_channels(self) -> int:
        return self.weight.numel()

    def forward(
        self,
        x: torch.Tensor,
        visual_dtype: torch.dtype = torch.bfloat16,
        out: torch.Tensor | None = None,
        channel_dim: int = 1,
    ) -> torch.Tensor:
        """Normalize ``x``; Triton on CUDA tensors when Triton is installed, torch otherwise."""
        if isinstance(x, torch.Tensor) and x.is_cuda and _triton_importable():
            return self.forward_cuda(x, visual_dtype, out, channel_dim)
        return self.forward_native(x, visual_dtype, out, channel_dim)

    def forward_native(
        self,
        x: torch.Tensor,
        visual_dtype: torch.dtype = torch.bfloat16,
        out: torch.Tensor | None = None,
        channel_dim: int = 1,
    ) -> torch.Tensor:
        return fused_mm_input_norm_torch(
            x, self.weight, self.bias, visual_dtype=visual_dtype, out=out, channel_dim=channel_dim
        )

    def forward_cuda(
        self,
        x: torch.Tensor,
        visual_dtype: torch.dtype = torch.bfloat16,
        out: torch.Tensor | None = None,
        channel_dim: int = 1,
    ) -> torch.Tensor:
        return fused_mm_input_norm_triton(
            x, self.weight, self.bias, visual_dtype=visual_dtype, out=out, channel_dim=channel_dim
        )

    def extra_repr(self) -> str:
        return (
            f"rescale_factor={self.rescale_factor}, image_mean={self.image_mean}, "
            f"image_std={self.image_std}"
        )


__all__ = [
    "INPUT_DTYPES",
    "VISUAL_DTYPES",
    "FusedMMInputNorm",
    "fused_mm_input_norm_torch",
    "fused_mm_input_norm_triton",
]
