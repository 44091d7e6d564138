"""What the Anthropic Messages and OpenAI Responses render routes share.

vLLM 0.33's render server answers both by turning the request into a chat render: the Messages
route converts it to a ``ChatCompletionRequest``, the Responses route into chat messages and its
own sampling. mediaref does the same: each route builds a chat-completions body, parsed by
:func:`~mediaref.serve.protocol.parse_chat_request` (every check of the chat route) and rendered by
``RenderService.render_chat``. What a chat body has no field for comes back here:

- a reasoning effort, which vLLM's ``build_chat_params`` hands the chat template as
  ``reasoning_effort`` (and ``enable_thinking``, unless the request's kwargs set it):
  :func:`effort_kwargs`;
- ``sampling_params`` fields the chat route does not write (``watermarking``, ``extra_args`` from
  ``vllm_xargs``, ``thinking_token_budget``): :func:`with_sampling_fields`, in ``SamplingParams``'
  field order;
- ``vllm_xargs``, checked as vLLM's request models and ``SamplingParams`` check it:
  :func:`vllm_xargs`;
- a tool list that converts to no tool: vLLM hands the template an empty list, which the chat
  route's ``tools`` refuses: :func:`with_tools`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _fields as f
from mediaref.serve.protocol import ChatRenderRequest

_UINT64_END = 2**64
_TRANSFER_PARAMS = ("kv_transfer_params", "ec_transfer_params")
# Fields both routes hand to the chat body unchanged (the chat route checks them).
PASSED_THROUGH = ("cache_salt", "chat_template_kwargs", "mm_payload", "return_mm_kwargs")


@dataclass(frozen=True)
class BridgedRequest:
    """A request of another API, checked and converted: the chat request it renders as."""

    chat: ChatRenderRequest

    @property
    def model(self) -> str | None:
        return self.chat.model

    @property
    def request_id(self) -> str:
        return self.chat.request_id


def unsupported(name: str, why: str) -> VLLMValidationError:
    """A field vLLM acts on and this server cannot mirror: a 400 saying so."""
    return VLLMValidationError(
        f"{name} is not supported by this render server ({why})", parameter=name
    )


def pass_through(body: Mapping[str, Any], chat: dict[str, Any]) -> None:
    """Copy the fields the chat route checks itself; an empty ``kv_transfer_params`` /
    ``ec_transfer_params`` is none (vLLM's sampling params carry only a non-empty one)."""
    for name in PASSED_THROUGH:
        if name in body:
            chat[name] = body[name]
    for name in _TRANSFER_PARAMS:
        value = body.get(name)
        chat[name] = None if value == {} else value


def effort_kwargs(kwargs: Mapping[str, Any] | None, effort: str | None) -> dict[str, Any]:
    """The chat template's kwargs with a reasoning effort, as vLLM's ``build_chat_params`` merges
    them: the effort over the request's own, ``enable_thinking`` only where those leave it unset."""
    merged = dict(kwargs or {})
    if effort is None:
        return merged
    merged["reasoning_effort"] = effort
    if "enable_thinking" not in (kwargs or {}):
        merged["enable_thinking"] = effort != "none"
    return merged


def vllm_xargs(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """``vllm_xargs``: strings, numbers or arrays of them, integers MessagePack carries."""
    xargs = f.get_dict(body, "vllm_xargs")
    if not xargs:
        return None
    for key, value in xargs.items():
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, (str, float)) or f.is_int(v) for v in values):
            raise f.refuse(f"vllm_xargs.{key}", "a string, a number or an array of them", value)
        if any(f.is_int(v) and not f.INT64_MIN <= v < _UINT64_END for v in values):
            raise VLLMValidationError(
                "extra_args integers must be between -2**63 and 2**64 - 1.",
                parameter="extra_args",
            )
        if key in _TRANSFER_PARAMS:
            raise VLLMValidationError(
                f"vllm_xargs may not carry {key}: send it as the request's own field",
                parameter="vllm_xargs",
            )
    return xargs


def with_sampling_fields(
    params: Mapping[str, Any],
    *,
    watermarking: bool | None = None,
    extra_args: dict[str, Any] | None = None,
    thinking_token_budget: int | None = None,
) -> dict[str, Any]:
    """``sampling_params`` with the fields the chat route never sets, where ``SamplingParams``
    dumps them: ``watermarking`` after ``temperature``, ``extra_args`` before ``bad_words``,
    ``thinking_token_budget`` last (None: the field is left out, as msgspec omits a default)."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if name == "bad_words" and extra_args is not None:
            out["extra_args"] = extra_args
        out[name] = value
        if name == "temperature" and watermarking is not None:
            out["watermarking"] = watermarking
    if thinking_token_budget is not None:
        out["thinking_token_budget"] = thinking_token_budget
    return out


def with_tools(chat: ChatRenderRequest, tools: list[dict[str, Any]] | None) -> ChatRenderRequest:
    """``chat`` with an empty tool list where the request's tools converted to none (the chat
    body left them out: its ``tools`` must not be empty)."""
    return dataclasses.replace(chat, tools=[]) if tools == [] else chat


__all__ = [
    "PASSED_THROUGH",
    "BridgedRequest",
    "effort_kwargs",
    "pass_through",
    "unsupported",
    "vllm_xargs",
    "with_sampling_fields",
    "with_tools",
]
