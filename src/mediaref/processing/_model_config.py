"""The slice of vLLM's ``ModelConfig`` / ``MultiModalConfig`` that multimodal processing reads.

:class:`ModelConfig` is what a mediaref user writes: a local model directory and the multimodal
options, flat. :attr:`ModelConfig.multimodal_config` presents the options as vLLM's
``MultiModalConfig`` (:class:`MultiModalConfig`), and ``hf_config`` /
``hf_image_processor_config`` load the directory's files once, offline.

One resolved option depends on the model's registered family: ``mm_device_do_normalize`` defaults
to what the family supports. Only the registry, which sits above processing, knows the families;
it installs its answer here when it is imported (:func:`set_device_normalize_support`), as vLLM's
config reads its model registry.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from mediaref.processing._dummy_options import MultiModalDummyOptions, dummy_options_from
from mediaref.processing._mm_kwargs import merge_mm_processor_kwargs

logger = logging.getLogger(__name__)

_DEFAULT_LIMIT_PER_PROMPT = 999  # vLLM's limit for a modality the config does not name
_DEFAULT_MAX_MODEL_LEN = 8192  # when config.json names no context length
_CONTEXT_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
# The HF flags the device takes over when mm_device_do_normalize is on.
_DEVICE_NORMALIZE_FLAGS = ("do_normalize", "do_rescale")
_warned_ignored_flags: set[str] = set()
_HF_CONFIG_LOCK = threading.Lock()


def device_normalize_kwargs(mm_kwargs: Mapping[str, object]) -> dict[str, object]:
    """``mm_kwargs`` with the CPU rescale and normalize off, as vLLM 0.33 merges them.

    The model normalizes on the device; a request turning either flag back on would have its
    pixels normalized twice, so the request's value is ignored (with a warning, once per flag).
    """
    merged = dict(mm_kwargs)
    for key in _DEVICE_NORMALIZE_FLAGS:
        if merged.get(key) and key not in _warned_ignored_flags:
            _warned_ignored_flags.add(key)
            logger.warning(
                "mm_device_do_normalize is enabled; ignoring per-request mm_processor_kwargs[%r].",
                key,
            )
        merged[key] = False
    return merged


@dataclass(frozen=True)
class MultiModalConfig:
    """vLLM's ``MultiModalConfig``: the multimodal options of one model, resolved."""

    limit_per_prompt: MultiModalDummyOptions = field(default_factory=MultiModalDummyOptions)
    enable_mm_embeds: bool = False
    media_io_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    mm_processor_kwargs: Mapping[str, object] | None = None
    mm_device_do_normalize: bool = False
    mm_processor_cache_gb: float | None = None
    mm_hasher_algorithm: str = "blake3"
    allow_missing_mm_embeddings: bool = False
    language_model_only: bool = False
    mm_processor_cache_type: str = "lru"
    mm_shm_cache_max_object_size_mb: int = 128

    def get_limit_per_prompt(self, modality: str) -> int:
        """The most items of ``modality`` one prompt may carry (999 when not configured)."""
        if self.language_model_only:
            return 0
        options = self.limit_per_prompt.get(modality)
        return _DEFAULT_LIMIT_PER_PROMPT if options is None else options.count

    def merge_mm_processor_kwargs(
        self, inference_kwargs: Mapping[str, object]
    ) -> dict[str, object]:
        """The configured ``mm_processor_kwargs`` overridden by a request's (nested mappings and
        the HF kwarg scopes merged as vLLM merges them); rescale and normalize stay off when the
        device does them."""
        merged = merge_mm_processor_kwargs(self.mm_processor_kwargs or {}, inference_kwargs)
        if self.mm_device_do_normalize:
            merged = device_normalize_kwargs(merged)
        return merged


@dataclass(frozen=True)
class ModelConfig:
    """The slice of vLLM's model config that multimodal processing reads."""

    model: str
    """A local model directory (config.json, tokenizer and processor configs; no weights needed)."""

    model_id: str | None = None
    """The name item hashes carry for the model (vLLM's ``model_id``: its ``--model`` argument as
    given); None: ``model``. A server given a built-in model's name hashes with that name, as
    ``vllm launch render NAME`` would, not with the directory it resolves to."""

    mm_processor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Extra kwargs for ``AutoProcessor.from_pretrained`` and the HF processor call."""

    media_io_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per-modality decoder settings, e.g. ``{"video": {"num_frames": 16}}`` (``--media-io-kwargs``)."""

    mm_processor_cache_gb: float | None = None
    """Processor output cache budget; None reads ``MEDIAREF_MM_PROCESSOR_CACHE_GB`` (4), 0 disables."""

    family: str | None = None
    """The registered processor family; None: the first registered architecture in config.json's
    ``architectures``, else its ``model_type``."""

    trust_remote_code: bool = False

    mm_device_do_normalize: bool | None = None
    """Rescale and normalize pixels on the device (``FusedMMInputNorm``) instead of in the HF
    processor, which then emits raw ``uint8`` pixels. None: on exactly when the model family
    supports it (vLLM 0.33's default); True for a family without support is turned off with a
    warning. Read the resolved value with :meth:`get_mm_device_do_normalize`."""

    limit_mm_per_prompt: Mapping[str, int | Mapping[str, int]] = field(default_factory=dict)
    """``--limit-mm-per-prompt``: per modality, a count or ``{"count": ..., "width": ...}`` options
    (999 items for a modality not named)."""

    enable_mm_embeds: bool = False
    """``--enable-mm-embeds``: accept precomputed embeddings as multimodal items (vLLM's default:
    refused)."""

    allow_missing_mm_embeddings: bool = False
    mm_hasher_algorithm: str = "blake3"
    language_model_only: bool = False
    mm_processor_cache_type: str = "lru"
    """``"lru"`` or ``"shm"``: the processor cache a deployment with an engine core mirrors."""
    mm_shm_cache_max_object_size_mb: int = 128

    enable_prompt_embeds: bool = False
    """``--enable-prompt-embeds``: accept prompts given as embeddings."""

    max_model_len: int | None = None
    """The context length; None reads config.json (``max_position_embeddings``...), else 8192."""

    dtype: torch.dtype | None = None
    """Floating-point tensors the HF processor returns are cast to it (vLLM casts to the model's
    dtype); None leaves them as the processor made them."""

    skip_tokenizer_init: bool = False
    """No tokenizer: prompts must be token ids (vLLM's ``--skip-tokenizer-init``)."""

    encoder_config: Mapping[str, Any] | None = None

    tokenizer: str | None = None
    """A local tokenizer directory (vLLM's ``--tokenizer``); None: the model directory's own. When
    set, the tokenizer is loaded from it and handed to the HF processor, as vLLM hands its
    processor the tokenizer it loads from ``ModelConfig.tokenizer``."""

    served_model_name: str | None = None
    """The name the model is served under (vLLM's ``--served-model-name``); None: ``model``.
    Errors about the model name it by this, as vLLM's do."""

    @property
    def is_multimodal_model(self) -> bool:
        """Whether a multimodal processor is registered for the model, by architecture or family
        (vLLM's property; its answer comes from its model registry).

        :mod:`mediaref.registry` installs the answer when it is imported
        (:func:`set_multimodal_model_support`); asked before that, no family is known: False,
        with a warning. A model directory whose config.json cannot be read raises
        :class:`~mediaref.exceptions.VLLMValidationError`.
        """
        lookup = _multimodal_model_support
        if lookup is None:
            logger.warning(
                "is_multimodal_model is read before mediaref.registry was imported: no model "
                "family is known, so the answer is False. Import mediaref.registry first."
            )
            return False
        return lookup(self)

    # -- the directory's files -----------------------------------------------------------------

    @cached_property
    def hf_config(self) -> Any:
        """The model's ``transformers`` config, loaded offline once."""
        from transformers import AutoConfig

        with _HF_CONFIG_LOCK:  # transformers' lazy imports are not safe on two threads at once
            return AutoConfig.from_pretrained(
                self.model, local_files_only=True, trust_remote_code=self.trust_remote_code
            )

    @cached_property
    def hf_image_processor_config(self) -> dict[str, Any]:
        """The directory's ``preprocessor_config.json`` (empty when there is none)."""
        path = Path(self.model) / "preprocessor_config.json"
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def _text_config_value(self, *names: str) -> Any:
        config = self.hf_config
        text_config = getattr(config, "get_text_config", lambda: config)()
        for source in (text_config, config):
            for name in names:
                value = getattr(source, name, None)
                if value is not None:
                    return value
        return None

    @cached_property
    def derived_max_model_len(self) -> int:
        if self.max_model_len is not None:
            return int(self.max_model_len)
        value = self._text_config_value(*_CONTEXT_LENGTH_KEYS)
        return int(value) if value is not None else _DEFAULT_MAX_MODEL_LEN

    def get_vocab_size(self) -> int:
        value = self._text_config_value("vocab_size")
        return int(value) if value is not None else 0

    def get_inputs_embeds_size(self) -> int:
        """The hidden size an embedding item's last dimension must have."""
        value = self._text_config_value("hidden_size", "d_model", "n_embd")
        if value is None:
            raise ValueError(f"config.json of {self.model} names no hidden size")
        return int(value)

    # -- multimodal options --------------------------------------------------------------------

    @cached_property
    def multimodal_config(self) -> MultiModalConfig:
        """The multimodal options as vLLM's ``MultiModalConfig`` (the device toggle resolved)."""
        return MultiModalConfig(
            limit_per_prompt=dummy_options_from(self.limit_mm_per_prompt),
            enable_mm_embeds=self.enable_mm_embeds,
            media_io_kwargs=self.media_io_kwargs,
            mm_processor_kwargs=self.mm_processor_kwargs,
            mm_device_do_normalize=self.get_mm_device_do_normalize(),
            mm_processor_cache_gb=self.mm_processor_cache_gb,
            mm_hasher_algorithm=self.mm_hasher_algorithm,
            allow_missing_mm_embeddings=self.allow_missing_mm_embeddings,
            language_model_only=self.language_model_only,
            mm_processor_cache_type=self.mm_processor_cache_type,
            mm_shm_cache_max_object_size_mb=self.mm_shm_cache_max_object_size_mb,
        )

    def get_multimodal_config(self) -> MultiModalConfig:
        return self.multimodal_config

    def resolve_mm_device_do_normalize(self, supported: bool) -> bool:
        """The toggle for a family that does (``supported``) or does not support it, resolved as
        vLLM 0.33.0's ``ModelConfig`` resolves it, the Rust frontend's veto included."""
        from mediaref import envs

        requested = self.mm_device_do_normalize
        if envs.VLLM_USE_RUST_FRONTEND:
            # vLLM's Rust frontend cannot emit raw pixels; a model behind it expects them
            # normalized, so the frontend and the model must agree that it is off.
            if requested:
                logger.warning(
                    "VLLM_USE_RUST_FRONTEND is set; it does not support mm_device_do_normalize, "
                    "forcing mm_device_do_normalize = False."
                )
            return False
        if requested is None:
            return supported
        if requested and not supported:
            logger.warning(
                "Model does not support mm_device_do_normalize, forcing mm_device_do_normalize = False."
            )
            return False
        return requested

    def get_mm_device_do_normalize(self) -> bool:
        """The resolved toggle for this model's registered family (False for an unknown one).

        Memoized on the instance (the config is frozen), so the registry is read and a warning
        logged once per config.
        """
        resolved = self.__dict__.get("_resolved_mm_device_do_normalize")
        if resolved is None:
            lookup = _device_normalize_support
            if lookup is None:
                # Not memoized: once the registry is imported, the family's answer counts.
                return self.resolve_mm_device_do_normalize(_no_family_known())
            resolved = self.resolve_mm_device_do_normalize(lookup(self))
            object.__setattr__(self, "_resolved_mm_device_do_normalize", resolved)
        return bool(resolved)


DeviceNormalizeSupport = Callable[[ModelConfig], bool]
"""Whether the family registered for a model can leave rescale + normalize to the device."""

_device_normalize_support: DeviceNormalizeSupport | None = None
_warned_no_registry = False


def set_device_normalize_support(lookup: DeviceNormalizeSupport) -> None:
    """Install how a :class:`ModelConfig` learns whether its family supports
    ``mm_device_do_normalize``. The registry installs its own lookup when it is imported: it sits
    above processing, so processing cannot ask it."""
    global _device_normalize_support
    _device_normalize_support = lookup


MultiModalModelSupport = Callable[[ModelConfig], bool]
"""Whether a multimodal processor is registered for a model (:attr:`ModelConfig.is_multimodal_model`)."""

_multimodal_model_support: MultiModalModelSupport | None = None


def set_multimodal_model_support(lookup: MultiModalModelSupport) -> None:
    """Install how :attr:`ModelConfig.is_multimodal_model` is answered. The registry installs its
    own lookup when it is imported: it sits above processing, so processing cannot ask it."""
    global _multimodal_model_support
    _multimodal_model_support = lookup


def _no_family_known() -> bool:
    global _warned_no_registry
    if not _warned_no_registry:
        _warned_no_registry = True
        logger.warning(
            "mm_device_do_normalize is resolved before mediaref.registry was imported: no model "
            "family is known, so the default is off. Import mediaref.registry first."
        )
    return False


DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "half": torch.float16,
    "float32": torch.float32,
    "float": torch.float32,
}
"""vLLM's ``--dtype`` names (besides ``auto``)."""


def resolve_dtype(model_dir: str | Path, dtype: str = "auto") -> torch.dtype:
    """The dtype vLLM's ``ModelConfig(model=model_dir, dtype=dtype)`` resolves to.

    ``auto``: the dtype config.json declares (``dtype``/``torch_dtype``, else its text config's),
    with float32, or none declared, downcast to bfloat16: what vLLM picks on a GPU and on a CPU
    with bfloat16 support, so processed floating-point tensors are cast as vLLM's server casts them.
    """
    if dtype != "auto":
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}: auto, {', '.join(DTYPES)}")
        return DTYPES[dtype]
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    declared = None
    for scope in (config, config.get("text_config") or {}):
        if isinstance(scope, dict):
            declared = declared or scope.get("dtype") or scope.get("torch_dtype")
    resolved = DTYPES.get(str(declared), torch.float32)
    return torch.bfloat16 if resolved == torch.float32 else resolved


def max_model_len_of(model_config: Any) -> int:
    """The context length of a model config: mediaref's (``derived_max_model_len``, derived from
    the model's config when unset) or vLLM's (``max_model_len``, resolved by vLLM), so code that
    vLLM hands its own ``ModelConfig`` reads either."""
    derived = getattr(model_config, "derived_max_model_len", None)
    if isinstance(derived, int):  # not a stand-in's attribute that only converts to one
        return derived
    return int(model_config.max_model_len)


__all__ = [
    "DTYPES",
    "DeviceNormalizeSupport",
    "ModelConfig",
    "MultiModalConfig",
    "MultiModalModelSupport",
    "device_normalize_kwargs",
    "max_model_len_of",
    "resolve_dtype",
    "set_device_normalize_support",
    "set_multimodal_model_support",
]
