"""Prompt embeddings: a client's own token embeddings, loaded safely and checked against the model.

One loader for both ways they arrive: a ``prompt_embeds`` chat content part, and a completion
prompt given as base64 bytes (the renderer's :func:`safe_load_prompt_embeds`, vLLM's
``vllm.renderers.embed_utils`` function).

The payload is loaded by the same safe embedding loader as ``image_embeds``
(:class:`~mediaref.media.image.ImageEmbeddingMediaIO`: ``weights_only`` torch loads or pickle-free
``.npy``, declared sizes checked against ``VLLM_MAX_EMBED_DECODE_BYTES`` before anything is
allocated); what it must then be is the prompt's: a 2-D ``(num_tokens, hidden_size)`` floating
tensor (a leading batch dimension of one is dropped) whose width is the model's text embedding
width, cast to the model's dtype when the config names one. Every refusal is a
:class:`~mediaref.exceptions.VLLMValidationError` (HTTP 400) with ``parameter="prompt_embeds"``.
"""

from __future__ import annotations

from typing import Any

import torch

from mediaref.exceptions import VLLMValidationError
from mediaref.media.image import ImageEmbeddingMediaIO

_PARAMETER = "prompt_embeds"
_MAX_REASON_CHARS = 200


def text_hidden_size(hf_config: Any) -> int | None:
    """The width of the model's input token embeddings (None when the config does not say).

    Some models project token embeddings inside the decoder (OPT's ``word_embed_proj_dim``); the
    prompt is taken at the width before that projection.
    """
    get_text_config = getattr(hf_config, "get_text_config", None)
    text_config = get_text_config() if callable(get_text_config) else hf_config
    for name in ("word_embed_proj_dim", "hidden_size"):
        value = getattr(text_config, name, None)
        if isinstance(value, int):
            return value
    return None


def prompt_embeds_width(model_config: Any) -> int | None:
    """The width a prompt's embeddings must have for ``model_config``: vLLM's rule where its
    config answers it (``word_embed_proj_dim`` of the text config, else ``get_hidden_size()``),
    else :func:`text_hidden_size` of the HF config."""
    get_hidden_size = getattr(model_config, "get_hidden_size", None)
    if callable(get_hidden_size):
        width = getattr(getattr(model_config, "hf_text_config", None), "word_embed_proj_dim", None)
        width = get_hidden_size() if width is None else width
        if isinstance(width, int):
            return width
    return text_hidden_size(getattr(model_config, "hf_config", None))


def load_prompt_embeds(
    data: str | bytes, *, hidden_size: int | None, dtype: torch.dtype | None
) -> torch.Tensor:
    """The ``(num_tokens, hidden_size)`` tensor that base64 ``data`` holds, checked and cast.

    The embedding loader's guards apply: ``weights_only`` torch loads or pickle-free ``.npy``,
    sparse tensors checked under the process's one guard and refused over
    ``VLLM_MAX_EMBED_DECODE_BYTES`` before they are densified."""
    if isinstance(data, bytes):  # base64 is ASCII; anything else fails the strict decode
        data = data.decode("ascii", errors="replace")
    try:
        tensor = ImageEmbeddingMediaIO().load_base64("", data)
    except ValueError as exc:  # VLLMValidationError included
        # The loader names the field it serves; this payload is the prompt's. vLLM's words; the
        # reason is built from the caller's bytes, so it is cut short.
        reason = str(exc) or type(exc).__name__
        if len(reason) > _MAX_REASON_CHARS:
            left = len(reason) - _MAX_REASON_CHARS
            reason = f"{reason[:_MAX_REASON_CHARS]}... ({left} more characters truncated)"
        raise VLLMValidationError(
            f"`{_PARAMETER}` could not be deserialized as a torch tensor: {reason}",
            parameter=_PARAMETER,
        ) from exc
    if tensor.dim() > 2:
        tensor = tensor.squeeze(0)
    if tensor.dim() != 2:
        raise VLLMValidationError(
            f"`{_PARAMETER}` must be a 2D tensor of shape (num_tokens, hidden_size); "
            f"got shape {tuple(tensor.shape)}.",
            parameter=_PARAMETER,
        )
    if hidden_size is not None and tensor.shape[1] != hidden_size:
        raise VLLMValidationError(
            f"`{_PARAMETER}` hidden_size {tensor.shape[1]} does not match the model's "
            f"hidden_size {hidden_size}.",
            parameter=_PARAMETER,
        )
    if not tensor.is_floating_point():
        # An integer or boolean tensor is the wrong payload (quantized, or not embeddings at
        # all); casting it would hide the mistake.
        raise VLLMValidationError(
            f"`{_PARAMETER}` dtype {tensor.dtype} is not a floating-point type.",
            parameter=_PARAMETER,
        )
    if dtype is not None and tensor.dtype != dtype:
        tensor = tensor.to(dtype)
    return tensor


def safe_load_prompt_embeds(model_config: Any, embed: str | bytes) -> torch.Tensor:
    """A completion prompt's base64 embeddings for ``model_config``: vLLM's call. Refused unless
    the config enables prompt embeddings (``--enable-prompt-embeds``), then loaded and checked
    as a chat part's are."""
    if not getattr(model_config, "enable_prompt_embeds", False):
        raise VLLMValidationError(
            "You must set `--enable-prompt-embeds` to input `prompt_embeds`.",
            parameter=_PARAMETER,
        )
    return load_prompt_embeds(
        embed,
        hidden_size=prompt_embeds_width(model_config),
        dtype=getattr(model_config, "dtype", None),
    )


__all__ = [
    "load_prompt_embeds",
    "prompt_embeds_width",
    "safe_load_prompt_embeds",
    "text_hidden_size",
]
