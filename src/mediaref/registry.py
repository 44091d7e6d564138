"""Model -> its processing info, processor and dummy-inputs builder; and per-request stage timings.

A vLLM model file registers its processor on its model class::

    @MULTIMODAL_REGISTRY.register_processor(
        MyProcessor, info=MyProcessingInfo, dummy_inputs=MyDummyInputsBuilder
    )
    class MyForConditionalGeneration(nn.Module, SupportsMultiModal): ...

and the class's name is looked up in ``architectures`` of the model directory's config.json.
mediaref's built-in families register under the HF ``model_type`` instead
(:meth:`MultiModalRegistry.register_family`); ``ModelConfig.family`` picks one explicitly. The
built-in families in :mod:`mediaref.models` are imported on the first lookup rather than at
``import mediaref``, so importing the package stays cheap.

The registry sits above processing, as vLLM's does: it builds a model's processing context and
hands it to the registered factories, and gives each request a processing
:class:`~mediaref.processing.context.TimingContext` (:class:`MultiModalTimingRegistry`;
``TimingContext`` is re-exported here, where vLLM's registry imports it). On import it tells
:class:`~mediaref.processing.context.ModelConfig` how to learn whether a model's family supports
``mm_device_do_normalize`` (:meth:`MultiModalRegistry.supports_mm_device_do_normalize`) and
whether a processor is registered for it at all (``ModelConfig.is_multimodal_model``).
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from mediaref.exceptions import VLLMValidationError
from mediaref.processing import (
    BaseDummyInputsBuilder,
    BaseMultiModalProcessor,
    BaseProcessingInfo,
    InputProcessingContext,
    TimingContext,
    set_multimodal_model_support,
)
from mediaref.processing.context import ModelConfig, set_device_normalize_support

if TYPE_CHECKING:
    from mediaref.cache import BaseMultiModalProcessorCache

logger = logging.getLogger(__name__)

N = TypeVar("N", bound=type)
_I = TypeVar("_I", bound=BaseProcessingInfo)
_I_co = TypeVar("_I_co", bound=BaseProcessingInfo, covariant=True)

_BUILTIN_FAMILY_MODULES = (
    "mediaref.models.qwen2_vl",
    "mediaref.models.qwen2_audio",
    "mediaref.models.qwen2_vl_raw_video",
)


# -- stage timings -------------------------------------------------------------------------------


_MAX_PENDING_TIMINGS = 1 << 16
"""Requests whose timings wait for :meth:`MultiModalTimingRegistry.stat` (the oldest are dropped
beyond this, so a server that never reads them does not grow without bound)."""


class MultiModalTimingRegistry:
    """Per-request :class:`TimingContext` s, collected when ``enable_mm_processor_stats`` is set."""

    def __init__(self, observability_config: Any | None) -> None:
        self._enabled = bool(getattr(observability_config, "enable_mm_processor_stats", False))
        self._lock = threading.Lock()
        self._by_request: OrderedDict[str, TimingContext] = OrderedDict()

    def get(self, request_id: str) -> TimingContext:
        """The request's context (the same one on every call until :meth:`stat`); a disabled
        one when stats are off."""
        if not self._enabled:
            return TimingContext(enabled=False)
        with self._lock:
            ctx = self._by_request.get(request_id)
            if ctx is None:
                ctx = self._by_request[request_id] = TimingContext()
                if len(self._by_request) > _MAX_PENDING_TIMINGS:
                    self._by_request.popitem(last=False)
            return ctx

    def stat(self) -> dict[str, dict[str, float]]:
        """Each request's stats since the last call, then forget them."""
        if not self._enabled:
            return {}
        with self._lock:
            stats = {rid: ctx.get_stats_dict() for rid, ctx in self._by_request.items()}
            self._by_request.clear()
            return stats


# -- factories ------------------------------------------------------------------------------------


class ProcessingInfoFactory(Protocol[_I_co]):
    """Builds a model's processing info from its processing context."""

    def __call__(self, ctx: InputProcessingContext) -> _I_co: ...


class DummyInputsBuilderFactory(Protocol[_I]):
    """Builds a model's dummy-inputs builder from its processing info."""

    def __call__(self, info: _I) -> BaseDummyInputsBuilder[_I]: ...


class MultiModalProcessorFactory(Protocol[_I]):
    """Builds a model's multimodal processor from its processing info and dummy-inputs builder."""

    def __call__(
        self, info: _I, dummy_inputs: BaseDummyInputsBuilder[_I]
    ) -> BaseMultiModalProcessor[_I]: ...


@dataclass(frozen=True)
class _ProcessorFactories(Generic[_I]):
    info: ProcessingInfoFactory[_I]
    processor: MultiModalProcessorFactory[_I]
    dummy_inputs: DummyInputsBuilderFactory[_I]
    model_cls: type | None = None

    def build_processor(self, ctx: InputProcessingContext) -> BaseMultiModalProcessor[_I]:
        info = self.info(ctx)
        return self.processor(info, self.dummy_inputs(info))


ProcessorFactories = _ProcessorFactories
"""The factories of one registered model (``info``, ``processor``, ``dummy_inputs``)."""


def _vllm_model_class(model_config: ModelConfig) -> type | None:
    """The model class vLLM's ``get_model_architecture`` gives for a vLLM ``ModelConfig`` (None
    for mediaref's own config, or when vLLM knows no class for the model). Importing the class
    imports its model file, whose ``@MULTIMODAL_REGISTRY.register_processor`` then registers it."""
    if not type(model_config).__module__.startswith("vllm."):
        return None
    loader = importlib.import_module("vllm.model_executor.model_loader")
    try:
        model_cls, _ = loader.get_model_architecture(model_config)
    except (ValueError, ImportError) as exc:  # not a model vLLM has a class for
        logger.debug("vLLM resolves no model class for %s: %s", model_config.model, exc)
        return None
    return cast(type, model_cls)


def _read_model_json(model_config: ModelConfig) -> dict[str, Any]:
    config_path = Path(model_config.model) / "config.json"
    try:
        loaded = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise VLLMValidationError(f"cannot read {config_path}: {exc}", parameter="model") from exc
    if not isinstance(loaded, dict):
        raise VLLMValidationError(f"{config_path} is not a JSON object", parameter="model")
    return loaded


class MultiModalRegistry:
    """Dispatches multimodal processing to the model's registered processor."""

    def __init__(self, builtin_modules: tuple[str, ...] = ()) -> None:
        """``builtin_modules`` are imported on first lookup; they register with this registry
        by importing it, so only the process-wide :data:`MULTIMODAL_REGISTRY` names them."""
        self._families: dict[str, _ProcessorFactories[Any]] = {}
        self._architectures: dict[str, _ProcessorFactories[Any]] = {}
        self._builtin_modules = builtin_modules
        self._builtins_loaded = False
        self._lock = threading.Lock()

    # -- registration ----------------------------------------------------------------------

    def register_processor(
        self,
        processor: MultiModalProcessorFactory[_I],
        *,
        info: ProcessingInfoFactory[_I],
        dummy_inputs: DummyInputsBuilderFactory[_I],
    ) -> Any:
        """Class decorator for a model class: its multimodal processor, built lazily from these
        factories for a model whose config.json lists the class's name in ``architectures``."""

        if isinstance(processor, str):
            raise TypeError(
                "register_processor takes the processor factory and decorates a model class "
                f"(vLLM's signature); to register {processor!r} as an HF model_type, use "
                "register_family"
            )

        def wrapper(model_cls: N) -> N:
            if "_processor_factory" in model_cls.__dict__:
                logger.warning(
                    "Model class %s already has a multi-modal processor registered to %s. "
                    "It is overwritten by the new one.",
                    model_cls,
                    self,
                )
            factories = _ProcessorFactories(info, processor, dummy_inputs, model_cls)
            model_cls._processor_factory = factories  # type: ignore[attr-defined]
            self._architectures[model_cls.__name__] = factories
            return model_cls

        return wrapper

    def register_family(
        self,
        family: str,
        *,
        info: ProcessingInfoFactory[_I],
        dummy_inputs: DummyInputsBuilderFactory[_I],
    ) -> Any:
        """Class decorator for a processor class: register it for the HF ``model_type``
        ``family`` (mediaref's way for families that have no model class)."""

        def register(processor_cls: N) -> N:
            factory = cast("MultiModalProcessorFactory[_I]", processor_cls)
            self._families[family] = _ProcessorFactories(info, factory, dummy_inputs)
            return processor_cls

        return register

    def _load_builtins(self) -> None:
        with self._lock:
            if not self._builtins_loaded:
                for module in self._builtin_modules:
                    importlib.import_module(module)
                self._builtins_loaded = True

    # -- lookup ----------------------------------------------------------------------------

    @property
    def families(self) -> list[str]:
        self._load_builtins()
        return sorted(self._families)

    def get_family(self, model_config: ModelConfig) -> str:
        """The configured family, else the ``model_type`` in the model directory's config.json."""
        family = getattr(model_config, "family", None)  # vLLM's own ModelConfig has none
        if family is not None:
            return str(family)
        model_type = _read_model_json(model_config).get("model_type")
        if not isinstance(model_type, str):
            raise VLLMValidationError(
                f"cannot read 'model_type' from {Path(model_config.model) / 'config.json'}",
                parameter="model",
            )
        return model_type

    def _find_factories(self, model_config: ModelConfig) -> _ProcessorFactories[Any] | None:
        """The model's factories (see :meth:`get_factories`); None when none are registered."""
        self._load_builtins()
        if getattr(model_config, "family", None) is None:
            architectures = _read_model_json(model_config).get("architectures") or []
            for architecture in architectures:
                if architecture in self._architectures:
                    return self._architectures[architecture]
        found = self._families.get(self.get_family(model_config))
        if found is None:
            # Under vLLM (mediaref-vllm): the model class vLLM resolves, whose file registers
            # its processor here as it is imported, as vLLM's own registry finds it. After the
            # families, so a family mediaref processes itself keeps its own processor.
            model_cls = _vllm_model_class(model_config)
            if model_cls is not None:
                found = self._architectures.get(model_cls.__name__)
        return found

    def _not_registered(self, model_config: ModelConfig) -> str:
        registered = sorted(self._families) + sorted(self._architectures)
        return (
            f"no multimodal processor is registered for {self.get_family(model_config)!r} "
            f"(registered: {', '.join(registered)})"
        )

    def _is_multimodal_model(self, model_config: ModelConfig) -> bool:
        """``ModelConfig.is_multimodal_model``: whether this registry has a processor for the
        model (an unreadable config.json raises)."""
        return self._find_factories(model_config) is not None

    def get_factories(self, model_config: ModelConfig) -> _ProcessorFactories[Any]:
        """The model's factories: by ``family`` when set, else by the first registered
        architecture in config.json, else by its ``model_type``."""
        factories = self._find_factories(model_config)
        if factories is None:
            raise VLLMValidationError(self._not_registered(model_config), parameter="model")
        return factories

    def supports_mm_device_do_normalize(self, model_config: ModelConfig) -> bool:
        """Whether the model's family can leave rescale + normalize to the device (False for a
        model no family is registered for, or whose directory cannot be read)."""
        try:
            factories = self.get_factories(model_config)
        except VLLMValidationError:
            return False
        owners = (factories.model_cls, factories.info)
        return any(
            bool(getattr(owner, "supports_mm_device_do_normalize", False)) for owner in owners
        )

    def supports_multimodal_inputs(self, model_config: ModelConfig) -> bool:
        try:
            self.get_factories(model_config)
        except VLLMValidationError:
            return False
        return True

    # -- building --------------------------------------------------------------------------

    def _create_processing_ctx(
        self, model_config: ModelConfig, tokenizer: Any | None = None
    ) -> InputProcessingContext:
        if tokenizer is None:  # the context's default: the model's own (unless skipped)
            return InputProcessingContext(model_config)
        return InputProcessingContext(model_config, tokenizer)

    def get_processing_info(self, model_config: ModelConfig) -> BaseProcessingInfo:
        """The model's processing info, over a new context that loads the model's files."""
        factories = self.get_factories(model_config)
        info: BaseProcessingInfo = factories.info(self._create_processing_ctx(model_config))
        return info

    def create_processor(
        self,
        model_config: ModelConfig,
        *,
        tokenizer: Any | None = None,
        cache: BaseMultiModalProcessorCache | None = None,
    ) -> BaseMultiModalProcessor[Any]:
        """A processor for the model (``tokenizer``: None loads the model's own), loading its
        HF files offline. ``cache`` (mediaref) is the cache :meth:`~BaseMultiModalProcessor.build_inputs`
        hands the processor's inputs.

        A model this registry has no processor for is refused as vLLM refuses it,
        ``ValueError("<served_model_name or model> is not a multimodal model")`` (a
        :class:`~mediaref.exceptions.VLLMValidationError`, whose message goes on to name the
        model's family and the registered ones). For :data:`MULTIMODAL_REGISTRY` that is a
        model whose ``ModelConfig.is_multimodal_model`` is False.
        """
        model_name = model_config.served_model_name or model_config.model
        if not isinstance(model_config, ModelConfig) and not model_config.is_multimodal_model:
            # vLLM's config says so itself: refused as vLLM refuses it, config.json unread.
            raise VLLMValidationError(f"{model_name} is not a multimodal model", parameter="model")
        factories = self._find_factories(model_config)
        if factories is None:
            raise VLLMValidationError(
                f"{model_name} is not a multimodal model: {self._not_registered(model_config)}",
                parameter="model",
            )
        processor = factories.build_processor(self._create_processing_ctx(model_config, tokenizer))
        processor.cache = cache
        return processor

    def processor_cache_from_config(
        self, model_config: ModelConfig
    ) -> BaseMultiModalProcessorCache | None:
        """A processor-only output cache sized by ``mm_processor_cache_gb``; None when it is 0."""
        from mediaref.cache.factories import processor_cache_from_config

        return processor_cache_from_config(model_config)


MULTIMODAL_REGISTRY = MultiModalRegistry(_BUILTIN_FAMILY_MODULES)
"""The process-wide registry the built-in families register with."""

set_device_normalize_support(MULTIMODAL_REGISTRY.supports_mm_device_do_normalize)
set_multimodal_model_support(MULTIMODAL_REGISTRY._is_multimodal_model)

__all__ = [
    "MULTIMODAL_REGISTRY",
    "DummyInputsBuilderFactory",
    "MultiModalProcessorFactory",
    "MultiModalRegistry",
    "MultiModalTimingRegistry",
    "N",
    "ProcessingInfoFactory",
    "ProcessorFactories",
    "TimingContext",
]
