"""``POST /v1/messages/render``: an Anthropic Messages request, rendered as vLLM 0.33 renders it.

vLLM's render server converts the request to a chat completions request
(``AnthropicServingMessages.to_chat_completion_request``) and renders that as
``/v1/chat/completions/render`` does; so does this module, into the chat route's own request
(:func:`~mediaref.serve.protocol.parse_chat_request`, every check of that route included). The
request is first checked as vLLM's ``AnthropicMessagesRequest`` checks it (a 400 naming the
field), then converted:

- ``system`` (a string or text blocks; a block starting ``x-anthropic-billing-header`` is dropped)
  becomes the first message, its texts joined; a ``system``-role message in ``messages`` stays
  where it is, unless the model's template refuses a system message past the first (it is then
  merged into the first: vLLM probes the template once, :func:`merges_inline_system`);
- text blocks are text parts (one alone: a string), image blocks ``image_url`` parts (a base64
  source as a ``data:`` URL), ``tool_use`` blocks an assistant's tool calls (arguments as JSON),
  ``thinking`` blocks its ``reasoning``; a user's ``tool_result`` is a ``tool`` message ahead of
  the user's own (its images in a user message after it), an assistant's a text part;
- ``tools`` (with ``tool_addition`` / ``tool_removal`` blocks of system messages applied) are
  function tools, ``tool_choice`` ``auto`` / ``any`` / ``tool`` / ``none`` the chat's ``auto`` /
  ``required`` / a named tool / ``none``;
- ``max_tokens`` is the output budget, ``stop_sequences`` ``stop``, ``thinking`` and
  ``output_config.effort`` a reasoning effort for the template (``thinking.type: disabled``: the
  effort the model's template tells from thinking, :func:`disabled_thinking_effort`),
  ``thinking.budget_tokens`` the sampling params' ``thinking_token_budget``.

``output_config.format`` (structured output) is refused: this server writes no guided-decoding
params.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.ext
import jinja2.sandbox

from mediaref.exceptions import VLLMValidationError
from mediaref.processing.context import BaseProcessingInfo
from mediaref.renderers.base import BaseRenderer
from mediaref.renderers.chat_utils import apply_chat_template, resolve_processing_info
from mediaref.serve import _chat_bridge as bridge
from mediaref.serve import _fields as f
from mediaref.serve.options import ServeOptions
from mediaref.serve.protocol import parse_chat_request
from mediaref.serve.sampling import MAX_STOP_STRINGS

if TYPE_CHECKING:
    from mediaref.serve.service import RenderService

BILLING_HEADER = "x-anthropic-billing-header"
"""A system text block starting with this is dropped (Claude Code's per-request attribution,
which would defeat prefix caching)."""

_ROLES = ("user", "assistant", "system")
_BLOCK_TYPES = (
    "text",
    "image",
    "tool_use",
    "tool_result",
    "tool_reference",
    "thinking",
    "redacted_thinking",
    "tool_addition",
    "tool_removal",
)
_TOOL_CHANGES = ("tool_addition", "tool_removal")
# AnthropicContentBlock's optional fields, with their JSON types (content and tool: below).
_BLOCK_FIELDS: tuple[tuple[str, type, str], ...] = (
    ("text", str, "a string"),
    ("source", dict, "an object"),
    ("id", str, "a string"),
    ("tool_use_id", str, "a string"),
    ("name", str, "a string"),
    ("input", dict, "an object"),
    ("is_error", bool, "a boolean"),
    ("tool_name", str, "a string"),
    ("thinking", str, "a string"),
    ("signature", str, "a string"),
    ("data", str, "a string"),
)
_TOOL_FIELDS: tuple[tuple[str, type, str], ...] = (
    ("description", str, "a string"),
    ("strict", bool, "a boolean"),
    ("defer_loading", bool, "a boolean"),
)
_TOOL_CHOICE_FIELDS: tuple[tuple[str, type, str], ...] = (
    ("name", str, "a string"),
    ("disable_parallel_tool_use", bool, "a boolean"),
)
_EFFORTS = ("low", "medium", "high", "xhigh", "max")
_THINKING_DISPLAYS = ("summarized", "omitted", "updates")
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
_MIN_THINKING_BUDGET = 1024
# The conversation vLLM renders to learn whether a template takes a system message past the first.
_INLINE_SYSTEM_PROBE = [
    {"role": "system", "content": "t"},
    {"role": "user", "content": "t"},
    {"role": "system", "content": "t"},
    {"role": "user", "content": "t"},
]


@dataclass(frozen=True)
class MessagesRenderRequest(bridge.BridgedRequest):
    """A ``/v1/messages/render`` body, checked and converted: the chat request it renders as,
    and what depends on the model's template or has no chat field."""

    merged_messages: list[dict[str, Any]] | None
    """The messages with every system message merged into the first (None: no inline system
    message, nothing to merge)."""
    thinking_disabled: bool
    """``thinking.type`` is ``disabled``: the template gets the effort it tells from thinking."""
    template_kwargs: dict[str, Any]
    """The request's ``chat_template_kwargs`` (the disabled-thinking effort goes over these)."""
    watermarking: bool | None
    extra_args: dict[str, Any] | None
    thinking_token_budget: int | None


# --- the request, checked as AnthropicMessagesRequest checks it ------------------------------


def _check_fields(
    value: Mapping[str, Any], where: str, fields: tuple[tuple[str, type, str], ...]
) -> None:
    for name, kind, must in fields:
        field = value.get(name)
        if field is not None and not isinstance(field, kind):
            raise f.refuse(f"{where}.{name}", must, field)


def _tool(tool: object, where: str) -> dict[str, Any]:
    """An ``AnthropicTool``: its input schema gets ``type: object`` when it names no type."""
    if not isinstance(tool, dict):
        raise f.refuse(where, "a tool object", tool)
    if not isinstance(tool.get("name"), str):
        raise f.refuse(f"{where}.name", "a string", tool.get("name"))
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise f.refuse(f"{where}.input_schema", "an object", schema)
    _check_fields(tool, where, _TOOL_FIELDS)
    return {
        "name": tool["name"],
        "description": tool.get("description"),
        "input_schema": schema if "type" in schema else {**schema, "type": "object"},
        "strict": tool.get("strict"),
        "defer_loading": tool.get("defer_loading"),
    }


def _tool_change(block: Mapping[str, Any], where: str) -> None:
    change = block.get("tool")
    if change is None:
        if block["type"] in _TOOL_CHANGES:
            raise VLLMValidationError(
                f"tool is required for {block['type']} blocks", parameter=f"{where}.tool"
            )
        return
    if not isinstance(change, dict) or change.get("type") not in (
        "tool_reference",
        "tool_definition",
    ):
        raise f.refuse(f"{where}.tool", "a tool_reference or a tool_definition", change)
    if change["type"] == "tool_reference":
        if not isinstance(change.get("name"), str):
            raise f.refuse(f"{where}.tool.name", "a string", change.get("name"))
    else:
        _tool(change.get("definition"), f"{where}.tool.definition")
    if block["type"] == "tool_removal" and change["type"] != "tool_reference":
        raise VLLMValidationError(
            "tool_removal only accepts a tool_reference", parameter=f"{where}.tool"
        )


def _check_block(block: object, where: str, *, role: str) -> None:
    """One ``AnthropicContentBlock`` (``role``: its message's; tool changes are a system's)."""
    if not isinstance(block, dict):
        raise f.refuse(where, "a content block object", block)
    if block.get("type") not in _BLOCK_TYPES:
        raise f.refuse(f"{where}.type", f"one of {', '.join(_BLOCK_TYPES)}", block.get("type"))
    _check_fields(block, where, _BLOCK_FIELDS)
    content = block.get("content")
    if content is not None and not isinstance(content, str):
        if not isinstance(content, list) or not all(isinstance(c, dict) for c in content):
            raise f.refuse(f"{where}.content", "a string or an array of objects", content)
    _tool_change(block, where)
    if block["type"] in _TOOL_CHANGES and role != "system":
        raise VLLMValidationError(
            f'{block["type"]} blocks are only allowed in messages with role "system"',
            parameter=where,
        )


def _check_content(content: object, where: str, *, role: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise f.refuse(where, "a string or an array of content blocks", content)
    for index, block in enumerate(content):
        _check_block(block, f"{where}[{index}]", role=role)


def _check_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise f.refuse("messages", "an array of message objects", messages)
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise f.refuse(where, "a message object", message)
        if message.get("role") not in _ROLES:
            raise f.refuse(f"{where}.role", "'user', 'assistant' or 'system'", message.get("role"))
        _check_content(message.get("content"), f"{where}.content", role=message["role"])
    return messages


def _tool_choice(body: Mapping[str, Any]) -> dict[str, Any] | None:
    choice = f.get_dict(body, "tool_choice")
    if choice is None:
        return None
    if choice.get("type") not in ("auto", "any", "tool", "none"):
        raise f.refuse("tool_choice.type", "'auto', 'any', 'tool' or 'none'", choice.get("type"))
    _check_fields(choice, "tool_choice", _TOOL_CHOICE_FIELDS)
    if choice["type"] == "tool" and not choice.get("name"):
        raise VLLMValidationError(
            "tool_choice.name is required when type is 'tool'", parameter="tool_choice.name"
        )
    return choice


def _thinking(body: Mapping[str, Any], max_tokens: int) -> dict[str, Any] | None:
    thinking = f.get_dict(body, "thinking")
    if thinking is None:
        return None
    kind = thinking.get("type")
    if kind not in ("enabled", "disabled", "adaptive"):
        raise f.refuse("thinking.type", "'enabled', 'disabled' or 'adaptive'", kind)
    display = thinking.get("display")
    if kind != "disabled" and display is not None and display not in _THINKING_DISPLAYS:
        raise f.refuse("thinking.display", f"one of {', '.join(_THINKING_DISPLAYS)}", display)
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if budget is None:
            raise f.refuse("thinking.budget_tokens", "an integer", None)
        budget = f.check_int("thinking.budget_tokens", budget, ge=_MIN_THINKING_BUDGET)
        transfer = body.get("kv_transfer_params")
        remote_decode = isinstance(transfer, dict) and transfer.get("do_remote_decode")
        if budget >= max_tokens and not remote_decode:  # a P/D prefill leg never decodes
            raise VLLMValidationError(
                "thinking.budget_tokens must be less than max_tokens",
                parameter="thinking.budget_tokens",
            )
        return {**thinking, "budget_tokens": budget}
    return thinking


def _effort(body: Mapping[str, Any]) -> str | None:
    """``output_config.effort``; a structured ``output_config.format`` is refused."""
    config = f.get_dict(body, "output_config")
    if config is None:
        return None
    output_format = config.get("format")
    if output_format is not None and not isinstance(output_format, dict):
        raise f.refuse("output_config.format", "an object", output_format)
    if output_format is not None:
        if output_format.get("type", "json_schema") != "json_schema":
            raise f.refuse("output_config.format.type", "'json_schema'", output_format["type"])
        schema = output_format.get("schema")
        if schema is not None and not isinstance(schema, dict):
            raise f.refuse("output_config.format.schema", "an object", schema)
        if schema:
            raise bridge.unsupported(
                "output_config.format", "it writes no structured-output params for the engine"
            )
    effort = config.get("effort")
    if effort is not None and effort not in _EFFORTS:
        raise f.refuse("output_config.effort", f"one of {', '.join(_EFFORTS)}", effort)
    return effort


def _max_tokens(body: Mapping[str, Any]) -> int:
    value = body.get("max_tokens")
    if value is None:
        raise f.refuse("max_tokens", "an integer", None)
    number = f.check_int("max_tokens", value)
    if number <= 0:
        raise VLLMValidationError("max_tokens must be positive", parameter="max_tokens")
    return number


def _stop_sequences(body: Mapping[str, Any]) -> list[str] | None:
    stop = f.get_str_list(body, "stop_sequences", single=False)
    if stop is not None and len(stop) > MAX_STOP_STRINGS:
        raise VLLMValidationError(
            f"stop_sequences may hold at most {MAX_STOP_STRINGS} strings, got {len(stop)}.",
            parameter="stop_sequences",
        )
    return stop


# --- the conversion: AnthropicServingMessages.to_chat_completion_request ---------------------


def _image_url(source: object, where: str) -> str:
    """An image source as a URL: a ``url`` source's own, else a base64 ``data:`` URL."""
    if not isinstance(source, dict):
        raise f.refuse(where, "an object", source)
    if source.get("type") == "url":
        url = source.get("url", "")
        if not isinstance(url, str):
            raise f.refuse(f"{where}.url", "a string", url)
        return url
    media_type, data = source.get("media_type", "image/jpeg"), source.get("data", "")
    if not isinstance(media_type, str) or not isinstance(data, str):
        raise f.refuse(f"{where}.data", "a string (and media_type too)", data)
    return f"data:{media_type};base64,{data}"


def _text(block: Mapping[str, Any]) -> str | None:
    text = block.get("text")
    return text if block["type"] == "text" and text else None


def _system_text(content: str | list[dict[str, Any]]) -> str | None:
    """A system message's text: its text blocks joined, billing headers dropped."""
    if isinstance(content, str):
        return None if content.startswith(BILLING_HEADER) else content
    texts = [t for t in map(_text, content) if t and not t.startswith(BILLING_HEADER)]
    return "".join(texts) if texts else None


def _tool_results(block: Mapping[str, Any], where: str, out: list[dict[str, Any]]) -> None:
    """A user's ``tool_result``: a tool message, its images in a user message after it, its tool
    references in a second tool message."""
    texts: list[str] = []
    images: list[str] = []
    references: list[dict[str, Any]] = []
    content = block.get("content")
    for index, item in enumerate(content if isinstance(content, list) else ()):
        kind = item.get("type")
        if kind == "text":
            text = item.get("text", "")
            if not isinstance(text, str):
                raise f.refuse(f"{where}.content[{index}].text", "a string", text)
            texts.append(text)
        elif kind == "image":
            url = _image_url(item.get("source", {}), f"{where}.content[{index}].source")
            if url:
                images.append(url)
        elif kind == "tool_reference":
            name = item.get("tool_name") or item.get("name")
            if name:
                references.append({"type": "tool_reference", "name": name})
    text = content if isinstance(content, str) else "\n".join(texts)
    call_id = block.get("tool_use_id") or ""
    out.append({"role": "tool", "tool_call_id": call_id, "content": text or ""})
    if images:
        parts = [{"type": "image_url", "image_url": {"url": url}} for url in images]
        out.append({"role": "user", "content": parts})
    if references:
        out.append({"role": "tool", "tool_call_id": call_id, "content": references})


def _message(message: Mapping[str, Any], where: str, out: list[dict[str, Any]]) -> None:
    """One user or assistant message (and the tool messages its tool results make)."""
    role, content = message["role"], message["content"]
    converted: dict[str, Any] = {"role": role}
    if isinstance(content, str):
        converted["content"] = content
    else:
        parts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        reasoning: list[str] = []
        for index, block in enumerate(content):
            kind, here = block["type"], f"{where}.content[{index}]"
            if kind == "text" and block.get("text"):
                parts.append({"type": "text", "text": block["text"]})
            elif kind == "image" and block.get("source"):
                url = _image_url(block["source"], f"{here}.source")
                parts.append({"type": "image_url", "image_url": {"url": url}})
            elif kind == "thinking" and block.get("thinking") is not None:
                reasoning.append(block["thinking"])
            elif kind == "tool_use":
                function = {
                    "name": block.get("name") or "",
                    "arguments": json.dumps(block.get("input") or {}),
                }
                call_id = block.get("id") or f"call_{int(time.time())}"
                calls.append({"id": call_id, "type": "function", "function": function})
            elif kind == "tool_result" and role == "user":
                _tool_results(block, here, out)
            elif kind == "tool_result":
                result = block.get("content")
                parts.append(
                    {"type": "text", "text": f"Tool result: {str(result) if result else ''}"}
                )
        if reasoning:
            converted["reasoning"] = "".join(reasoning)
        if calls:
            converted["tool_calls"] = calls
        if len(parts) == 1 and parts[0]["type"] == "text":
            converted["content"] = parts[0]["text"]
        elif parts:
            converted["content"] = parts
    if role != "user" or "content" in converted:
        out.append(converted)


def convert_messages(
    system: str | list[dict[str, Any]] | None,
    messages: list[dict[str, Any]],
    *,
    merge_inline_system: bool,
) -> list[dict[str, Any]]:
    """The chat messages of checked Anthropic ``system`` and ``messages`` (vLLM's conversion)."""
    system_texts: list[str] = []
    if isinstance(system, str) and system:
        system_texts.append(system)
    elif isinstance(system, list):
        system_texts += [t for t in map(_text, system) if t and not t.startswith(BILLING_HEADER)]
    if merge_inline_system:
        inline = (_system_text(m["content"]) for m in messages if m["role"] == "system")
        system_texts += [text for text in inline if text]
    out: list[dict[str, Any]] = []
    if system_texts:
        out.append({"role": "system", "content": "".join(system_texts)})
    for index, message in enumerate(messages):
        if message["role"] != "system":
            _message(message, f"messages[{index}]", out)
        elif not merge_inline_system and (text := _system_text(message["content"])):
            out.append({"role": "system", "content": text})
    return out


def resolve_tools(
    tools: list[dict[str, Any]] | None, messages: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """``tools`` as the conversation leaves them: its system messages' ``tool_addition`` /
    ``tool_removal`` blocks applied in order (vLLM's ``_resolve_tools``)."""
    changes = [
        block
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] in _TOOL_CHANGES
    ]
    if not changes:
        return tools
    by_name = {tool["name"]: tool for tool in tools or []}
    removed: set[str] = set()
    for block in changes:
        change = block["tool"]
        if change["type"] == "tool_definition":
            name = change["definition"]["name"]
            by_name[name] = _tool(change["definition"], "tool_definition")
        else:
            name = change["name"]
            if name not in by_name:
                raise VLLMValidationError(
                    f"{block['type']} references tool {name!r}, which is not declared in tools",
                    parameter="messages",
                )
            if block["type"] == "tool_addition":
                by_name[name] = {**by_name[name], "defer_loading": None}
        if block["type"] == "tool_removal":
            removed.add(name)
        else:
            removed.discard(name)
    return [tool for name, tool in by_name.items() if name not in removed]


def _chat_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = {
        "name": tool["name"],
        "description": tool["description"],
        "parameters": tool["input_schema"],
        "strict": tool["strict"],
        "defer_loading": tool["defer_loading"],
    }
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: Mapping[str, Any] | None, tools: list[Any] | None) -> Any:
    if choice is None:
        return None if tools is None else "auto"
    if choice["type"] == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return _TOOL_CHOICES[choice["type"]]


def parse_messages_request(
    body: object, options: ServeOptions, *, request_id: str | None = None
) -> MessagesRenderRequest:
    """A ``/v1/messages/render`` body, checked and converted; ``request_id``: the X-Request-Id
    (the body's own ``request_id`` is no Anthropic field: without the header, a random one)."""
    if not isinstance(body, dict):
        raise VLLMValidationError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise VLLMValidationError("Model is required", parameter="model")
    messages = _check_messages(body)
    max_tokens = _max_tokens(body)
    system = body.get("system")
    if system is not None:
        _check_content(system, "system", role="user")  # tool changes belong to system messages
    tools_given = f.get_list(body, "tools")
    tools = (
        None
        if tools_given is None
        else [_tool(t, f"tools[{i}]") for i, t in enumerate(tools_given)]
    )
    tools = resolve_tools(tools, messages)
    choice = _tool_choice(body)
    thinking = _thinking(body, max_tokens)
    f.get_dict(body, "metadata")
    chat: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "max_completion_tokens": max_tokens,
        "stop": _stop_sequences(body),
        **{name: body.get(name) for name in ("temperature", "top_p", "top_k")},
        "tool_choice": _chat_tool_choice(choice, tools),
    }
    bridge.pass_through(body, chat)
    template_kwargs = f.get_dict(body, "chat_template_kwargs") or {}
    chat["chat_template_kwargs"] = bridge.effort_kwargs(template_kwargs, _effort(body))
    if f.get_bool(body, "stream", False):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if choice is not None:
        chat["parallel_tool_calls"] = not choice.get("disable_parallel_tool_use")
    if tools:
        chat["tools"] = [_chat_tool(tool) for tool in tools]
    chat["messages"] = convert_messages(system, messages, merge_inline_system=False)
    if not chat["messages"]:
        raise VLLMValidationError(
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
            parameter="messages",
        )
    has_inline_system = any(m["role"] == "system" for m in messages)
    return MessagesRenderRequest(
        chat=bridge.with_tools(parse_chat_request(chat, options, request_id=request_id), tools),
        merged_messages=(
            convert_messages(system, messages, merge_inline_system=True)
            if has_inline_system
            else None
        ),
        thinking_disabled=thinking is not None and thinking["type"] == "disabled",
        template_kwargs=chat["chat_template_kwargs"],
        watermarking=f.get_bool(body, "watermarking", None),
        extra_args=bridge.vllm_xargs(body),
        thinking_token_budget=(
            thinking["budget_tokens"] if thinking and thinking["type"] == "enabled" else None
        ),
    )


# --- what depends on the model's template -----------------------------------------------------


def _template_source(info: BaseProcessingInfo) -> str | None:
    """The model's own chat template (the tokenizer's, else the HF processor's)."""
    for owner in (info.get_tokenizer, info.get_hf_processor):
        template = getattr(owner(), "chat_template", None)
        if isinstance(template, str):
            return template
    return None


@functools.lru_cache(maxsize=64)
def merges_inline_system(template: str | None) -> bool:
    """Whether a template needs every system message first (vLLM's ``_detect_merge_inline_system``:
    it renders system, user, system, user in a plain sandbox; a template error means yes)."""
    if not template:
        return True
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    try:
        environment.from_string(template).render(
            messages=_INLINE_SYSTEM_PROBE, add_generation_prompt=False
        )
    except Exception:  # a template error (vLLM's case), or one that fails some other way
        return True
    return False


def _probe_prompt(info: BaseProcessingInfo, effort: str) -> str | None:
    kwargs = bridge.effort_kwargs(None, effort)
    try:
        return apply_chat_template(
            info, [{"role": "user", "content": "Hi"}], chat_template_kwargs=kwargs
        )
    except Exception:  # the template refuses the effort
        return None


@functools.lru_cache(maxsize=32)
def disabled_thinking_effort(info: BaseProcessingInfo) -> str:
    """The effort ``thinking.type: disabled`` sends (vLLM's ``DisabledThinkingEffortResolver``):
    ``none`` where the template renders it apart from every thinking effort, else ``low``."""
    prompt = _probe_prompt(info, "none")
    if prompt is None or any(_probe_prompt(info, e) == prompt for e in _EFFORTS):
        return "low"
    return "none"


def _processing_info(renderer: BaseRenderer[Any]) -> BaseProcessingInfo:
    processor = renderer.mm_processor
    return (
        processor.info if processor is not None else resolve_processing_info(renderer.model_config)
    )


async def render_messages(
    service: RenderService, request: MessagesRenderRequest, client: str
) -> dict[str, Any]:
    """The ``GenerateRequest`` of a Messages request: its chat request, settled against the
    model's template, rendered as the chat route renders it."""
    _, renderer = service.renderer_for(request)
    chat = request.chat
    if request.merged_messages is not None or request.thinking_disabled:
        info = _processing_info(renderer)
        if request.merged_messages is not None and merges_inline_system(_template_source(info)):
            chat = dataclasses.replace(chat, messages=request.merged_messages)
        if request.thinking_disabled:
            kwargs = bridge.effort_kwargs(request.template_kwargs, disabled_thinking_effort(info))
            chat = dataclasses.replace(chat, chat_template_kwargs=kwargs)
    answer = await service.render_chat(chat, client=client)
    answer["sampling_params"] = bridge.with_sampling_fields(
        answer["sampling_params"],
        watermarking=request.watermarking,
        extra_args=request.extra_args,
        thinking_token_budget=request.thinking_token_budget,
    )
    return answer


__all__ = [
    "BILLING_HEADER",
    "MessagesRenderRequest",
    "convert_messages",
    "disabled_thinking_effort",
    "merges_inline_system",
    "parse_messages_request",
    "render_messages",
    "resolve_tools",
]
