"""Model family -> its processing info, processor and dummy-inputs builder.

Families register with :meth:`MultiModalRegistry.register_processor` under the HF ``model_type``
of their ``config.json``. The built-in families in :mod:`mediaref.models` are imported on the first
lookup rather than at ``import mediaref``, so importing the package stays cheap.
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mediaref.exceptions import VLLMValidationError

if TYPE_CHECKING:
    from mediaref.cache import BaseMultiModalProcessorCache
    from mediaref.processing.context import BaseProcessingInfo, ModelConfig
    from mediaref.processing.dummy_inputs import BaseDummyInputsBuilder
    from mediaref.processing.processor import BaseMultiModalProcessor

_P = TypeVar("_P", bound="type[BaseMultiModalProcessor[Any]]")

_BUILTIN_FAMILY_MODULES = (
    "mediaref.models.qwen2_vl",
    "mediaref.models.qwen2_audio",
    "mediaref.models.qwen2_vl_raw_video",
)


@dataclass(frozen=True)
class ProcessorFactories:
    """The three classes that make up one model family's processing."""

    processor: type[BaseMultiModalProcessor[Any]]
    info: type[BaseProcessingInfo]
    dummy_inputs: type[BaseDummyInputsBuilder[Any]]


class MultiModalRegistry:
    """Looks up and builds the multimodal processor for a model."""

    def __init__(self, builtin_modules: tuple[str, ...] = ()) -> None:
        """``builtin_modules`` are imported on first lookup; they register with this registry
        by importing it, so only the process-wide :data:`MULTIMODAL_REGISTRY` names them."""
        self._families: dict[str, ProcessorFactories] = {}
        self._builtin_modules = builtin_modules
        self._builtins_loaded = False
        self._lock = threading.Lock()

    def register_processor(
        self,
        family: str,
        *,
        info: type[BaseProcessingInfo],
        dummy_inputs: type[BaseDummyInputsBuilder[Any]],
    ) -> Callable[[_P], _P]:
        """Class decorator: register a processor class for the ``family`` (HF ``model_type``)."""

        def register(processor_cls: _P) -> _P:
            self._families[family] = ProcessorFactories(processor_cls, info, dummy_inputs)
            return processor_cls

        return register

    def _load_builtins(self) -> None:
        with self._lock:
            if not self._builtins_loaded:
                for module in self._builtin_modules:
                    importlib.import_module(module)
                self._builtins_loaded = True

    @property
    def families(self) -> list[str]:
        self._load_builtins()
        return sorted(self._families)

    def get_family(self, model_config: ModelConfig) -> str:
        """The configured family, else the ``model_type`` in the model directory's config.json."""
        if model_config.family is not None:
            return model_config.family
        config_path = Path(model_config.model) / "config.json"
        try:
            return str(json.loads(config_path.read_text())["model_type"])
        except (OSError, ValueError, KeyError) as exc:
            raise VLLMValidationError(
                f"cannot read model_type from {config_path}: {exc}", parameter="model"
            ) from exc

    def get_factories(self, model_config: ModelConfig) -> ProcessorFactories:
        self._load_builtins()
        family = self.get_family(model_config)
        try:
            return self._families[family]
        except KeyError:
            raise VLLMValidationError(
                f"no multimodal processor is registered for {family!r} "
                f"(registered: {', '.join(sorted(self._families))})",
                parameter="model",
            ) from None

    def supports_mm_device_do_normalize(self, model_config: ModelConfig) -> bool:
        """Whether the model's family can leave rescale + normalize to the device (False for a
        model no family is registered for, or whose directory cannot be read)."""
        try:
            info_cls = self.get_factories(model_config).info
        except VLLMValidationError:
            return False
        return bool(info_cls.supports_mm_device_do_normalize)

    def supports_multimodal_inputs(self, model_config: ModelConfig) -> bool:
        self._load_builtins()
        return self.get_family(model_config) in self._families

    def processor_cache_from_config(
        self, model_config: ModelConfig
    ) -> BaseMultiModalProcessorCache | None:
        """A processor-only output cache sized by ``mm_processor_cache_gb``; None when it is 0."""
        from mediaref.cache.factories import processor_cache_from_config

        return processor_cache_from_config(model_config)

    def create_processor(
        self,
        model_config: ModelConfig,
        *,
        cache: BaseMultiModalProcessorCache | None = None,
    ) -> BaseMultiModalProcessor[Any]:
        """A processor for the model, loading its HF processor offline from the model directory."""
        factories = self.get_factories(model_config)
        info = factories.info.from_model_config(model_config)
        return factories.processor(info, factories.dummy_inputs(info), cache=cache)


MULTIMODAL_REGISTRY = MultiModalRegistry(_BUILTIN_FAMILY_MODULES)
"""The process-wide registry the built-in families register with."""

__all__ = ["MULTIMODAL_REGISTRY", "MultiModalRegistry", "ProcessorFactories"]
