"""Where the affine map's ``(image_mean, image_std, rescale_factor)`` come from: the processor config.

:func:`_load_norm_params` resolves them as vLLM 0.33.0 does, from a model config's ``model``
directory: the first of ``processor_config.json``, ``preprocessor_config.json`` and
``tokenizer_config.json`` that names a ``processor_class`` (its ``image_processor`` section if it
has one); when that holds none of the normalization keys, the image processor config
(``model_config.hf_image_processor_config`` where the config carries one, as vLLM's does, else the
directory's ``preprocessor_config.json``); then its ``media_proc_cfg`` section if present. A flag
that is off turns its parameters into the identity, and a missing flag defaults to on exactly when
``image_mean`` and ``image_std`` are both given.

Only local files are read: mediaref loads models offline, from directories.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

_PROCESSOR_CONFIG_FILES = (
    "processor_config.json",
    "preprocessor_config.json",
    "tokenizer_config.json",
)
_IMAGE_PROCESSOR_CONFIG_FILE = "preprocessor_config.json"
_NORM_KEYS = ("do_normalize", "do_rescale", "image_mean", "image_std")
_DEFAULT_RESCALE_FACTOR = 1 / 255
_IDENTITY_CHANNELS = 3


class NormParams(NamedTuple):
    """Resolved per-channel affine parameters (the ``do_*`` flags already folded in)."""

    image_mean: list[float]
    image_std: list[float]
    rescale_factor: float

    @property
    def is_identity(self) -> bool:
        """Whether ``weight = rescale / std`` and ``bias = -mean / std`` are numerically the
        identity map (``torch.allclose``'s default fp32 tolerances, as vLLM checks it)."""
        return all(
            math.isclose(self.rescale_factor / std, 1.0, rel_tol=1e-5, abs_tol=1e-8)
            and math.isclose(mean / std, 0.0, abs_tol=1e-8)
            # Per-channel pairs: norm_params_from_config refuses lists of different lengths.
            for mean, std in zip(self.image_mean, self.image_std, strict=True)
        )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _processor_config(model_dir: Path) -> dict[str, Any]:
    for name in _PROCESSOR_CONFIG_FILES:
        config = _read_json(model_dir / name)
        if config and "processor_class" in config:
            return config
    return {}


def _image_processor_config(model_config: Any, model_dir: Path) -> dict[str, Any]:
    carried = getattr(model_config, "hf_image_processor_config", None)
    if isinstance(carried, Mapping):
        return dict(carried)
    return _read_json(model_dir / _IMAGE_PROCESSOR_CONFIG_FILE)


def norm_params_from_config(config: Mapping[str, Any]) -> NormParams:
    """Fold ``do_rescale`` / ``do_normalize`` into the parameters of one image processor config."""
    has_norm_params = "image_mean" in config and "image_std" in config
    do_normalize = bool(config.get("do_normalize", has_norm_params))
    do_rescale = bool(config.get("do_rescale", has_norm_params))

    # A parameter whose flag is off is never read: it may be absent or null.
    rescale_factor: Any = (
        config.get("rescale_factor", _DEFAULT_RESCALE_FACTOR) if do_rescale else 1.0
    )
    image_mean: Any = config.get("image_mean") if do_normalize else [0.0] * _IDENTITY_CHANNELS
    image_std: Any = config.get("image_std") if do_normalize else [1.0] * _IDENTITY_CHANNELS
    for name, value in (
        ("rescale_factor", rescale_factor),
        ("image_mean", image_mean),
        ("image_std", image_std),
    ):
        if value is None:
            raise ValueError(f"the processor config turns its flag on but gives no {name}")
    if not isinstance(image_mean, Sequence) or not isinstance(image_std, Sequence):
        raise TypeError("image_mean and image_std must be per-channel lists")
    if len(image_mean) != len(image_std):
        raise ValueError(
            f"image_mean and image_std have different lengths: {len(image_mean)} vs {len(image_std)}"
        )
    return NormParams(
        image_mean=[float(v) for v in image_mean],
        image_std=[float(v) for v in image_std],
        rescale_factor=float(rescale_factor),
    )


def _load_norm_params(model_config: Any) -> NormParams:
    """Resolve ``(image_mean, image_std, rescale_factor)`` from the model's processor config."""
    model_dir = Path(str(model_config.model))
    config: Mapping[str, Any] = _processor_config(model_dir)
    config = config.get("image_processor", config)
    if not any(key in config for key in _NORM_KEYS):
        config = _image_processor_config(model_config, model_dir)
    config = config.get("media_proc_cfg", config)
    return norm_params_from_config(config)


__all__ = ["NormParams", "_load_norm_params", "norm_params_from_config"]
