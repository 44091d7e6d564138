"""The model a chat request is parsed for: its processing info, and the settings the parser reads.

The parser takes a :class:`~mediaref.processing.context.ModelConfig` or a processing info. The
settings it reads off the config are vLLM's: on vLLM's config some live on
``multimodal_config`` (``enable_mm_embeds``, ``interleave_mm_strings``, ``media_io_kwargs``), the
others on the config itself. A config that does not carry a setting gets vLLM's default: mediaref's
``ModelConfig`` has no ``enable_mm_embeds`` field, so a model configured with it takes no
embeddings, as a vLLM server started without ``--enable-mm-embeds`` would not.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from mediaref.cache import multimodal_setting
from mediaref.exceptions import VLLMValidationError
from mediaref.processing.context import BaseProcessingInfo, ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY

ModelLike = ModelConfig | BaseProcessingInfo
"""A model as the chat parser takes it: its config, or its (already loaded) processing info."""

_INFO_MEMO_SIZE = 8
_info_memo: OrderedDict[str, BaseProcessingInfo] = OrderedDict()
_info_memo_lock = threading.Lock()


def takes_no_media(model: ModelLike) -> bool:
    """Whether ``model`` is a config that says it has no multimodal processor (vLLM serving a
    text-only model on mediaref): its chats still parse, text and prompt embeddings, and no
    processing info is built for it (there is none to build)."""
    if isinstance(model, BaseProcessingInfo):
        return False
    return getattr(model, "is_multimodal_model", True) is False


def check_model_like(model: object) -> None:
    """A TypeError unless ``model`` is a processing info, mediaref's ModelConfig, or vLLM's own
    (vLLM's chat parsing hands it over when vLLM runs on mediaref): the registry reads each."""
    if not isinstance(model, (BaseProcessingInfo, ModelConfig)) and not hasattr(model, "hf_config"):
        raise TypeError(
            f"expected a ModelConfig or a BaseProcessingInfo, got {type(model).__name__}"
        )


def resolve_processing_info(model: ModelLike) -> BaseProcessingInfo:
    """The processing info of ``model``; for a config, one kept per distinct config.

    Kept because building it is cheap but its first use loads the HF processor (seconds); a
    server parsing every request against the same config must not pay that per request.
    """
    if isinstance(model, BaseProcessingInfo):
        return model
    check_model_like(model)
    memo_key = repr(model)  # the config's dataclass repr carries every field's value
    with _info_memo_lock:
        info = _info_memo.get(memo_key)
        if info is None:
            info = MULTIMODAL_REGISTRY.get_processing_info(model)
            _info_memo[memo_key] = info
            while len(_info_memo) > _INFO_MEMO_SIZE:
                _info_memo.popitem(last=False)
        else:
            _info_memo.move_to_end(memo_key)
        return info


_model_cls_memo: weakref.WeakKeyDictionary[BaseProcessingInfo, Any] = weakref.WeakKeyDictionary()


def registered_model_cls(info: BaseProcessingInfo) -> Any:
    """The model class registered for ``info``'s model (None for a family registered without
    one, or a model no processor is registered for); looked up once per processing info, as the
    lookup reads the model directory's config.json."""
    with _info_memo_lock:
        if info in _model_cls_memo:
            return _model_cls_memo[info]
    try:
        found = MULTIMODAL_REGISTRY.get_factories(info.ctx.model_config).model_cls
    except VLLMValidationError:
        found = None
    with _info_memo_lock:
        _model_cls_memo[info] = found
    return found


def mm_embeds_enabled(config: object) -> bool:
    """vLLM's ``--enable-mm-embeds``: whether image/audio/video embeddings are accepted."""
    return bool(multimodal_setting(config, "enable_mm_embeds", False))


def prompt_embeds_enabled(config: object) -> bool:
    """vLLM's ``--enable-prompt-embeds``: whether ``prompt_embeds`` parts are accepted."""
    return bool(multimodal_setting(config, "enable_prompt_embeds", False))


def interleave_mm_strings(config: object) -> bool:
    """vLLM's ``--interleave-mm-strings``: string-format placeholders stay where their parts were."""
    return bool(multimodal_setting(config, "interleave_mm_strings", False))


def config_media_io_kwargs(config: object) -> dict[str, dict[str, Any]] | None:
    """The config's per-modality decoder settings (``--media-io-kwargs``), None when empty."""
    kwargs = multimodal_setting(config, "media_io_kwargs", None)
    if not isinstance(kwargs, Mapping) or not kwargs:
        return None
    return {modality: dict(values) for modality, values in kwargs.items()}


def allowed_local_media_path(config: object) -> str:
    """The directory ``file:`` URLs may read under ("" : none, ``file:`` refused)."""
    return str(multimodal_setting(config, "allowed_local_media_path", "") or "")


def allowed_media_domains(config: object) -> list[str] | None:
    """The hosts http(s) media may come from (None: any public host)."""
    domains = multimodal_setting(config, "allowed_media_domains", None)
    if domains is None or isinstance(domains, str) or not isinstance(domains, Sequence):
        return None
    return [str(domain) for domain in domains]


def configured_limit(config: object, modality: str) -> int | None:
    """``--limit-mm-per-prompt`` for ``modality`` (vLLM's default, 999, when unset); None when
    the config has no multimodal options to say."""
    multimodal = getattr(config, "multimodal_config", None)
    get_limit = getattr(multimodal, "get_limit_per_prompt", None)
    return int(get_limit(modality)) if callable(get_limit) else None


def config_dtype(config: object) -> Any:
    """The model's dtype (``torch.dtype``) when the config says, else None."""
    return getattr(config, "dtype", None)


__all__ = [
    "ModelLike",
    "allowed_local_media_path",
    "allowed_media_domains",
    "check_model_like",
    "config_dtype",
    "config_media_io_kwargs",
    "configured_limit",
    "interleave_mm_strings",
    "mm_embeds_enabled",
    "prompt_embeds_enabled",
    "registered_model_cls",
    "resolve_processing_info",
    "takes_no_media",
]
