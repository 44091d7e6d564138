"""Anthropic content blocks as chat messages: the message half of vLLM 0.33's
``AnthropicServingMessages.to_chat_completion_request``.

An Anthropic message is a list of typed blocks; a chat message is a role with text and
``image_url`` parts, plus an assistant's ``tool_calls`` and ``reasoning``, and ``tool``-role
messages for results. The blocks arrive checked (:mod:`._anthropic_shapes`), so this module only
maps them:

- ``system`` (a string or text blocks) becomes the first message, its texts joined; a block
  starting :data:`BILLING_HEADER` is dropped;
- text blocks are text parts (one alone: a plain string), image blocks ``image_url`` parts (a
  base64 source as a ``data:`` URL), ``tool_use`` blocks tool calls (arguments as JSON),
  ``thinking`` blocks ``reasoning``;
- a user's ``tool_result`` is a ``tool`` message ahead of the user's own (its images in a user
  message after it), an assistant's a text part.

Whether inline system messages stay in place or merge into the first is the model template's
call (:mod:`._anthropic_template`), so :func:`convert_messages` does either on request.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from mediaref.serve import _fields as f

BILLING_HEADER = "x-anthropic-billing-header"
"""A system text block starting with this is dropped (Claude Code's per-request attribution,
which would defeat prefix caching)."""


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


__all__ = ["BILLING_HEADER", "convert_messages"]
