"""What a model's processing needs to know: its local directory, HF processor, and media decoders.

Decoder resolution lives here, in :meth:`BaseProcessingInfo.get_media_io`, because this layer has
the model's configuration: the video backend that matches the model's HF video processor is chosen
here, and an explicit ``video_backend`` (from ``media_io_kwargs`` or the request) wins.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from mediaref.media.base import MediaIO

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelConfig:
    """The slice of vLLM's model config that multimodal processing reads."""

    model: str
    """A local model directory (config.json, tokenizer and processor configs; no weights needed)."""

    mm_processor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Extra kwargs for ``AutoProcessor.from_pretrained`` and the HF processor call."""

    media_io_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per-modality decoder settings, e.g. ``{"video": {"num_frames": 16}}`` (``--media-io-kwargs``)."""

    mm_processor_cache_gb: float | None = None
    """Processor output cache budget; None reads ``MEDIAREF_MM_PROCESSOR_CACHE_GB`` (4), 0 disables."""

    family: str | None = None
    """The registered processor family; None reads ``model_type`` from the directory's config.json."""

    trust_remote_code: bool = False

    mm_device_do_normalize: bool | None = None
    """Rescale and normalize pixels on the device (``FusedMMInputNorm``) instead of in the HF
    processor, which then emits raw ``uint8`` pixels. None: on exactly when the model family
    supports it (vLLM 0.33's default); True for a family without support is turned off with a
    warning. Read the resolved value with :meth:`get_mm_device_do_normalize`."""

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
            resolved = self.resolve_mm_device_do_normalize(_family_supports_device_normalize(self))
            object.__setattr__(self, "_resolved_mm_device_do_normalize", resolved)
        return bool(resolved)


def _family_supports_device_normalize(model_config: ModelConfig) -> bool:
    # The registry sits below this module (processing infos register with it; it builds them
    # through BaseProcessingInfo.from_model_config, never importing processing itself).
    from mediaref.registry import MULTIMODAL_REGISTRY

    return MULTIMODAL_REGISTRY.supports_mm_device_do_normalize(model_config)


_HF_LOAD_LOCK = threading.RLock()


class InputProcessingContext:
    """Loads and memoizes the model's HF config, tokenizer and processor, offline."""

    def __init__(self, model_config: ModelConfig) -> None:
        self.model_config = model_config
        self._memo: dict[Any, Any] = {}
        self._default_processor: Any = None

    @property
    def model_path(self) -> Path:
        return Path(self.model_config.model)

    def _load(self, memo_key: Any, load: Any) -> Any:
        # One lock for every context: transformers' lazily imported modules are not safe to
        # import from two threads at once (two models' first requests, parsed on worker threads,
        # saw "ImportError: cannot import name 'AutoProcessor'"). Loads are rare; hits skip it.
        memo = self._memo
        if memo_key in memo:
            return memo[memo_key]
        with _HF_LOAD_LOCK:
            if memo_key not in memo:
                memo[memo_key] = load()
            return memo[memo_key]

    def _from_pretrained_kwargs(self) -> dict[str, Any]:
        # local_files_only: nothing here may reach a model hub at run time.
        return {
            "local_files_only": True,
            "trust_remote_code": self.model_config.trust_remote_code,
        }

    def get_hf_config(self) -> Any:
        def load() -> Any:
            from transformers import AutoConfig

            return AutoConfig.from_pretrained(self.model_path, **self._from_pretrained_kwargs())

        return self._load("config", load)

    def get_hf_processor(self, **kwargs: Any) -> Any:
        """The model's HF processor, built once per distinct set of construction kwargs."""
        if not kwargs and self._default_processor is not None:
            return self._default_processor  # the per-request path: no key building, no lock
        merged = {**self.model_config.mm_processor_kwargs, **kwargs}
        memo_key = ("processor", tuple(sorted((k, repr(v)) for k, v in merged.items())))

        def load() -> Any:
            from transformers import AutoProcessor

            # transformers leaves AutoProcessor.from_pretrained unannotated.
            return AutoProcessor.from_pretrained(  # type: ignore[no-untyped-call]
                self.model_path, **self._from_pretrained_kwargs(), **merged
            )

        processor = self._load(memo_key, load)
        if not kwargs:
            self._default_processor = processor
        return processor

    def get_tokenizer(self) -> Any:
        return self.get_hf_processor().tokenizer


_InfoT = TypeVar("_InfoT", bound="BaseProcessingInfo")


class BaseProcessingInfo:
    """Model-specific facts for processing: supported modalities, HF processor, decoders."""

    #: HF video processor class name -> the video loader backend that matches its sampling.
    VIDEO_BACKEND_BY_HF_PROCESSOR: Mapping[str, str] = {}

    #: Whether the family's processor can leave rescale + normalize to the device (vLLM's
    #: ``SupportsMultiModal.supports_mm_device_do_normalize``): ``mm_device_do_normalize``'s default.
    supports_mm_device_do_normalize: ClassVar[bool] = False

    def __init__(self, ctx: InputProcessingContext) -> None:
        self.ctx = ctx

    @classmethod
    def from_model_config(cls: type[_InfoT], model_config: ModelConfig) -> _InfoT:
        """The processing info of ``model_config``, over a new context that loads its files."""
        return cls(InputProcessingContext(model_config))

    @functools.cached_property
    def mm_device_do_normalize(self) -> bool:
        """Whether this processor emits raw ``uint8`` pixels for the device to normalize."""
        return self.ctx.model_config.resolve_mm_device_do_normalize(
            self.supports_mm_device_do_normalize
        )

    @property
    def model_id(self) -> str:
        return self.ctx.model_config.model

    def get_hf_config(self) -> Any:
        return self.ctx.get_hf_config()

    def get_hf_processor(self, **kwargs: Any) -> Any:
        return self.ctx.get_hf_processor(**kwargs)

    def get_tokenizer(self) -> Any:
        return self.ctx.get_tokenizer()

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        """Modality -> the most items one prompt may carry (None: no limit)."""
        raise NotImplementedError

    def get_default_video_backend(self) -> str | None:
        """The loader backend bound to this model's HF video processor class, if any."""
        processor = self.get_hf_processor()
        video_processor = getattr(processor, "video_processor", None)
        if video_processor is None:
            return None
        return self.VIDEO_BACKEND_BY_HF_PROCESSOR.get(type(video_processor).__name__)

    def get_media_io(
        self, modality: str, media_io_kwargs: Mapping[str, Any] | None = None
    ) -> MediaIO[Any]:
        """The decoder for ``modality``: model defaults, then config, then the request's kwargs."""
        from mediaref.media.audio import AudioMediaIO
        from mediaref.media.image import ImageMediaIO
        from mediaref.media.video import VideoMediaIO

        kwargs = {
            **self.ctx.model_config.media_io_kwargs.get(modality, {}),
            **(media_io_kwargs or {}),
        }
        if modality == "image":
            return ImageMediaIO(**kwargs)
        if modality == "video":
            if "video_backend" not in kwargs:
                backend = self.get_default_video_backend()
                if backend is not None:
                    kwargs["video_backend"] = backend
            image_kwargs = self.ctx.model_config.media_io_kwargs.get("image", {})
            return VideoMediaIO(ImageMediaIO(**image_kwargs), **kwargs)
        if modality == "audio":
            return AudioMediaIO(**kwargs)
        raise ValueError(f"no decoder for modality {modality!r}")


__all__ = ["BaseProcessingInfo", "InputProcessingContext", "ModelConfig"]
