"""Validation and layout of one ``mm_input_norm`` call, shared by the torch and Triton paths.

Both paths go through :func:`prepare_call`, so they accept and reject exactly the same inputs and
raise the same messages: ``TypeError`` for a wrong type or dtype, ``ValueError`` for a wrong shape,
device or channel count.
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
    """``x`` seen as ``(outer, num_channels, segment_len)``: segments of one channel each."""

    outer: int
    num_channels: int
    segment_len: int


def resolve_layout(shape: torch.Size, num_channels: int, channel_dim: int) -> Layout:
    ndim = len(shape)
    if not -ndim <= channel_dim < ndim:
        raise ValueError(f"channel_dim={channel_dim} is out of range for x of shape {tuple(shape)}")
    dim = channel_dim % ndim
    size = shape[dim]
    if size == num_channels:
        segment_len = math.prod(shape[dim + 1 :])
    elif dim == ndim - 1 and size > 0 and size % num_channels == 0:
        segment_len = size // num_channels
    else:
        packed_hint = " nor a multiple of it (packed channels)" if dim == ndim - 1 else ""
        raise ValueError(
            f"x.shape[{dim}] = {size} is not the normalization's channel count "
            f"{num_channels}{packed_hint}; x has shape {tuple(shape)}, channel_dim={channel_dim}"
        )
    return Layout(math.prod(shape[:dim]), num_channels, segment_len)


def _check_coefficients(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> None:
    for name, coefficients in (("weight", weight), ("bias", bias)):
        if not isinstance(coefficients, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(coefficients).__name__}")
        if coefficients.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {coefficients.dtype}")
        if coefficients.ndim != 1 or coefficients.numel() == 0:
            raise ValueError(
                f"{name} must be 1-D with one entry per channel, got {tuple(coefficients.shape)}"
            )
        if coefficients.device != x.device:
            raise ValueError(
                f"{name} is on {coefficients.device} but x is on {x.device}; "
                "move the FusedMMInputNorm module with .to(device)"
            )
    if weight.shape != bias.shape:
        raise ValueError(
            f"weight {tuple(weight.shape)} and bias {tuple(bias.shape)} differ in length"
        )


def _output_rows(
    x: torch.Tensor, visual_dtype: torch.dtype, out: torch.Tensor | None
) -> torch.Tensor:
    """The tensor to write: a new one, or the leading ``x.shape[0]`` rows of ``out``."""
    if out is None:
        return torch.empty(x.shape, dtype=visual_dtype, device=x.device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")
    if out.dtype != visual_dtype:
        raise TypeError(f"out.dtype is {out.dtype} but visual_dtype is {visual_dtype}")
    if out.device != x.device:
        raise ValueError(f"out is on {out.device} but x is on {x.device}")
    if out.ndim != x.ndim or out.shape[1:] != x.shape[1:] or out.shape[0] < x.shape[0]:
        raise ValueError(
            f"out has shape {tuple(out.shape)}; it must match x {tuple(x.shape)} "
            "except for at least as many rows in dimension 0"
        )
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    return out[: x.shape[0]]


def prepare_call(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    visual_dtype: torch.dtype,
    out: torch.Tensor | None,
    channel_dim: int,
) -> tuple[Layout, torch.Tensor]:
    """Validate one call (shared by both paths, so they fail alike) and pick its output rows."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        raise TypeError(f"x.dtype {x.dtype} is not supported; expected one of {INPUT_DTYPES}")
    if visual_dtype not in VISUAL_DTYPES:
        raise TypeError(
            f"visual_dtype {visual_dtype!r} is not supported; expected one of {VISUAL_DTYPES}"
        )
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension")
    _check_coefficients(x, weight, bias)
    layout = resolve_layout(x.shape, weight.numel(), channel_dim)
    return layout, _output_rows(x, visual_dtype, out)
