"""The render routes' request shapes: vLLM 0.33's ``ChatCompletionRequest`` and
``CompletionRequest``, the fields a render server reads.

Fields keep vLLM's names, types and defaults; a field of the wrong type, or a value vLLM's
request models refuse, is a 400 naming it, found before anything is fetched or rendered (only
the output budget's checks wait for the prompt's length: :mod:`mediaref.serve.sampling`). Fields
these routes do not read are ignored, as vLLM's ``OpenAIBaseModel`` ignores extra fields. A chat
request's messages, ``tools`` and ``tool_choice`` are :mod:`mediaref.serve._chat_shapes`'s; the
sampling fields are :mod:`mediaref.serve.sampling`'s.

What the server's trust options refuse (``media_io_kwargs`` / ``mm_processor_kwargs`` without
``--trust-request-mm-kwargs``, ``chat_template`` without ``--trust-request-chat-template``, a
content part's ``uuid`` without ``--trust-request-mm-uuids``) is a 400 too, and a request
carrying more media items than ``--max-items-per-request`` is a 413, checked before anything is
fetched.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mediaref.exceptions import MediaTooLargeError, VLLMValidationError
from mediaref.renderers.chat_utils.chat_message import TEXT_PART_TYPES, has_non_text_content
from mediaref.serve import _fields as f
from mediaref.serve._chat_shapes import chat_tool_choice, chat_tools, check_message
from mediaref.serve.options import ServeOptions
from mediaref.serve.sampling import SamplingRequest, parse_sampling

MMPayload = Literal["tensors", "none"]

MAX_COMPLETION_PROMPTS = 1024
"""Prompts one completions request may carry (vLLM's ``VLLM_MAX_COMPLETION_PROMPTS`` default)."""

_CACHE_SALT_FORBIDDEN = frozenset("@/\\\x00")
_MAX_CACHE_SALT_CHARS = 128
_NON_MEDIA_PART_TYPES = TEXT_PART_TYPES | {"tool_reference"}
# Fields both routes read whose vLLM type is not optional (an explicit null is refused).
_NOT_NULL = ("priority", "request_id", "mm_payload")
_NOT_NULL_CHAT = ("add_generation_prompt", "continue_final_message", "include_reasoning")
_NOT_NULL_COMPLETION = ("add_special_tokens",)
# The largest integer MessagePack carries (unsigned 64-bit), as vLLM's _verify_extra_args says.
_UINT64_END = 2**64


@dataclass(frozen=True)
class RenderCommon:
    """What both routes read besides the prompt: identity, payload choice, engine passthrough."""

    model: str | None
    request_id: str
    mm_payload: MMPayload
    stream: bool
    stream_options: dict[str, Any] | None
    return_token_ids: bool | None
    cache_salt: str | None
    priority: int
    kv_transfer_params: dict[str, Any] | None
    ec_transfer_params: dict[str, Any] | None
    sampling: SamplingRequest
    """The sampling fields the client set, validated (:mod:`mediaref.serve.sampling`)."""


@dataclass(frozen=True)
class ChatRenderRequest(RenderCommon):
    messages: list[Any] = field(default_factory=list)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = "none"
    parallel_tool_calls: bool | None = True
    include_reasoning: bool = True
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    reused_prompt_token_ids: list[int] | None = None
    """A prefill's token ids forwarded in ``kv_transfer_params``: the prompt, not rendered."""


@dataclass(frozen=True)
class CompletionRenderRequest(RenderCommon):
    prompts: list[str | list[int]] = field(default_factory=list)
    add_special_tokens: bool = True


def _mm_payload(body: Mapping[str, Any]) -> MMPayload:
    alias = f.get_bool(body, "return_mm_kwargs", None)
    if alias is False and "mm_payload" not in body:
        return "none"  # vLLM's deprecated alias
    choice = f.get_choice(body, "mm_payload", ("tensors", "none"), "tensors")
    return "none" if choice == "none" else "tensors"


def _cache_salt(body: Mapping[str, Any]) -> str | None:
    salt = body.get("cache_salt")
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt:
        raise VLLMValidationError(
            "Parameter 'cache_salt' must be a non-empty string if provided.",
            parameter="cache_salt",
        )
    if len(salt) > _MAX_CACHE_SALT_CHARS or _CACHE_SALT_FORBIDDEN & set(salt):
        raise VLLMValidationError(
            "Parameter 'cache_salt' must be at most 128 characters and must not contain "
            "'@', '/', '\\', or NUL.",
            parameter="cache_salt",
        )
    return salt


def _stream_options(body: Mapping[str, Any], stream: bool) -> dict[str, Any] | None:
    """vLLM's ``StreamOptions`` as it dumps: both switches (default false), then extra keys."""
    options = f.get_dict(body, "stream_options")
    if options and not stream:
        raise VLLMValidationError(
            "Stream options can only be defined when `stream=True`.", parameter="stream_options"
        )
    if options is None:
        return None
    for name in ("include_usage", "continuous_usage_stats"):
        value = options.get(name)
        if value is not None and not isinstance(value, bool):
            raise f.refuse(f"stream_options.{name}", "a boolean", value)
    return {"include_usage": False, "continuous_usage_stats": False, **options}


def _transfer_params(body: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """``kv_transfer_params`` / ``ec_transfer_params``: an object whose integers MessagePack
    carries (vLLM checks them as ``SamplingParams.extra_args``, where they travel)."""
    params = f.get_dict(body, name)
    pending: list[Any] = [params] if params else []
    while pending:  # iterative: a deeply nested object must not exhaust the stack
        value = pending.pop()
        if f.is_int(value) and not f.INT64_MIN <= value < _UINT64_END:
            raise VLLMValidationError(
                f"{name} integers must be between -2**63 and 2**64 - 1.", parameter=name
            )
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return params or None  # vLLM's sampling params carry only a non-empty one


def _reused_prompt_token_ids(
    common: dict[str, Any], messages: list[Any], *, echo: bool
) -> list[int] | None:
    """A prefill's ``kv_transfer_params["prompt_token_ids"]``, popped (as vLLM's
    ``_reused_prompt_token_ids`` pops it, present or not, used or not): the prompt of a
    text-only chat without ``echo`` (disaggregated serving skips the template), else ignored."""
    params = common["kv_transfer_params"]
    if params is None or "prompt_token_ids" not in params:
        return None
    params = dict(params)
    ids = params.pop("prompt_token_ids")
    common["kv_transfer_params"] = params or None
    if ids is None or echo or has_non_text_content(messages):
        return None
    if not isinstance(ids, list) or not ids or any(type(i) is not int or i < 0 for i in ids):
        raise VLLMValidationError(
            "`kv_transfer_params['prompt_token_ids']` must be a non-empty list of non-negative "
            "integers.",
            parameter="kv_transfer_params.prompt_token_ids",
        )
    return ids


def _common(body: Mapping[str, Any], request_id: str | None, *, chat: bool) -> dict[str, Any]:
    f.refuse_nulls(body, _NOT_NULL)
    stream = bool(f.get_bool(body, "stream", False))
    return {
        "model": f.get_str(body, "model", None),
        "request_id": request_id or f.get_str(body, "request_id", None) or uuid.uuid4().hex,
        "mm_payload": _mm_payload(body),
        "stream": stream,
        "stream_options": _stream_options(body, stream),
        "return_token_ids": f.get_bool(body, "return_token_ids", None),
        "cache_salt": _cache_salt(body),
        "priority": f.get_int(body, "priority", 0),
        "kv_transfer_params": _transfer_params(body, "kv_transfer_params"),
        "ec_transfer_params": _transfer_params(body, "ec_transfer_params"),
        "sampling": parse_sampling(body, chat=chat, stream=stream),
    }


def _json_object(body: object) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise VLLMValidationError("the request body must be a JSON object")
    return body


def _media_io_kwargs(body: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    kwargs = f.get_dict(body, "media_io_kwargs")
    for modality, values in (kwargs or {}).items():  # vLLM's dict[str, dict[str, Any]]
        if not isinstance(values, dict):
            raise f.refuse(f"media_io_kwargs.{modality}", "an object", values)
    return kwargs


def _check_trust(body: Mapping[str, Any], options: ServeOptions) -> None:
    """Refuse the per-request overrides the server's options do not trust."""
    if body.get("chat_template") is not None and not options.trust_request_chat_template:
        raise VLLMValidationError(
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template.",
            parameter="chat_template",
        )
    for name in ("mm_processor_kwargs", "media_io_kwargs"):
        if f.get_dict(body, name) and not options.trust_request_mm_kwargs:
            raise VLLMValidationError(
                f"Per-request {name} are disabled by default because they can change "
                "multimodal resource usage. Start the server with --trust-request-mm-kwargs "
                "only when clients are trusted.",
                parameter=name,
            )


def parse_chat_request(
    body: object, options: ServeOptions, *, request_id: str | None = None
) -> ChatRenderRequest:
    """A ``/v1/chat/completions/render`` body, validated; ``request_id``: the X-Request-Id."""
    body = _json_object(body)
    messages = f.get_list(body, "messages")
    if not messages:
        raise f.refuse("messages", "a non-empty array of message objects", body.get("messages"))
    for index, message in enumerate(messages):
        check_message(message, f"messages[{index}]")
    f.refuse_nulls(body, _NOT_NULL_CHAT)
    add_generation_prompt = bool(f.get_bool(body, "add_generation_prompt", True))
    continue_final_message = bool(f.get_bool(body, "continue_final_message", False))
    if add_generation_prompt and continue_final_message and "add_generation_prompt" in body:
        raise VLLMValidationError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            parameter="continue_final_message",
        )
    chat_template = f.get_str(body, "chat_template", None)
    _check_trust(body, options)
    tools = chat_tools(body)
    tool_choice = chat_tool_choice(body, tools)
    check_media_parts(messages, options)
    common = _common(body, request_id, chat=True)
    echo = bool(f.get_bool(body, "echo", False))
    reused = _reused_prompt_token_ids(common, messages, echo=echo)
    return ChatRenderRequest(
        **common,
        reused_prompt_token_ids=reused,
        messages=messages,
        add_generation_prompt=add_generation_prompt and not continue_final_message,
        continue_final_message=continue_final_message,
        chat_template=chat_template,
        chat_template_kwargs=f.get_dict(body, "chat_template_kwargs") or {},
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=f.get_bool(body, "parallel_tool_calls", True),
        include_reasoning=bool(f.get_bool(body, "include_reasoning", True)),
        media_io_kwargs=_media_io_kwargs(body),
        mm_processor_kwargs=f.get_dict(body, "mm_processor_kwargs"),
    )


def check_media_parts(messages: list[Any], options: ServeOptions) -> None:
    """Refuse, before anything is fetched, more media items than the server allows (413) and
    client-chosen item UUIDs the server does not trust (400)."""
    count = 0
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict):
                continue
            part_type = part.get("type")
            if part_type is None and "text" in part:
                continue
            if part_type in _NON_MEDIA_PART_TYPES:
                continue
            count += 1
            if part.get("uuid") is not None and not options.trust_request_mm_uuids:
                raise VLLMValidationError(
                    "Content part UUIDs choose the item's cache identity; this server does not "
                    "accept them from clients (start it with --trust-request-mm-uuids to allow).",
                    parameter="uuid",
                )
    if count > options.max_items_per_request:
        raise MediaTooLargeError(
            f"the request carries {count} media items, over this server's limit of "
            f"{options.max_items_per_request} (--max-items-per-request)"
        )


def _token_ids(value: object) -> list[int] | None:
    """A non-empty array of token ids (JSON integers, or numbers with no fraction, as pydantic's
    ``int`` takes them), else None."""
    if not isinstance(value, list) or not value:
        return None
    ids = [f.as_int(token) for token in value]
    return [token for token in ids if token is not None] if None not in ids else None


def _prompts(prompt: object) -> list[str | list[int]]:
    """``prompt`` as a list of prompts: a string, strings, token ids or lists of token ids."""
    if isinstance(prompt, str):
        return [prompt]
    single = _token_ids(prompt)
    if single is not None:
        return [single]
    if isinstance(prompt, list):
        prompts = [item if isinstance(item, str) else _token_ids(item) for item in prompt]
        if None not in prompts:
            return [item for item in prompts if item is not None]
    raise f.refuse("prompt", "a string, an array of strings, or (arrays of) token ids", prompt)


def parse_completion_request(
    body: object, options: ServeOptions, *, request_id: str | None = None
) -> CompletionRenderRequest:
    """A ``/v1/completions/render`` body, validated (text or token-id prompts)."""
    body = _json_object(body)
    prompt = body.get("prompt")
    if prompt is None or prompt == "" or prompt == []:
        raise VLLMValidationError(
            "Either prompt or prompt_embeds must be provided and non-empty.", parameter="prompt"
        )
    if body.get("prompt_embeds") is not None:
        raise VLLMValidationError(
            "prompt_embeds are not supported by this render server", parameter="prompt_embeds"
        )
    if body.get("suffix") is not None:
        raise VLLMValidationError("suffix is not supported for this model", parameter="suffix")
    prompts = _prompts(prompt)
    if len(prompts) > MAX_COMPLETION_PROMPTS:
        raise VLLMValidationError(
            f"prompt list length {len(prompts)} exceeds the maximum allowed count of "
            f"{MAX_COMPLETION_PROMPTS}.",
            parameter="prompt",
        )
    if any(isinstance(p, list) and min(p) < 0 for p in prompts):
        raise f.refuse("prompt", "token ids >= 0", prompt)
    f.refuse_nulls(body, _NOT_NULL_COMPLETION)
    return CompletionRenderRequest(
        **_common(body, request_id, chat=False),
        prompts=prompts,
        add_special_tokens=bool(f.get_bool(body, "add_special_tokens", True)),
    )


__all__ = [
    "MAX_COMPLETION_PROMPTS",
    "ChatRenderRequest",
    "CompletionRenderRequest",
    "MMPayload",
    "RenderCommon",
    "check_media_parts",
    "parse_chat_request",
    "parse_completion_request",
]
