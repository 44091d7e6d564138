"""Fused rescale + normalize of pixel values on the device: ``y = x * weight[c] + bias[c]``.

vLLM 0.33.0's ``vllm.model_executor.layers.fusion.mm_input_norm``, name for name. HF image
processors divide pixels by 255, subtract the mean and divide by the std on the CPU, then the model
casts to its visual dtype. Folding the three steps into one per-channel affine map::

    weight[c] = rescale_factor / image_std[c]
    bias[c]   = -image_mean[c] / image_std[c]
    y         = x * weight[c] + bias[c]  ==  (x * rescale_factor - image_mean[c]) / image_std[c]

lets ``uint8`` pixels travel to the device (1 byte per element instead of 2 for bf16) and be
normalized there in one pass: the input is read in its own dtype (``uint8``, ``float16``,
``bfloat16`` or ``float32``), the arithmetic runs in fp32, and the result is written in
``visual_dtype`` directly, without a global fp32 intermediate.

- :func:`fused_mm_input_norm_triton` ``(inputs, outputs, weight, bias) -> outputs``: the kernel;
  :func:`fused_mm_input_norm_torch` is its torch twin (CPU path and test oracle).
- :class:`FusedMMInputNorm` ``(image_mean, image_std, rescale_factor, channel=3)``: the module a
  model applies to its ``pixel_values`` ``(patches, C * P)``; ``forward_cuda`` launches the kernel,
  ``forward_native`` is the semantic reference, ``forward`` picks by the tensor's device.
- :class:`IdentityInputNorm`: the stand-in for processors that neither rescale nor normalize (still
  a cast: raw pixels must reach ``visual_dtype``).
- :func:`build_mm_input_norm` ``(model_config)``: the one a model should hold, from the model
  config's ``mm_device_do_normalize`` and processor config (:func:`_load_norm_params`).

mediaref's additions are keyword-only and never change a vLLM call: ``outputs`` / ``out`` with more
rows than the batch (one buffer serves any batch), other layouts through ``channel_dim`` (NCHW,
channels-last), and the kernel's segment tiling (see ``_mm_input_norm_kernel``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from mediaref.ops._mm_input_norm_apply import (
    fused_mm_input_norm_torch,
    fused_mm_input_norm_triton,
    triton_importable,
)
from mediaref.ops._mm_input_norm_layout import (
    INPUT_DTYPES,
    VISUAL_DTYPES,
    check_visual_dtype,
)
from mediaref.ops._mm_input_norm_params import (
    NormParams,
    _load_norm_params,
    norm_params_from_config,
)


class IdentityInputNorm(nn.Module):
    """Stand-in when the processor neither rescales nor normalizes.

    Not a no-op: with ``mm_device_do_normalize`` on, raw ``uint8`` pixels reach the model and must
    still be cast to ``visual_dtype`` here.
    """

    @property
    def input_dtype(self) -> torch.dtype | None:
        return None

    def forward(self, pixel_values: torch.Tensor, visual_dtype: torch.dtype) -> torch.Tensor:
        return pixel_values.to(visual_dtype, copy=False)


class FusedMMInputNorm(nn.Module):
    """Rescale + normalize ``pixel_values`` as one affine map: ``(x * rescale - mean) / std``.

    Input dtype: ``uint8`` when ``mm_device_do_normalize`` is on (raw bytes reach the device), else
    whatever the processor emitted. Output dtype: the ``visual_dtype`` argument; the arithmetic is
    fp32 whatever the two are. ``weight`` and ``bias`` are fp32 buffers derived from the processor
    config, not learned, so they are not persistent: they stay out of ``state_dict`` and survive
    dummy weight loading and model-wide dtype casts.
    """

    weight: torch.Tensor
    bias: torch.Tensor

    def __init__(
        self,
        image_mean: Sequence[float],
        image_std: Sequence[float],
        rescale_factor: float,
        channel: int = 3,
    ) -> None:
        super().__init__()
        if not len(image_mean) == len(image_std) == channel:
            raise ValueError(
                f"image_mean/image_std must have {channel} entries, "
                f"got {len(image_mean)} / {len(image_std)}"
            )
        if float(rescale_factor) == 0.0:
            raise ValueError("rescale_factor must be non-zero")
        if any(float(std) == 0.0 for std in image_std):
            raise ValueError(f"image_std must not contain zeros, got {list(image_std)}")
        self.channel = channel
        self.rescale_factor = float(rescale_factor)
        self.image_mean = tuple(float(mean) for mean in image_mean)
        self.image_std = tuple(float(std) for std in image_std)
        # Model construction may make the accelerator torch's default device: fold on the CPU,
        # then move there.
        weight, bias = self._fold_coefficients(torch.get_default_device())
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer("bias", bias, persistent=False)

    def _fold_coefficients(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        # Folded in float64, so each fp32 coefficient is the correctly rounded value.
        std = torch.tensor(self.image_std, dtype=torch.float64, device="cpu")
        mean = torch.tensor(self.image_mean, dtype=torch.float64, device="cpu")
        weight = (self.rescale_factor / std).to(device=device, dtype=torch.float32)
        return weight, (-mean / std).to(device=device, dtype=torch.float32)

    def _apply(self, fn: Any, recurse: bool = True) -> FusedMMInputNorm:
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves _apply unannotated
        # A model-wide cast (`model.to(torch.bfloat16)`, `.half()`) must not reach the coefficients:
        # the op computes in fp32, so refold them at full precision wherever the buffers now live.
        if self.weight.dtype != torch.float32 or self.bias.dtype != torch.float32:
            self.weight, self.bias = self._fold_coefficients(self.weight.device)
        return self

    @classmethod
    def from_image_processor(cls, image_processor: Any) -> FusedMMInputNorm:
        """Build from an HF image processor object, folding ``do_rescale``/``do_normalize`` as
        :func:`_load_norm_params` folds them from a config file (mediaref extension)."""
        keys = ("do_rescale", "do_normalize", "rescale_factor", "image_mean", "image_std")
        config = {
            key: getattr(image_processor, key) for key in keys if hasattr(image_processor, key)
        }
        params = norm_params_from_config(config)
        return cls(
            params.image_mean, params.image_std, params.rescale_factor, len(params.image_mean)
        )

    @classmethod
    def enabled(cls) -> bool:
        """Always on, as in vLLM: the op has a torch path on every platform."""
        return True

    @property
    def input_dtype(self) -> torch.dtype | None:
        return torch.uint8

    @property
    def num_channels(self) -> int:
        return self.channel

    def _prepare(
        self,
        pixel_values: torch.Tensor,
        visual_dtype: torch.dtype,
        out: torch.Tensor | None,
        channel_dim: int | None,
    ) -> tuple[torch.Tensor, int]:
        """Check vLLM's 2-D patch-row contract (unless ``channel_dim`` asks for another layout)
        and pick the tensor to write: a new one, or ``out``."""
        check_visual_dtype(visual_dtype)
        if not isinstance(pixel_values, torch.Tensor):
            raise TypeError(
                f"pixel_values must be a torch.Tensor, got {type(pixel_values).__name__}"
            )
        if channel_dim is None:
            if pixel_values.ndim != 2:
                raise ValueError(
                    f"pixel_values must be 2D (patches, size), got {pixel_values.ndim}D with shape "
                    f"{tuple(pixel_values.shape)}; pass channel_dim= for other layouts"
                )
            if pixel_values.shape[1] % self.channel:
                raise ValueError(
                    f"size={pixel_values.shape[1]} is not divisible by channel={self.channel}"
                )
            channel_dim = 1
        if out is None:
            out = torch.empty(pixel_values.shape, dtype=visual_dtype, device=pixel_values.device)
        elif isinstance(out, torch.Tensor) and out.dtype != visual_dtype:
            raise TypeError(f"out.dtype is {out.dtype} but visual_dtype is {visual_dtype}")
        return out, channel_dim

    def forward(
        self,
        pixel_values: torch.Tensor,
        visual_dtype: torch.dtype,
        *,
        out: torch.Tensor | None = None,
        channel_dim: int | None = None,
    ) -> torch.Tensor:
        """Normalize: the Triton kernel on CUDA tensors where Triton is installed, torch otherwise."""
        if isinstance(pixel_values, torch.Tensor) and pixel_values.is_cuda and triton_importable():
            return self.forward_cuda(pixel_values, visual_dtype, out=out, channel_dim=channel_dim)
        return self.forward_native(pixel_values, visual_dtype, out=out, channel_dim=channel_dim)

    def forward_native(
        self,
        pixel_values: torch.Tensor,
        visual_dtype: torch.dtype,
        *,
        out: torch.Tensor | None = None,
        channel_dim: int | None = None,
    ) -> torch.Tensor:
        """Pure torch: the semantic reference, and the path on every device without the kernel.

        ``pixel_values`` are vLLM's ``(patches, C * P)`` rows unless ``channel_dim`` names another
        layout. Returns the normalized rows: a new tensor, or the leading rows of ``out``.
        """
        target, dim = self._prepare(pixel_values, visual_dtype, out, channel_dim)
        fused_mm_input_norm_torch(pixel_values, target, self.weight, self.bias, channel_dim=dim)
        return target[: pixel_values.shape[0]]

    def forward_cuda(
        self,
        pixel_values: torch.Tensor,
        visual_dtype: torch.dtype,
        *,
        out: torch.Tensor | None = None,
        channel_dim: int | None = None,
    ) -> torch.Tensor:
        """The Triton kernel (CUDA tensors, or the CPU interpreter); same contract as native."""
        target, dim = self._prepare(pixel_values, visual_dtype, out, channel_dim)
        fused_mm_input_norm_triton(pixel_values, target, self.weight, self.bias, channel_dim=dim)
        return target[: pixel_values.shape[0]]

    def forward_xpu(self, pixel_values: torch.Tensor, visual_dtype: torch.dtype) -> torch.Tensor:
        """vLLM's XPU entry point; mediaref ships no XPU kernel, so the torch path."""
        return self.forward_native(pixel_values, visual_dtype)

    def forward_oot(self, pixel_values: torch.Tensor, visual_dtype: torch.dtype) -> torch.Tensor:
        """Out-of-tree platform entry point: the torch path unless a plugin overrides it."""
        return self.forward_native(pixel_values, visual_dtype)

    def extra_repr(self) -> str:
        return (
            f"image_mean={self.image_mean}, image_std={self.image_std}, "
            f"rescale_factor={self.rescale_factor}, channel={self.channel}"
        )


def _mm_device_do_normalize(model_config: Any) -> bool:
    """The resolved toggle: vLLM's ``model_config.multimodal_config.mm_device_do_normalize``, or
    mediaref's ``ModelConfig.get_mm_device_do_normalize()``."""
    mm_config = getattr(model_config, "multimodal_config", None)
    if mm_config is not None:
        return bool(getattr(mm_config, "mm_device_do_normalize", False))
    resolve = getattr(model_config, "get_mm_device_do_normalize", None)
    return bool(resolve()) if callable(resolve) else False


def build_mm_input_norm(model_config: Any) -> nn.Module:
    """The input normalization a model should apply to its ``pixel_values``.

    ``IdentityInputNorm`` when device-side normalization is off, or when the processor's rescale
    and normalize fold to the identity; otherwise ``FusedMMInputNorm`` from the processor config.
    """
    if not _mm_device_do_normalize(model_config):
        return IdentityInputNorm()
    params = _load_norm_params(model_config)
    if params.is_identity:
        return IdentityInputNorm()
    return FusedMMInputNorm(
        image_mean=params.image_mean,
        image_std=params.image_std,
        rescale_factor=params.rescale_factor,
        channel=len(params.image_mean),
    )


__all__ = [
    "INPUT_DTYPES",
    "VISUAL_DTYPES",
    "FusedMMInputNorm",
    "IdentityInputNorm",
    "NormParams",
    "build_mm_input_norm",
    "fused_mm_input_norm_torch",
    "fused_mm_input_norm_triton",
]
