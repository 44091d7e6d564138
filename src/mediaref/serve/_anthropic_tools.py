"""Anthropic ``tools`` and ``tool_choice`` as the chat request's: the tool half of vLLM 0.33's
``AnthropicServingMessages.to_chat_completion_request``.

Anthropic lets a conversation change its tools as it goes (``tool_addition`` / ``tool_removal``
blocks of system messages), so the tools a chat template sees are ``tools`` with those changes
applied in order (:func:`resolve_tools`), not the request's list as given. Each resolved tool is
then a chat function tool, and ``tool_choice`` ``auto`` / ``any`` / ``tool`` / ``none`` the chat's
``auto`` / ``required`` / a named tool / ``none``. Tools and changes arrive checked
(:mod:`._anthropic_shapes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve._anthropic_shapes import TOOL_CHANGES, check_tool

_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


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
        if block["type"] in TOOL_CHANGES
    ]
    if not changes:
        return tools
    by_name = {tool["name"]: tool for tool in tools or []}
    removed: set[str] = set()
    for block in changes:
        change = block["tool"]
        if change["type"] == "tool_definition":
            name = change["definition"]["name"]
            by_name[name] = check_tool(change["definition"], "tool_definition")
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


def chat_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A checked Anthropic tool as a chat function tool."""
    function = {
        "name": tool["name"],
        "description": tool["description"],
        "parameters": tool["input_schema"],
        "strict": tool["strict"],
        "defer_loading": tool["defer_loading"],
    }
    return {"type": "function", "function": function}


def chat_tool_choice(choice: Mapping[str, Any] | None, tools: list[Any] | None) -> Any:
    """A checked ``tool_choice`` as the chat's; none given is ``auto`` where there are tools."""
    if choice is None:
        return None if tools is None else "auto"
    if choice["type"] == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return _TOOL_CHOICES[choice["type"]]


__all__ = ["chat_tool", "chat_tool_choice", "resolve_tools"]
