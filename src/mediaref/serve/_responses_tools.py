"""A Responses request's ``tools`` and ``tool_choice``, as vLLM 0.33 takes them for a chat render.

Responses tools are flat (``{"type": "function", "name": ...}``) where chat tools nest the
function (``{"type": "function", "function": {...}}``), and the Responses API adds built-in,
hosted tool kinds no chat template knows. Outside Harmony models vLLM shows the template only the
function tools and drops the built-in kinds; :func:`chat_tools` does the same, and refuses the
``custom`` and ``namespace`` kinds this server cannot mirror. :func:`check_tool_choice` is vLLM's
``check_tool_usage``: a ``required`` or named choice needs tools that name it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _chat_bridge as bridge
from mediaref.serve import _fields as f

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


def chat_tools(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The function tools, as the chat route takes them (None: no tools given)."""
    tools = f.get_list(body, "tools")
    if not tools:
        return None
    converted: list[dict[str, Any]] = []
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
        converted.append({"type": "function", "function": function})
    return converted


def check_tool_choice(body: Mapping[str, Any], tools: list[Any] | None) -> None:
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


__all__ = ["chat_tools", "check_tool_choice"]
