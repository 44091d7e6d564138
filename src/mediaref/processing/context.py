"""What a model's processing needs to know: its local directory, HF files, limits and decoders.

:class:`InputProcessingContext` loads the model's HF config, tokenizer and processor offline and
calls the processor; :class:`BaseProcessingInfo` is the per-family facts a model file supplies
(limits, data parser, tokenization defaults). Re-exported here, where vLLM has them or mediaref's
users look for them: :class:`ModelConfig` / :class:`MultiModalConfig` (``_model_config``),
:class:`TokenizeParams` (``_tokenize_params``) and :class:`TimingContext`, a request's stage
times (``_timing``). Decoder resolution lives here too, in
:meth:`BaseProcessingInfo.get_media_io`, because this layer has the model's configuration: the
video backend that matches the model's HF video processor is chosen here, and an explicit
``video_backend`` (from ``media_io_kwargs`` or the request) wins.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, get_type_hints

from mediaref.cache import multimodal_setting
from mediaref.exceptions import VLLMValidationError
from mediaref.media.base import MediaIO
from mediaref.parse import (
    DictEmbeddingItems,
    EmbeddingItems,
    MultiModalDataItems,
    MultiModalDataParser,
)
from mediaref.processing._input_context import InputProcessingContext
from mediaref.processing._mm_kwargs import resolve_mm_processor_kwargs
from mediaref.processing._model_config import (
    DTYPES,
    DeviceNormalizeSupport,
    ModelConfig,
    MultiModalConfig,
    device_normalize_kwargs,
    max_model_len_of,
    resolve_dtype,
    set_device_normalize_support,
)
from mediaref.processing._timing import TimingContext
from mediaref.processing._tokenize_params import TokenizeParams

if TYPE_CHECKING:
    from mediaref.inputs import MultiModalDataDict


@functools.lru_cache(maxsize=32)
def _configured_video_processor(model_dir: str) -> str | None:
    """``video_processor_type`` from a model directory's processor configs (read once a
    directory: every video fetch asks)."""
    for name in ("video_preprocessor_config.json", "preprocessor_config.json"):
        try:
            config = json.loads((Path(model_dir) / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and isinstance(config.get("video_processor_type"), str):
            return str(config["video_processor_type"])
    return None


class BaseProcessingInfo:
    """Model-specific facts for processing: limits, HF processor, data parser, decoders."""

    #: Whether the family's processor can leave rescale + normalize to the device (vLLM's
    #: ``SupportsMultiModal.supports_mm_device_do_normalize``): ``mm_device_do_normalize``'s default.
    supports_mm_device_do_normalize: ClassVar[bool] = False

    def __init__(self, ctx: InputProcessingContext) -> None:
        self.ctx = ctx

    @functools.cached_property
    def mm_device_do_normalize(self) -> bool:
        """Whether this processor emits raw ``uint8`` pixels for the device to normalize."""
        resolve = getattr(self.ctx.model_config, "resolve_mm_device_do_normalize", None)
        if resolve is None:  # vLLM's own ModelConfig: vLLM 0.33 normalizes on the CPU
            return False
        return bool(resolve(self.supports_mm_device_do_normalize))

    @property
    def model_id(self) -> str:
        config = self.ctx.model_config
        model_id = getattr(config, "model_id", None)  # mediaref's; vLLM's config has none
        return str(config.model if model_id is None else model_id)

    def get_tokenizer(self) -> Any:
        return self.ctx.get_tokenizer()

    def get_hf_config(self) -> Any:
        return self.ctx.get_hf_config()

    def get_hf_processor(self, **kwargs: object) -> Any:
        """The HF processor; a family overrides this to pass its class or its own kwargs."""
        return self.ctx.get_hf_processor(**kwargs)

    # -- kwargs and tokenization -----------------------------------------------------------

    def get_supported_mm_processor_kwargs(self) -> dict[str, set[str]]:
        """The kwarg names each HF kwarg scope accepts, read from the processor's annotations."""
        processor = self.get_hf_processor()
        hints = get_type_hints(processor.valid_processor_kwargs)
        supported = {"text_kwargs": set(hints["text_kwargs"].__annotations__)}
        limits = self.supported_mm_limits
        if "image" in limits:
            supported["images_kwargs"] = set(processor.image_processor.valid_kwargs.__annotations__)
        if "video" in limits:
            supported["videos_kwargs"] = set(processor.video_processor.valid_kwargs.__annotations__)
        if "audio" in limits:
            supported["audio_kwargs"] = set(hints["audio_kwargs"].__annotations__)
        return supported

    @functools.cached_property
    def supported_mm_processor_kwargs(self) -> dict[str, set[str]]:
        return self.get_supported_mm_processor_kwargs()

    def get_default_tok_params(self) -> TokenizeParams:
        """How prompts for this model are tokenized by default: bounded by its context length,
        with special tokens."""
        model_config = self.ctx.model_config
        encoder_config = model_config.encoder_config or {}
        return TokenizeParams(
            max_total_tokens=max_model_len_of(model_config),
            do_lower_case=bool(encoder_config.get("do_lower_case", False)),
            add_special_tokens=True,
        )

    @functools.cached_property
    def default_tok_params(self) -> TokenizeParams:
        return self.get_default_tok_params()

    # -- parsing and limits ----------------------------------------------------------------

    @property
    def allow_missing_mm_embeddings(self) -> bool:
        """Whether precomputed embedding tensors may be omitted."""
        return self.ctx.get_mm_config().allow_missing_mm_embeddings

    def _get_expected_hidden_size(self) -> int | None:
        # Checked only when embeddings are accepted: a tensor of the right rank but the wrong
        # width would otherwise reach the model and fail there.
        model_config = self.ctx.model_config
        if self.ctx.get_mm_config().enable_mm_embeds:
            try:
                return model_config.get_inputs_embeds_size()
            except (OSError, ValueError):
                return None
        return None

    def get_data_parser(self) -> MultiModalDataParser:
        """The parser that normalizes a request's multimodal data into items; a family with its
        own data forms returns a subclass."""
        kwargs: dict[str, Any] = {"expected_hidden_size": self._get_expected_hidden_size()}
        if self.allow_missing_mm_embeddings:
            kwargs["allow_missing_mm_embeddings"] = True
        return MultiModalDataParser(**kwargs)

    @functools.cached_property
    def data_parser(self) -> MultiModalDataParser:
        return self.get_data_parser()

    @property
    def skip_prompt_length_check(self) -> bool:
        return False

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        """Modality -> the most items one prompt may carry (None: no limit); a modality left
        out is not supported. Every family defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define get_supported_mm_limits")

    @functools.cached_property
    def supported_mm_limits(self) -> Mapping[str, int | None]:
        return self.get_supported_mm_limits()

    @functools.cached_property
    def allowed_mm_limits(self) -> Mapping[str, int]:
        """Per supported modality, the smaller of the model's limit and ``--limit-mm-per-prompt``."""
        mm_config = self.ctx.get_mm_config()
        allowed: dict[str, int] = {}
        for modality, supported in self.supported_mm_limits.items():
            configured = mm_config.get_limit_per_prompt(modality)
            allowed[modality] = configured if supported is None else min(configured, supported)
        return allowed

    def validate_num_items(self, modality: str, num_items: int) -> None:
        """Refuse more ``modality`` items than one prompt may carry (``VLLMValidationError``)."""
        if modality not in self.supported_mm_limits and num_items > 0:
            supported_names = ", ".join(sorted(self.supported_mm_limits)) or "none"
            raise VLLMValidationError(
                f"{modality} input is not supported by this model (supported: {supported_names})",
                parameter=modality,
            )
        supported = self.supported_mm_limits.get(modality, 0)
        allowed = self.allowed_mm_limits.get(modality, 0)
        if supported is None:
            supported = allowed
        limit = min(supported, allowed)
        if num_items > limit:
            message = f"At most {limit} {modality}(s) may be provided in one prompt."
            if num_items <= supported:
                message += " Set `--limit-mm-per-prompt` to increase this limit."
            raise VLLMValidationError(message, parameter=modality)

    def parse_mm_data(
        self, mm_data: MultiModalDataDict, *, validate: bool = True
    ) -> MultiModalDataItems:
        """Normalize ``mm_data`` into items; with ``validate``, refuse embeddings unless
        ``enable_mm_embeds`` and more items than allowed (vLLM's checks)."""
        mm_items = self.data_parser.parse_mm_data(mm_data)
        if validate:
            mm_config = self.ctx.get_mm_config()
            for modality, items in mm_items.items():
                if isinstance(items, (EmbeddingItems, DictEmbeddingItems)):
                    if not mm_config.enable_mm_embeds:
                        raise VLLMValidationError(
                            f"You must set `--enable-mm-embeds` to input `{modality}_embeds`",
                            parameter=modality,
                        )
                    if mm_config.get_limit_per_prompt(modality) == 0:
                        continue  # embeddings may stand in for a modality limited to 0
                self.validate_num_items(modality, items.get_count())
        return mm_items

    def get_mm_max_tokens_per_item(
        self, seq_len: int, mm_counts: Mapping[str, int]
    ) -> Mapping[str, int] | None:
        """The most tokens one item of each modality can take, if the family knows it without
        processing dummy inputs (None: it does not)."""
        return None

    # -- decoders --------------------------------------------------------------------------

    def get_video_processor_name(self) -> str | None:
        """The class name of the model's HF video processor (None: it has none): read off the
        directory's processor configs when they name it, as vLLM's
        ``get_video_processor_cls_name`` does, else off the loaded HF processor."""
        configured = _configured_video_processor(str(self.ctx.model_config.model))
        if configured is not None:
            return configured
        video_processor = getattr(self.get_hf_processor(), "video_processor", None)
        return None if video_processor is None else type(video_processor).__name__

    def get_default_video_backend(self) -> str | None:
        """The video loader registered for this model's HF video processor
        (``VIDEO_LOADER_REGISTRY.register(..., video_processor=...)``), if any: what vLLM's
        ``fetch_video(..., video_processor=...)`` picks when the settings name no
        ``video_backend`` (Qwen2-VL's: ``qwen2_vl``, 2 frames a second)."""
        from mediaref.media.video.loader_registry import get_video_loader_backend_for_processor

        return get_video_loader_backend_for_processor(self.get_video_processor_name())

    def get_media_io(
        self, modality: str, media_io_kwargs: Mapping[str, Any] | None = None
    ) -> MediaIO[Any]:
        """The decoder for ``modality``: model defaults, then config, then the request's kwargs."""
        from mediaref.media.audio import AudioMediaIO
        from mediaref.media.image import ImageMediaIO
        from mediaref.media.video import VideoMediaIO

        configured = multimodal_setting(self.ctx.model_config, "media_io_kwargs", None) or {}
        kwargs = {**configured.get(modality, {}), **(media_io_kwargs or {})}
        if modality == "image":
            return ImageMediaIO(**kwargs)
        if modality == "video":
            if "video_backend" not in kwargs:
                backend = self.get_default_video_backend()
                if backend is not None:
                    kwargs["video_backend"] = backend
            return VideoMediaIO(ImageMediaIO(**configured.get("image", {})), **kwargs)
        if modality == "audio":
            return AudioMediaIO(**kwargs)
        raise ValueError(f"no decoder for modality {modality!r}")


# vLLM's private names for these, which its own tests import from this module.
_resolve_mm_processor_kwargs = resolve_mm_processor_kwargs

__all__ = [
    "DTYPES",
    "BaseProcessingInfo",
    "DeviceNormalizeSupport",
    "InputProcessingContext",
    "ModelConfig",
    "MultiModalConfig",
    "MultiModalDataItems",
    "TimingContext",
    "TokenizeParams",
    "device_normalize_kwargs",
    "max_model_len_of",
    "resolve_dtype",
    "set_device_normalize_support",
]
