"""The Responses request's fields that a chat request has under no name of its own, read as
vLLM 0.33's Responses rendering reads them.

Most sampling fields pass to the chat request as they are (:data:`CHAT_FIELDS`); the rest are
converted or refused here:

- ``include: ["message.output_text.logprobs"]`` with ``top_logprobs`` is the chat's ``logprobs``
  / ``top_logprobs`` (:func:`logprobs_fields`), ``reasoning.effort`` the template's reasoning
  effort (:func:`reasoning_effort`);
- ``vllm_xargs`` is the sampling params' ``extra_args``, which vLLM's Responses rendering writes
  as an empty object when there are none (:func:`sampling_extra_args`);
- what vLLM refuses outright (``prompt``, ``background`` without ``store``), and what it acts on
  but this server cannot mirror (``text.format``, ``structured_outputs``, ``logit_bias``: no
  structured-output or bias params are written for the engine), is refused
  (:func:`refuse_unmirrored`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _chat_bridge as bridge
from mediaref.serve import _fields as f

LOGPROBS_INCLUDE = "message.output_text.logprobs"
"""The ``include`` value that asks for output logprobs (``top_logprobs`` of them)."""

_INCLUDES = (
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "message.input_image.image_url",
    LOGPROBS_INCLUDE,
    "reasoning.encrypted_content",
)
_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
# The Responses fields the chat route reads under the same names (sampling, engine, media).
CHAT_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "include_stop_str_in_output",
    "priority",
    "media_io_kwargs",
    "mm_processor_kwargs",
)


def refuse_unmirrored(body: Mapping[str, Any]) -> None:
    """What vLLM refuses outright, and what it acts on but this server cannot mirror."""
    if body.get("prompt") is not None:
        raise VLLMValidationError("prompt template is not supported", parameter="prompt")
    if body.get("background") and not body.get("store", True):
        raise VLLMValidationError(
            "background can only be used when `store` is true", parameter="background"
        )
    text = f.get_dict(body, "text")
    output_format = text.get("format") if text else None
    if output_format is not None and not isinstance(output_format, dict):
        raise f.refuse("text.format", "an object", output_format)
    if output_format and output_format.get("type") != "text":
        raise bridge.unsupported(
            "text.format", "it writes no structured-output params for the engine"
        )
    for name in ("structured_outputs", "logit_bias"):
        if body.get(name) is not None:
            raise bridge.unsupported(name, "it writes no such sampling params for the engine")


def reasoning_effort(body: Mapping[str, Any]) -> str | None:
    """``reasoning.effort``, checked (None: none given)."""
    reasoning = f.get_dict(body, "reasoning")
    effort = reasoning.get("effort") if reasoning else None
    if effort is not None and effort not in _EFFORTS:
        raise f.refuse("reasoning.effort", f"one of {', '.join(_EFFORTS)}", effort)
    return effort


def logprobs_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """``include`` and ``top_logprobs`` as the chat route's ``logprobs`` / ``top_logprobs``."""
    include = f.get_list(body, "include") or []
    for index, value in enumerate(include):
        if value not in _INCLUDES:
            raise f.refuse(f"include[{index}]", f"one of {', '.join(_INCLUDES)}", value)
    top = f.get_int(body, "top_logprobs", 0)
    return {"logprobs": True, "top_logprobs": top} if LOGPROBS_INCLUDE in include else {}


def sampling_extra_args(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """vLLM's Responses sampling params carry ``vllm_xargs`` as ``extra_args``, an empty object
    when there are none, except when transfer params went through it (then it is left out)."""
    xargs = bridge.vllm_xargs(body)
    if xargs:
        return xargs
    transfer = body.get("kv_transfer_params") or body.get("ec_transfer_params")
    return None if transfer else {}


__all__ = [
    "CHAT_FIELDS",
    "LOGPROBS_INCLUDE",
    "logprobs_fields",
    "reasoning_effort",
    "refuse_unmirrored",
    "sampling_extra_args",
]
