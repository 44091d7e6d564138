"""``POST /v1/responses/render``: an OpenAI Responses request, rendered as vLLM 0.33 renders it.

vLLM's render server (``render_responses_request``) turns the request's ``instructions`` and
``input`` into chat messages (``construct_input_messages``) and renders them with the chat
template; mediaref builds the chat route's request of them
(:func:`~mediaref.serve.protocol.parse_chat_request`, its checks included) and renders that:

- ``instructions`` is a system message first; ``input`` a string (one user message) or items:
  messages (``input_text`` / ``input_image`` parts, an assistant's ``output_text``),
  ``function_call`` (an assistant's tool call, joining the assistant message before it),
  ``function_call_output`` (a tool message), ``reasoning`` (an assistant's reasoning),
  ``custom_tool_call`` and its output; a last item still ``in_progress`` / ``incomplete`` is
  continued rather than answered;
- ``tools`` of type ``function`` are the template's tools (the built-in kinds are dropped, as vLLM
  drops them outside Harmony models), ``reasoning.effort`` the template's ``reasoning_effort``;
- ``max_output_tokens`` is the output budget, ``include: ["message.output_text.logprobs"]`` with
  ``top_logprobs`` the logprobs; the sampling fields are the chat route's.

The answer is vLLM's: the request's own ``request_id`` (``resp_...``, no prefix; an
``X-Request-Id`` header is not read), no ``parse_context``, ``extra_args`` in the sampling params.
``previous_response_id`` is refused as vLLM's stateless render refuses it. Refused because this
server cannot mirror them: ``text.format`` / ``structured_outputs`` (structured output),
``logit_bias``, ``custom`` and ``namespace`` tools, ``input_file`` parts and image ``file_id`` s.
``truncation: "auto"`` is taken, but a prompt over the context is refused, not truncated.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _chat_bridge as bridge
from mediaref.serve import _fields as f
from mediaref.serve.options import ServeOptions
from mediaref.serve.protocol import parse_chat_request

if TYPE_CHECKING:
    from mediaref.serve.service import RenderService

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
_MESSAGE_ROLES = ("user", "assistant", "system", "developer")
_PARTIAL = ("in_progress", "incomplete")
# The Responses fields the chat route reads under the same names (sampling, engine, media).
_CHAT_FIELDS = (
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
# Tools vLLM shows no model outside Harmony (built in, hosted): accepted and dropped.
_DROPPED_TOOLS = frozenset(
    {
        "file_search",
        "computer",
        "computer_use_preview",
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "mcp",
        "code_interpreter",
        "programmatic_tool_calling",
        "image_generation",
        "local_shell",
        "shell",
        "tool_search",
        "apply_patch",
    }
)
_CUSTOM_TOOL_INPUT_KEY = "input"  # vLLM's shim: a custom tool's text as one string argument


@dataclass(frozen=True)
class ResponsesRenderRequest(bridge.BridgedRequest):
    """A ``/v1/responses/render`` body, checked and converted: the chat request it renders as,
    and what its answer has that a chat answer has not."""

    previous_response_id: str | None
    watermarking: bool | None
    extra_args: dict[str, Any] | None
    """``sampling_params.extra_args`` as vLLM writes it (None: left out)."""


# --- input items -> chat messages (vLLM's construct_input_messages) --------------------------


def _text_of(part: object, where: str) -> str:
    if not isinstance(part, dict) or not isinstance(part.get("text"), str):
        raise f.refuse(f"{where}.text", "a string (an output_text or input_text part)", part)
    return str(part["text"])


def _assistant_text(item: Mapping[str, Any], where: str) -> str:
    """An assistant message's text: a string content, else its first part's (as vLLM reads it)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise f.refuse(f"{where}.content", "a string or a non-empty array of parts", content)
    return _text_of(content[0], f"{where}.content[0]")


def _input_parts(content: object, where: str) -> str | list[dict[str, Any]]:
    """A user, system or developer message's content (or a tool output): a string or input
    parts, each kept to the keys OpenAI's part types declare (a client's ``uuid`` is no such key:
    vLLM's validation drops it, and so does this)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise f.refuse(where, "a string or an array of input parts", content)
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        here = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_text":
            parts.append({"type": kind, "text": _text_of(part, here)})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise f.refuse(f"{here}.image_url", "a URL string (file_id is not supported)", url)
            parts.append({"type": kind, "image_url": url, "detail": part.get("detail", "auto")})
        elif kind == "input_file":
            raise bridge.unsupported(f"{here} (input_file)", "files are not media it renders")
        else:
            raise f.refuse(f"{here}.type", "'input_text' or 'input_image'", kind)
    return parts


def _tool_call(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    for key in ("call_id", "name"):
        if not isinstance(item.get(key), str):
            raise f.refuse(f"{where}.{key}", "a string", item.get(key))
    name = item["name"]
    if item["type"] == "custom_tool_call":
        payload = item.get("input") or ""
        if not isinstance(payload, str):
            raise f.refuse(f"{where}.input", "a string", payload)
        arguments = json.dumps({_CUSTOM_TOOL_INPUT_KEY: payload}, ensure_ascii=False)
    else:
        if not isinstance(item.get("arguments"), str):
            raise f.refuse(f"{where}.arguments", "a string", item.get("arguments"))
        arguments = str(item["arguments"])
        namespace = item.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise f.refuse(f"{where}.namespace", "a string", namespace)
        name = f"{namespace}__{name}" if namespace else name
    return {
        "id": item["call_id"],
        "function": {"name": name, "arguments": arguments},
        "type": "function",
    }


def _reasoning(item: Mapping[str, Any], where: str) -> str:
    if item.get("encrypted_content"):
        raise VLLMValidationError("Encrypted content is not supported.", parameter="input")
    summary = item.get("summary")
    if not isinstance(summary, list):
        raise f.refuse(f"{where}.summary", "an array of summary parts", summary)
    content = item.get("content")
    if content is not None and not isinstance(content, list):
        raise f.refuse(f"{where}.content", "an array of reasoning_text parts", content)
    if content:
        return _text_of(content[0], f"{where}.content[0]")
    return _text_of(summary[0], f"{where}.summary[0]") if summary else ""


def _join_previous(messages: list[dict[str, Any]], key: str, value: Any) -> bool:
    """Set ``key`` on the last message if it is an assistant's without one (vLLM joins an
    assistant's reasoning, text and tool calls into one message); whether it did."""
    previous = messages[-1] if messages and messages[-1].get("role") == "assistant" else None
    if previous is None:
        return False
    if key == "tool_calls":
        previous.setdefault("tool_calls", []).append(value)
        return True
    if previous.get(key) is None:
        previous[key] = value
        return True
    return False


def _item(item: object, where: str, messages: list[dict[str, Any]]) -> None:
    """One input item, appended to (or joined into the last of) ``messages``."""
    if not isinstance(item, dict):
        raise f.refuse(where, "an input item object", item)
    kind = item.get("type")
    if kind in ("function_call", "custom_tool_call"):
        call = _tool_call(item, where)
        if not _join_previous(messages, "tool_calls", call):
            messages.append({"role": "assistant", "tool_calls": [call]})
    elif kind in ("function_call_output", "custom_tool_call_output"):
        output = _input_parts(item.get("output"), f"{where}.output")
        if not isinstance(item.get("call_id"), str):
            raise f.refuse(f"{where}.call_id", "a string", item.get("call_id"))
        messages.append({"role": "tool", "content": output, "tool_call_id": item["call_id"]})
    elif kind == "reasoning":
        reasoning = _reasoning(item, where)
        if not _join_previous(messages, "reasoning", reasoning):
            messages.append({"role": "assistant", "reasoning": reasoning})
    elif kind not in (None, "message") or "role" not in item:
        raise VLLMValidationError(f"Unsupported input item type: {kind}", parameter="input")
    elif item["role"] not in _MESSAGE_ROLES:
        raise f.refuse(
            f"{where}.role", "'user', 'assistant', 'system' or 'developer'", item["role"]
        )
    elif item["role"] == "assistant":
        text = _assistant_text(item, where)
        if not _join_previous(messages, "content", text):
            messages.append({"role": "assistant", "content": text})
    else:
        content = _input_parts(item.get("content"), f"{where}.content")
        messages.append({"role": item["role"], "content": content})


def _continues(items: list[Any]) -> bool:
    """Whether the last item is a message or reasoning still in progress: it is continued
    (vLLM's ``should_continue_final_message``)."""
    last = items[-1] if items else None
    if not isinstance(last, dict) or last.get("type", "message") not in ("message", "reasoning"):
        return False
    return last.get("status") in _PARTIAL


def input_messages(
    instructions: str | None, request_input: object
) -> tuple[list[dict[str, Any]], bool]:
    """The chat messages of ``instructions`` and ``input``, and whether the last is continued."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(request_input, str):
        messages.append({"role": "user", "content": request_input})
        return messages, False
    if not isinstance(request_input, list):
        raise f.refuse("input", "a string or an array of input items", request_input)
    for index, item in enumerate(request_input):
        _item(item, f"input[{index}]", messages)
    return messages, _continues(request_input)


# --- tools, tool_choice, and the fields with no chat counterpart -------------------------------


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The function tools, as the chat route takes them (None: no tools given)."""
    tools = f.get_list(body, "tools")
    if not tools:
        return None
    chat_tools: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind in ("custom", "namespace"):
            raise bridge.unsupported(f"{where} ({kind})", "only function tools are rendered here")
        if kind in _DROPPED_TOOLS:
            continue
        if kind != "function":
            raise f.refuse(f"{where}.type", "'function' or a built-in tool type", kind)
        if not isinstance(tool.get("name"), str):
            raise f.refuse(f"{where}.name", "a string", tool.get("name"))
        function = {key: tool.get(key) for key in ("name", "description", "parameters", "strict")}
        chat_tools.append({"type": "function", "function": function})
    return chat_tools


def _check_tool_choice(body: Mapping[str, Any], tools: list[Any] | None) -> None:
    """vLLM's ``check_tool_usage``: ``required`` or a named tool need ``tools``, which must name it."""
    choice = body.get("tool_choice", "auto")
    if choice in (None, "auto", "none"):
        return
    given = f.get_list(body, "tools") or []
    if choice == "required" and not given:
        raise VLLMValidationError(
            "Tool choice 'required' must be specified with 'tools' parameter.",
            parameter="tool_choice",
        )
    if choice == "required":
        return
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
        raise f.refuse("tool_choice", "'none', 'auto', 'required' or a tool choice object", choice)
    if choice["type"] not in ("function", "custom"):
        return
    names = {tool["function"]["name"] for tool in tools or ()}
    if not given or not choice.get("name") or choice["name"] not in names:
        raise VLLMValidationError(
            "Tool choice 'function' not found in 'tools' parameter.", parameter="tool_choice"
        )


def _refuse_unmirrored(body: Mapping[str, Any]) -> None:
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


def _effort(body: Mapping[str, Any]) -> str | None:
    reasoning = f.get_dict(body, "reasoning")
    effort = reasoning.get("effort") if reasoning else None
    if effort is not None and effort not in _EFFORTS:
        raise f.refuse("reasoning.effort", f"one of {', '.join(_EFFORTS)}", effort)
    return effort


def _logprobs(body: Mapping[str, Any]) -> dict[str, Any]:
    """``include`` and ``top_logprobs`` as the chat route's ``logprobs`` / ``top_logprobs``."""
    include = f.get_list(body, "include") or []
    for index, value in enumerate(include):
        if value not in _INCLUDES:
            raise f.refuse(f"include[{index}]", f"one of {', '.join(_INCLUDES)}", value)
    top = f.get_int(body, "top_logprobs", 0)
    return {"logprobs": True, "top_logprobs": top} if LOGPROBS_INCLUDE in include else {}


def _extra_args(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """vLLM's Responses sampling params carry ``vllm_xargs`` as ``extra_args``, an empty object
    when there are none, except when transfer params went through it (then it is left out)."""
    xargs = bridge.vllm_xargs(body)
    if xargs:
        return xargs
    transfer = body.get("kv_transfer_params") or body.get("ec_transfer_params")
    return None if transfer else {}


def parse_responses_request(
    body: object, options: ServeOptions, *, request_id: str | None = None
) -> ResponsesRenderRequest:
    """A ``/v1/responses/render`` body, checked and converted. ``request_id`` (the X-Request-Id
    header) is not read: vLLM names a Responses request by its body's ``request_id`` only."""
    del request_id
    if not isinstance(body, dict):
        raise VLLMValidationError("the request body must be a JSON object")
    _refuse_unmirrored(body)
    if "input" not in body:
        raise f.refuse("input", "a string or an array of input items", None)
    messages, continues = input_messages(f.get_str(body, "instructions", None), body["input"])
    if not messages:
        raise VLLMValidationError(
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
            parameter="input",
        )
    tools = _tools(body)
    _check_tool_choice(body, tools)
    f.get_choice(body, "truncation", ("auto", "disabled"), "disabled")
    f.refuse_nulls(body, ("request_id",))
    chat: dict[str, Any] = {
        "model": f.get_str(body, "model", None),
        "messages": messages,
        "add_generation_prompt": not continues,
        "continue_final_message": continues,
        "max_tokens": body.get("max_output_tokens"),
        "stream": body.get("stream"),
        **{name: body[name] for name in _CHAT_FIELDS if name in body},
        **_logprobs(body),
    }
    bridge.pass_through(body, chat)
    chat["chat_template_kwargs"] = bridge.effort_kwargs(
        f.get_dict(body, "chat_template_kwargs"), _effort(body)
    )
    if tools:
        chat["tools"] = tools
    name = f.get_str(body, "request_id", None) or f"resp_{uuid.uuid4().int & (2**64 - 1):016x}"
    parsed = bridge.with_tools(parse_chat_request(chat, options, request_id=name), tools)
    # The output budget's errors name the Responses field, as vLLM's TokenizeParams does.
    sampling = dataclasses.replace(parsed.sampling, max_tokens_param="max_output_tokens")
    return ResponsesRenderRequest(
        chat=dataclasses.replace(parsed, sampling=sampling),
        previous_response_id=f.get_str(body, "previous_response_id", None),
        watermarking=f.get_bool(body, "watermarking", None),
        extra_args=_extra_args(body),
    )


async def render_responses(
    service: RenderService, request: ResponsesRenderRequest, client: str
) -> dict[str, Any]:
    """The ``GenerateRequest`` of a Responses request (its model checked first, as vLLM does)."""
    service.renderer_for(request)
    if request.previous_response_id is not None:
        raise VLLMValidationError(
            "previous_response_id is not supported by the stateless render endpoint.",
            parameter="previous_response_id",
        )
    # vLLM's Responses rendering has no tool-choice check of the chat route's.
    answer = await service.render_chat(request.chat, client=client, check_tool_choice=False)
    answer["request_id"] = request.request_id
    answer["sampling_params"] = bridge.with_sampling_fields(
        answer["sampling_params"], watermarking=request.watermarking, extra_args=request.extra_args
    )
    answer["parse_context"] = None
    return answer


__all__ = [
    "LOGPROBS_INCLUDE",
    "ResponsesRenderRequest",
    "input_messages",
    "parse_responses_request",
    "render_responses",
]
