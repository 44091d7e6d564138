"""Validation and layout of one ``mm_input_norm`` call, shared by the torch and Triton paths.

Both paths go through :func:`prepare_call`, so they accept and reject exactly the same inputs and
raise the same messages: ``TypeError`` for a wrong type or dtype, ``ValueError`` for a wrong shape,
device or channel count. (vLLM asserts; a bad call here names what is wrong instead.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import torch

INPUT_DTYPES: Final = (torch.uint8, torch.float16, torch.bfloat16, torch.float32)
VISUAL_DTYPES: Final = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class Layout:
    """``inputs`` seen as ``(outer, num_channels, segment_len)``: segments of one channel each."""

    outer: int
    num_channels: int
    segment_len: int


def resolve_layout(shape: torch.Size, num_channels: int, channel_dim: int) -> Layout:
    """Where the channel index lives: ``shape[channel_dim] == C``, or packed into the last dim.

    ``(N, C, L)`` (vLLM's call) and NCHW images have ``shape[1] == C``; channels-last images
    ``(N, H, W, C)`` use ``channel_dim=-1``. Only the *last* dimension may hold ``C * inner``
    elements with the channel as its slowest axis (Qwen2-VL's patch rows ``(patches, C * P)``), so
    a 6-channel image given to a 3-channel normalization is an error, not a silent misreading.
    """
    ndim = len(shape)
    if not -ndim <= channel_dim < ndim:
        raise ValueError(
            f"channel_dim={channel_dim} is out of range for inputs of shape {tuple(shape)}"
        )
    dim = channel_dim % ndim
    size = shape[dim]
    if size == num_channels:
        segment_len = math.prod(shape[dim + 1 :])
    elif dim == ndim - 1 and size > 0 and size % num_channels == 0:
        segment_len = size // num_channels
    else:
        packed_hint = " nor a multiple of it (packed channels)" if dim == ndim - 1 else ""
        raise ValueError(
            f"inputs.shape[{dim}] = {size} is not the normalization's channel count "
            f"{num_channels}{packed_hint}; inputs have shape {tuple(shape)}, "
            f"channel_dim={channel_dim}"
        )
    return Layout(math.prod(shape[:dim]), num_channels, segment_len)


def _check_coefficients(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> None:
    for name, coefficients in (("weight", weight), ("bias", bias)):
        if not isinstance(coefficients, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(coefficients).__name__}")
        if coefficients.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {coefficients.dtype}")
        if coefficients.ndim != 1 or coefficients.numel() == 0:
            raise ValueError(
                f"{name} must be 1-D with one entry per channel, got {tuple(coefficients.shape)}"
            )
        if coefficients.device != inputs.device:
            raise ValueError(
                f"{name} is on {coefficients.device} but inputs are on {inputs.device}; "
                "move the FusedMMInputNorm module with .to(device)"
            )
    if weight.shape != bias.shape:
        raise ValueError(
            f"weight {tuple(weight.shape)} and bias {tuple(bias.shape)} differ in length"
        )


def _check_outputs(inputs: torch.Tensor, outputs: torch.Tensor) -> None:
    """``outputs`` is ``inputs``' shape, or has more leading rows (only the first N are written)."""
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"outputs must be a torch.Tensor, got {type(outputs).__name__}")
    if outputs.dtype not in VISUAL_DTYPES:
        raise TypeError(
            f"outputs.dtype {outputs.dtype} is not a visual dtype; expected one of {VISUAL_DTYPES}"
        )
    if outputs.device != inputs.device:
        raise ValueError(f"outputs are on {outputs.device} but inputs are on {inputs.device}")
    if (
        outputs.ndim != inputs.ndim
        or outputs.shape[1:] != inputs.shape[1:]
        or outputs.shape[0] < inputs.shape[0]
    ):
        raise ValueError(
            f"outputs have shape {tuple(outputs.shape)}; they must match inputs "
            f"{tuple(inputs.shape)} except for at least as many rows in dimension 0"
        )
    # Rows are written by raw offset: a strided buffer would be written in the wrong places, and
    # copying it would break the caller's aliasing (the point of passing a buffer).
    if not outputs.is_contiguous():
        raise ValueError("outputs must be contiguous")


def prepare_call(
    inputs: torch.Tensor,
    outputs: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    channel_dim: int,
) -> Layout:
    """Validate one call (shared by both paths, so they fail alike) and resolve its layout."""
    if not isinstance(inputs, torch.Tensor):
        raise TypeError(f"inputs must be a torch.Tensor, got {type(inputs).__name__}")
    if inputs.dtype not in INPUT_DTYPES:
        raise TypeError(
            f"inputs.dtype {inputs.dtype} is not supported; expected one of {INPUT_DTYPES}"
        )
    if inputs.ndim == 0:
        raise ValueError("inputs must have at least one dimension")
    _check_coefficients(inputs, weight, bias)
    _check_outputs(inputs, outputs)
    return resolve_layout(inputs.shape, weight.numel(), channel_dim)


def check_visual_dtype(visual_dtype: torch.dtype) -> None:
    if visual_dtype not in VISUAL_DTYPES:
        raise TypeError(
            f"visual_dtype {visual_dtype!r} is not supported; expected one of {VISUAL_DTYPES}"
        )


__all__ = [
    "INPUT_DTYPES",
    "VISUAL_DTYPES",
    "Layout",
    "check_visual_dtype",
    "prepare_call",
    "resolve_layout",
]
