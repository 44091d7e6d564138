"""Loading a model's HF processor from its directory, and calling it, as vLLM does.

Loads are offline (``local_files_only``) and serialized by one lock shared by every context:
``transformers``' lazily imported modules are not safe to import from two threads at once. A
processor is built once per distinct set of construction kwargs; since a request's
``mm_processor_kwargs`` can name new sets, only the most recently used few are kept.

The tokenizer is the processor's own, loaded from the model directory, unless
``ModelConfig.tokenizer`` names another directory: then it is loaded from there, once, and every
processor is built with it, as vLLM builds its processors with the tokenizer it loads from
``ModelConfig.tokenizer``.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from cachetools import LRUCache

from mediaref.exceptions import VLLMValidationError

if TYPE_CHECKING:
    from transformers import BatchFeature

    from mediaref.processing._model_config import ModelConfig

logger = logging.getLogger(__name__)

_MAX_PROCESSORS = 16
"""Processors kept per context for non-default construction kwargs."""

_warned_not_batch_feature: set[type] = set()


def _kwargs_key(kwargs: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((key, repr(value)) for key, value in kwargs.items()))


class HfProcessorLoader:
    """One model's HF processors, by class and construction kwargs."""

    def __init__(self, model_config: ModelConfig, lock: threading.RLock, *, tokenizer: Any) -> None:
        self._model_config = model_config
        self._lock = lock
        self._tokenizer = tokenizer  # an explicit tokenizer the processors must share; or None
        self._configured_tokenizer: Any = None  # loaded from model_config.tokenizer, when set
        self._default: Any = None
        self._memo: LRUCache[Any, Any] = LRUCache(_MAX_PROCESSORS)

    def _load(self, typ: Any, kwargs: Mapping[str, object]) -> Any:
        from transformers import AutoProcessor, ProcessorMixin

        config = self._model_config
        load_kwargs: dict[str, Any] = {
            "local_files_only": True,  # nothing here may reach a model hub at run time
            "trust_remote_code": config.trust_remote_code,
            **{k: v for k, v in kwargs.items() if k != "tokenizer"},
        }
        tokenizer = self._tokenizer if self._tokenizer is not None else self.configured_tokenizer()
        if tokenizer is not None:
            load_kwargs["tokenizer"] = tokenizer
        if isinstance(typ, type) and typ is not ProcessorMixin and hasattr(typ, "from_pretrained"):
            processor = typ.from_pretrained(config.model, **load_kwargs)
        else:
            # transformers leaves AutoProcessor.from_pretrained unannotated.
            processor = AutoProcessor.from_pretrained(  # type: ignore[no-untyped-call]
                config.model, **load_kwargs
            )
        expected = ProcessorMixin if typ is None else typ
        if not isinstance(processor, expected):
            raise TypeError(
                f"Invalid type of HuggingFace processor. Expected type: {expected}, "
                f"but found type: {type(processor)}"
            )
        return processor

    def get(self, typ: Any, kwargs: Mapping[str, object] | None) -> Any:
        """The processor of class ``typ`` (None: whatever the directory names) built with
        ``kwargs`` (None: the configured ones)."""
        if typ is None and kwargs is None and self._default is not None:
            return self._default  # the per-request path: no key building, no lock
        if kwargs is None:
            from mediaref.processing._mm_kwargs import resolve_mm_processor_kwargs

            merged = self._model_config.multimodal_config.merge_mm_processor_kwargs({})
            kwargs = resolve_mm_processor_kwargs(merged)
            is_default = typ is None
        else:
            is_default = False
        key = (typ, _kwargs_key(kwargs))
        with self._lock:
            processor = self._memo.get(key)
            if processor is None:
                processor = self._memo[key] = self._load(typ, kwargs)
            if is_default:
                self._default = processor
        return processor

    def _load_tokenizer(self, path: str) -> Any:
        from transformers import AutoTokenizer

        with self._lock:
            return AutoTokenizer.from_pretrained(
                path,
                local_files_only=True,
                trust_remote_code=self._model_config.trust_remote_code,
            )

    def configured_tokenizer(self) -> Any:
        """The tokenizer in ``model_config.tokenizer``'s directory, loaded once; None when the
        config names none."""
        path = self._model_config.tokenizer
        if path is None:
            return None
        with self._lock:
            if self._configured_tokenizer is None:
                self._configured_tokenizer = self._load_tokenizer(path)
            return self._configured_tokenizer

    def default_tokenizer(self) -> Any:
        """The tokenizer ``model_config.tokenizer`` names; else the one the default processor
        carries, else the model directory's own tokenizer."""
        configured = self.configured_tokenizer()
        if configured is not None:
            return configured
        try:
            processor = self.get(None, None)
        except (OSError, ValueError, TypeError):  # no processor: a tokenizer may still load
            processor = None
        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is not None:
            return tokenizer
        return self._load_tokenizer(self._model_config.model)


def _accepted_kwargs(callable_: Any, kwargs: Mapping[str, object]) -> dict[str, object]:
    """The ``kwargs`` ``callable_`` can take by keyword (all of them when it has ``**kwargs``)."""
    try:
        params = inspect.signature(callable_).parameters
    except (TypeError, ValueError):
        return dict(kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    named = {
        name
        for name, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    dropped = kwargs.keys() - named
    if dropped:
        logger.warning(
            "The following intended overrides are not keyword args and will be dropped: %s",
            sorted(dropped),
        )
    return {k: v for k, v in kwargs.items() if k in named}


def _to_host(value: object, dtype: torch.dtype | None) -> object:
    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype=dtype)
        return value.cpu() if not value.is_cpu else value
    if isinstance(value, list):
        return [_to_host(v, dtype) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_host(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _to_host(v, dtype) for k, v in value.items()}
    return value


def call_hf_processor(
    hf_processor: Any,
    data: Mapping[str, object],
    kwargs: Mapping[str, object],
    dtype: torch.dtype | None,
) -> BatchFeature:
    """``hf_processor(**data, **kwargs)`` returning PyTorch tensors on the CPU.

    A processor failure is a :class:`~mediaref.exceptions.VLLMValidationError` (a ``ValueError``,
    HTTP 400, as vLLM answers it) naming the processor, the data's keys and the kwargs (not the
    data: a payload has no place in an error message); memory exhaustion propagates as itself.
    """
    from transformers import BatchFeature

    if not callable(hf_processor):
        raise TypeError(f"{type(hf_processor).__name__} is not callable")
    allowed = _accepted_kwargs(hf_processor, kwargs)
    allowed.setdefault("return_tensors", "pt")
    try:
        output = hf_processor(**data, **allowed)
    except MemoryError:
        raise
    except Exception as exc:
        # What the processor refuses is the request's input (vLLM answers it 400 as well).
        raise VLLMValidationError(
            f"Failed to apply {type(hf_processor).__name__} on data with keys "
            f"{sorted(data)} and kwargs={allowed}: {exc}"
        ) from exc
    if isinstance(output, BatchFeature):
        return BatchFeature(_to_host(dict(output.data), dtype))  # type: ignore[arg-type]
    if type(hf_processor) not in _warned_not_batch_feature:
        _warned_not_batch_feature.add(type(hf_processor))
        logger.warning(
            "%s did not return `BatchFeature`. Make sure to match the behaviour of "
            "`ProcessorMixin` when implementing custom processors.",
            type(hf_processor).__name__,
        )
    return _to_host(output, dtype)  # type: ignore[return-value]


__all__ = ["HfProcessorLoader", "call_hf_processor"]
