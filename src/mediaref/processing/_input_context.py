"""The model's configuration and tokenizer, and its HF config and processor, loaded offline
(vLLM's ``InputProcessingContext``; public at :mod:`mediaref.processing.context`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mediaref.processing._hf_loading import HfProcessorLoader, call_hf_processor
from mediaref.processing._mm_kwargs import resolve_mm_processor_kwargs
from mediaref.processing._model_config import ModelConfig, MultiModalConfig

if TYPE_CHECKING:
    from transformers import BatchFeature

_HF_LOAD_LOCK = threading.RLock()


class _LoadFromModel:
    """The default ``tokenizer``: the one the model directory ships, loaded on first use."""

    def __repr__(self) -> str:
        return "<the model's own tokenizer>"


_FROM_MODEL = _LoadFromModel()


class InputProcessingContext:
    """The model's configuration and tokenizer, and its HF config and processor, loaded offline.

    ``tokenizer`` defaults to the one in the model directory (loaded with the HF processor, on
    first use); ``None`` means no tokenizer, as with vLLM's ``skip_tokenizer_init``.
    """

    model_config: ModelConfig
    """The configuration of the model."""

    def __init__(self, model_config: ModelConfig, tokenizer: Any | None = _FROM_MODEL) -> None:
        self.model_config = model_config
        if tokenizer is _FROM_MODEL and model_config.skip_tokenizer_init:
            tokenizer = None
        self._tokenizer = tokenizer
        self._processors = HfProcessorLoader(
            model_config, _HF_LOAD_LOCK, tokenizer=None if tokenizer is _FROM_MODEL else tokenizer
        )

    @property
    def tokenizer(self) -> Any | None:
        """The tokenizer prompts are encoded with (None when there is none)."""
        if self._tokenizer is _FROM_MODEL:
            self._tokenizer = self._processors.default_tokenizer()
        return self._tokenizer

    def has_tokenizer(self) -> bool:
        """Whether there is a tokenizer, without loading it."""
        return self._tokenizer is not None

    def get_tokenizer(self) -> Any:
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise ValueError("You cannot pass text prompts when `skip_tokenizer_init=True`")
        return tokenizer

    def get_hf_config(self, typ: type[Any] | tuple[type[Any], ...] | None = None, /) -> Any:
        """The model's ``transformers`` config; ``TypeError`` unless it is a ``typ``."""
        if typ is None:
            from transformers import PretrainedConfig

            typ = PretrainedConfig
        with _HF_LOAD_LOCK:
            hf_config = self.model_config.hf_config
        if not isinstance(hf_config, typ):
            raise TypeError(
                f"Invalid type of HuggingFace config. Expected type: {typ}, "
                f"but found type: {type(hf_config)}"
            )
        return hf_config

    def get_hf_image_processor_config(self) -> dict[str, Any]:
        return self.model_config.hf_image_processor_config

    def get_mm_config(self) -> MultiModalConfig:
        mm_config = self.model_config.multimodal_config
        if mm_config is None:
            raise RuntimeError("Not a multimodal model")
        return mm_config

    def get_merged_mm_kwargs(
        self,
        kwargs: Mapping[str, object],
        *,
        supported_mm_processor_kwargs: Mapping[str, set[str]] | None = None,
    ) -> dict[str, Any]:
        """The configured ``mm_processor_kwargs`` overridden by ``kwargs``, flat keys routed
        into the HF kwarg scopes that support them (see :mod:`mediaref.processing._mm_kwargs`)."""
        # Through get_multimodal_config(), as vLLM's reads it (a model config need offer no more).
        merged = self.model_config.get_multimodal_config().merge_mm_processor_kwargs(kwargs)
        return resolve_mm_processor_kwargs(merged, supported_mm_processor_kwargs)

    def get_hf_processor(
        self, typ: type[Any] | tuple[type[Any], ...] | None = None, /, **kwargs: object
    ) -> Any:
        """The model's HF processor, built once per distinct set of construction kwargs (a
        bounded number are kept); ``TypeError`` unless it is a ``typ``."""
        merged = self.get_merged_mm_kwargs(kwargs) if kwargs else None
        return self._processors.get(typ, merged)

    def init_processor(self, typ: Callable[..., Any], /, **kwargs: object) -> Any:
        """``typ(**kwargs)``, with the configured ``mm_processor_kwargs`` merged in."""
        return typ(**self.get_merged_mm_kwargs(kwargs))

    def call_hf_processor(
        self,
        hf_processor: Any,
        data: Mapping[str, object],
        kwargs: Mapping[str, object] = {},
    ) -> BatchFeature:
        """``hf_processor(**data, **kwargs)`` with the configured kwargs merged in, tensors as
        PyTorch on the CPU (floating ones in the model's dtype, if set); a failure is a
        ``ValueError`` naming the processor."""
        return call_hf_processor(
            hf_processor, data, self.get_merged_mm_kwargs(kwargs), self.model_config.dtype
        )


__all__ = ["InputProcessingContext"]
