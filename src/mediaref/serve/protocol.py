"""The render routes' request shapes: vLLM 0.33's ``ChatCompletionRequest`` and
``CompletionRequest``, the fields a render server reads.

Fields keep vLLM's names, types and defaults; a field of the wrong type is a 400 naming it, and
fields these routes do not read are ignored, as vLLM's ``OpenAIBaseModel`` ignores extra fields.
What the server's trust options refuse (``media_io_kwargs`` / ``mm_processor_kwargs`` without
``--trust-request-mm-kwargs``, ``chat_template`` without ``--trust-request-chat-template``, a
content part's ``uuid`` without ``--trust-request-mm-uuids``) is a 400 too, and a request
carrying more media items than ``--max-items-per-request`` is a 413, checked before anything is
fetched. The sampling fields are resolved into the response's ``sampling_params`` by
:mod:`mediaref.serve.responses`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mediaref.exceptions import MediaTooLargeError, VLLMValidationError
from mediaref.renderers.chat_utils.chat_message import TEXT_PART_TYPES
from mediaref.serve import _fields as f
from mediaref.serve.options import ServeOptions

MMPayload = Literal["tensors", "none"]

MAX_COMPLETION_PROMPTS = 1024
"""Prompts one completions request may carry (vLLM's ``VLLM_MAX_COMPLETION_PROMPTS`` default)."""

_CACHE_SALT_FORBIDDEN = frozenset("@/\\\x00")
_MAX_CACHE_SALT_CHARS = 128
_NON_MEDIA_PART_TYPES = TEXT_PART_TYPES | {"tool_reference"}


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
    max_tokens: int | None
    sampling: Mapping[str, Any] = field(default_factory=dict)
    """The sampling fields the client set (validated), by ``SamplingParams`` name."""


@dataclass(frozen=True)
class ChatRenderRequest(RenderCommon):
    messages: list[Any] = field(default_factory=list)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    tools: list[Any] | None = None
    tool_choice: Any = "none"
    parallel_tool_calls: bool | None = True
    include_reasoning: bool = True
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None


@dataclass(frozen=True)
class CompletionRenderRequest(RenderCommon):
    prompts: list[str | list[int]] = field(default_factory=list)
    add_special_tokens: bool = True


# SamplingParams name -> (request field, kind): what ``to_sampling_params`` copies over.
_SAMPLING_FIELDS: dict[str, str] = {
    "n": "int>=1",
    "presence_penalty": "number",
    "frequency_penalty": "number",
    "repetition_penalty": "number",
    "temperature": "number",
    "top_p": "number",
    "top_k": "int",
    "min_p": "number",
    "seed": "int",
    "stop": "str_list",
    "stop_token_ids": "int_list",
    "bad_words": "str_list",
    "allowed_token_ids": "int_list",
    "ignore_eos": "bool",
    "min_tokens": "int>=0",
    "prompt_logprobs": "int",
    "skip_special_tokens": "bool",
    "spaces_between_special_tokens": "bool",
    "include_stop_str_in_output": "bool",
}


def _sampling(body: Mapping[str, Any], *, chat: bool) -> dict[str, Any]:
    readers: dict[str, Callable[[str], object]] = {
        "int": lambda name: f.get_int(body, name, None),
        "int>=1": lambda name: f.get_int(body, name, None, ge=1),
        "int>=0": lambda name: f.get_int(body, name, None, ge=0),
        "number": lambda name: f.get_number(body, name, None),
        "bool": lambda name: f.get_bool(body, name, None),
        "str_list": lambda name: f.get_str_list(body, name),
        "int_list": lambda name: f.get_int_list(body, name),
    }
    given = {name: readers[kind](name) for name, kind in _SAMPLING_FIELDS.items()}
    if chat:  # chat: logprobs is a switch and top_logprobs the count
        if f.get_bool(body, "logprobs", False):
            given["logprobs"] = f.get_int(body, "top_logprobs", 0, ge=-1)
    else:
        given["logprobs"] = f.get_int(body, "logprobs", None, ge=-1)
    return {name: value for name, value in given.items() if value is not None}


def _mm_payload(body: Mapping[str, Any]) -> MMPayload:
    if body.get("mm_payload") is None and body.get("return_mm_kwargs") is False:
        return "none"  # vLLM's deprecated alias
    return (
        "none"
        if f.get_choice(body, "mm_payload", ("tensors", "none"), "tensors") == "none"
        else "tensors"
    )


def _cache_salt(body: Mapping[str, Any]) -> str | None:
    salt = f.get_str(body, "cache_salt", None)
    if salt is not None and (
        not salt or len(salt) > _MAX_CACHE_SALT_CHARS or _CACHE_SALT_FORBIDDEN & set(salt)
    ):
        raise VLLMValidationError(
            "Parameter 'cache_salt' must be a non-empty string of at most 128 characters and "
            "must not contain '@', '/', '\\', or NUL.",
            parameter="cache_salt",
        )
    return salt


def _common(body: Mapping[str, Any], request_id: str | None, *, chat: bool) -> dict[str, Any]:
    max_tokens = f.get_int(body, "max_tokens", None if chat else 16, ge=0)
    if chat:
        max_tokens = f.get_int(body, "max_completion_tokens", max_tokens, ge=0)
    stream = bool(f.get_bool(body, "stream", False))
    stream_options = f.get_dict(body, "stream_options")
    if stream_options and not stream:
        raise VLLMValidationError(
            "Stream options can only be defined when `stream=True`.", parameter="stream_options"
        )
    return {
        "model": f.get_str(body, "model", None),
        "request_id": request_id or f.get_str(body, "request_id", None) or uuid.uuid4().hex,
        "mm_payload": _mm_payload(body),
        "stream": stream,
        "stream_options": stream_options,
        "return_token_ids": f.get_bool(body, "return_token_ids", None),
        "cache_salt": _cache_salt(body),
        "priority": f.get_int(body, "priority", 0),
        "kv_transfer_params": f.get_dict(body, "kv_transfer_params"),
        "ec_transfer_params": f.get_dict(body, "ec_transfer_params"),
        "max_tokens": max_tokens,
        "sampling": _sampling(body, chat=chat),
    }


def _json_object(body: object) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise VLLMValidationError("the request body must be a JSON object")
    return body


def parse_chat_request(
    body: object, options: ServeOptions, *, request_id: str | None = None
) -> ChatRenderRequest:
    """A ``/v1/chat/completions/render`` body, validated; ``request_id``: the X-Request-Id."""
    body = _json_object(body)
    messages = f.get_list(body, "messages")
    if not messages or not all(isinstance(m, dict) for m in messages):
        raise f.refuse("messages", "a non-empty array of message objects", body.get("messages"))
    add_generation_prompt = bool(f.get_bool(body, "add_generation_prompt", True))
    continue_final_message = bool(f.get_bool(body, "continue_final_message", False))
    if add_generation_prompt and continue_final_message and "add_generation_prompt" in body:
        raise VLLMValidationError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            parameter="continue_final_message",
        )
    chat_template = f.get_str(body, "chat_template", None)
    if chat_template is not None and not options.trust_request_chat_template:
        raise VLLMValidationError(
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template.",
            parameter="chat_template",
        )
    media_io_kwargs = f.get_dict(body, "media_io_kwargs")
    mm_processor_kwargs = f.get_dict(body, "mm_processor_kwargs")
    for name, value in (
        ("mm_processor_kwargs", mm_processor_kwargs),
        ("media_io_kwargs", media_io_kwargs),
    ):
        if value and not options.trust_request_mm_kwargs:
            raise VLLMValidationError(
                f"Per-request {name} are disabled by default because they can change "
                "multimodal resource usage. Start the server with --trust-request-mm-kwargs "
                "only when clients are trusted.",
                parameter=name,
            )
    check_media_parts(messages, options)
    return ChatRenderRequest(
        **_common(body, request_id, chat=True),
        messages=messages,
        add_generation_prompt=add_generation_prompt and not continue_final_message,
        continue_final_message=continue_final_message,
        chat_template=chat_template,
        chat_template_kwargs=f.get_dict(body, "chat_template_kwargs") or {},
        tools=f.get_list(body, "tools"),
        tool_choice=body.get("tool_choice", "none"),
        parallel_tool_calls=f.get_bool(body, "parallel_tool_calls", True),
        include_reasoning=bool(f.get_bool(body, "include_reasoning", True)),
        media_io_kwargs=media_io_kwargs,
        mm_processor_kwargs=mm_processor_kwargs,
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
    prompts: list[str | list[int]]
    if isinstance(prompt, str):
        prompts = [prompt]
    elif isinstance(prompt, list) and all(f.is_int(t) for t in prompt):
        prompts = [list(prompt)]
    elif isinstance(prompt, list) and all(
        isinstance(p, str) or (isinstance(p, list) and p and all(f.is_int(t) for t in p))
        for p in prompt
    ):
        prompts = list(prompt)
    else:
        raise f.refuse("prompt", "a string, an array of strings, or (arrays of) token ids", prompt)
    if len(prompts) > MAX_COMPLETION_PROMPTS:
        raise VLLMValidationError(
            f"prompt list length {len(prompts)} exceeds the maximum allowed count of "
            f"{MAX_COMPLETION_PROMPTS}.",
            parameter="prompt",
        )
    if any(isinstance(p, list) and min(p) < 0 for p in prompts):
        raise f.refuse("prompt", "token ids >= 0", prompt)
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
