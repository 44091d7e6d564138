"""A Responses request's ``instructions`` and ``input`` as chat messages: vLLM 0.33's
``construct_input_messages``.

A Responses ``input`` is a string (one user message) or a list of typed items; a chat
conversation is role-tagged messages. The items map as vLLM maps them:

- messages keep their role; a user, system or developer message's ``input_text`` /
  ``input_image`` parts are kept to the keys OpenAI declares, an assistant's content is its text
  (a string, or its first ``output_text`` part's);
- ``function_call`` and ``custom_tool_call`` are an assistant's tool calls (a custom tool's text
  as one ``input`` argument, vLLM's shim), ``function_call_output`` and its custom twin ``tool``
  messages, ``reasoning`` an assistant's ``reasoning``;
- an assistant's reasoning, text or tool call joins the assistant message before it where that
  has none yet, as vLLM joins them;
- a last message or reasoning still ``in_progress`` / ``incomplete`` is continued rather than
  answered (:func:`input_messages` says which).

Parts this server cannot render (``input_file``, an image by ``file_id``) are refused here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _chat_bridge as bridge
from mediaref.serve import _fields as f

_MESSAGE_ROLES = ("user", "assistant", "system", "developer")
_PARTIAL = ("in_progress", "incomplete")
_CUSTOM_TOOL_INPUT_KEY = "input"  # vLLM's shim: a custom tool's text as one string argument


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


__all__ = ["input_messages"]
