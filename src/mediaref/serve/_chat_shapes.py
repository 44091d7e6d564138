"""A chat request's shapes: its messages, ``tools`` and ``tool_choice``, checked as vLLM 0.33's
models check them, and dumped as they dump them.

Messages are checked as far as every variant of vLLM's ``ChatCompletionMessageParam`` agrees (a
message's role, content, name and an assistant's tool calls; content parts are the renderer's);
``tools`` and ``tool_choice`` as ``ChatCompletionToolsParam`` and its ``check_tool_usage`` check
them. Tools and a named tool choice come out as vLLM's models dump them (unknown keys dropped,
defaults filled), which is what the chat template and the response's ``parse_context`` see.
Every refusal is a 400 naming the field's path (``tools[2].function.name``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _fields as f

# OpenAI's assistant and function messages are the ones whose content may be null.
_NULL_CONTENT_ROLES = frozenset({"assistant", "function"})
# OpenAI's message types of these roles ignore ``tool_calls``; any other role's validates it.
_ROLES_WITHOUT_TOOL_CALLS = frozenset({"developer", "system", "user", "tool", "function"})
_TOOL_CHOICE_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
# FunctionDefinition's optional fields, in its order, with their JSON types.
_FUNCTION_FIELDS: tuple[tuple[str, type, str], ...] = (
    ("description", str, "a string"),
    ("parameters", dict, "an object"),
    ("strict", bool, "a boolean"),
    ("defer_loading", bool, "a boolean"),
)


def _tool(tool: object, where: str) -> dict[str, Any]:
    """One of ``tools`` as ``ChatCompletionToolsParam`` validates and dumps it."""
    if not isinstance(tool, dict):
        raise f.refuse(where, "a tool object", tool)
    if tool.get("type", "function") != "function":
        raise f.refuse(f"{where}.type", "'function'", tool.get("type"))
    function = tool.get("function")
    if not isinstance(function, dict):
        raise f.refuse(f"{where}.function", "an object", function)
    name = function.get("name")
    if not isinstance(name, str):
        raise f.refuse(f"{where}.function.name", "a string", name)
    for key, kind, must in _FUNCTION_FIELDS:
        value = function.get(key)
        if value is not None and not isinstance(value, kind):
            raise f.refuse(f"{where}.function.{key}", must, value)
    defer_loading = tool.get("defer_loading")
    if defer_loading is not None and not isinstance(defer_loading, bool):
        raise f.refuse(f"{where}.defer_loading", "a boolean", defer_loading)
    dumped = {
        "name": name,
        "description": function.get("description"),
        "parameters": function.get("parameters"),
    }
    if function.get("strict") is not None:  # the optional flags are dumped only when set
        dumped["strict"] = function["strict"]
    # vLLM's _propagate_defer_loading: the tool's flag stands for its function's unset one.
    function_defer = function.get("defer_loading")
    function_defer = defer_loading if function_defer is None else function_defer
    if function_defer is not None:
        dumped["defer_loading"] = function_defer
    out: dict[str, Any] = {"type": "function", "function": dumped}
    if defer_loading is not None:
        out["defer_loading"] = defer_loading
    return out


def chat_tools(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    tools = f.get_list(body, "tools")
    if tools is None:
        return None
    if not tools:
        raise VLLMValidationError(
            "`tools` must not be an empty array. Either provide at least one tool or omit "
            "the field entirely.",
            parameter="tools",
        )
    return [_tool(tool, f"tools[{index}]") for index, tool in enumerate(tools)]


def _named_tool_choice(choice: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A named ``tool_choice``, checked as vLLM's ``check_tool_usage`` does and dumped."""
    function = choice.get("function")
    if not isinstance(function, dict):
        raise VLLMValidationError(
            f"Invalid value for `function`: `{f.shown(function)}` in `tool_choice`! "
            f"{_TOOL_CHOICE_USAGE}",
            parameter="tool_choice.function",
        )
    if "name" not in function:
        raise VLLMValidationError(
            f"Expected field `name` in `function` in `tool_choice`! {_TOOL_CHOICE_USAGE}",
            parameter="tool_choice.function.name",
        )
    name = function["name"]
    if not isinstance(name, str) or not name:
        raise VLLMValidationError(
            f"Invalid `name` in `function`: `{f.shown(name)}` in `tool_choice`! "
            f"{_TOOL_CHOICE_USAGE}",
            parameter="tool_choice.function.name",
        )
    if choice.get("type", "function") != "function":
        raise f.refuse("tool_choice.type", "'function'", choice.get("type"))
    if not any(tool["function"]["name"] == name for tool in tools):
        raise VLLMValidationError(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            parameter="tool_choice",
        )
    extra = {key: value for key, value in choice.items() if key not in ("function", "type")}
    named = {"name": name, **{key: value for key, value in function.items() if key != "name"}}
    return {"function": named, "type": "function", **extra}


def chat_tool_choice(body: Mapping[str, Any], tools: list[dict[str, Any]] | None) -> Any:
    if "tool_choice" not in body:
        return "auto" if tools else "none"  # vLLM: tools without a tool_choice mean "auto"
    choice = body["tool_choice"]
    if choice is None or choice == "none":
        return choice
    if tools is None:
        raise VLLMValidationError(
            "When using `tool_choice`, `tools` must be set.", parameter="tool_choice"
        )
    if choice in ("auto", "required"):
        return choice
    if not isinstance(choice, dict):
        raise VLLMValidationError(
            f"Invalid value for `tool_choice`: {f.shown(choice)}! Only named tools, "
            '"none", "auto" or "required" are supported.',
            parameter="tool_choice",
        )
    return _named_tool_choice(choice, tools)


def _check_tool_call(call: object, where: str) -> None:
    """One assistant tool call: OpenAI's ``ChatCompletionMessageFunctionToolCallParam``."""
    if not isinstance(call, dict):
        raise f.refuse(where, "a tool call object", call)
    if not isinstance(call.get("id"), str):
        raise f.refuse(f"{where}.id", "a string", call.get("id"))
    if not isinstance(call.get("type"), str):
        raise f.refuse(f"{where}.type", "'function'", call.get("type"))
    if call["type"] != "function":
        return  # the renderer refuses other kinds: chat completions call functions only
    function = call.get("function")
    if not isinstance(function, dict):
        raise f.refuse(f"{where}.function", "an object", function)
    for key in ("name", "arguments"):  # arguments: a JSON string, never an object, over HTTP
        if not isinstance(function.get(key), str):
            raise f.refuse(f"{where}.function.{key}", "a string", function.get(key))


def _check_tool_calls(calls: object, role: str, where: str) -> None:
    if calls is None:
        return
    if not isinstance(calls, (list, dict, str)):
        # vLLM turns any message's tool_calls into a list before validating: a number fails.
        raise f.refuse(where, "an array of tool calls", calls)
    if role in _ROLES_WITHOUT_TOOL_CALLS:
        return  # OpenAI's message type of this role ignores the field
    if not isinstance(calls, list):
        raise f.refuse(where, "an array of tool calls", calls)
    for index, call in enumerate(calls):
        _check_tool_call(call, f"{where}[{index}]")


def check_message(message: object, where: str) -> None:
    """Refuse what no variant of vLLM's ``ChatCompletionMessageParam`` accepts."""
    if not isinstance(message, dict):
        raise f.refuse(where, "a message object", message)
    role = message.get("role")
    if not isinstance(role, str):
        raise f.refuse(f"{where}.role", "a string", role)
    content = message.get("content")
    if content is None and "content" in message and role not in _NULL_CONTENT_ROLES:
        must = f"a string or an array of parts for role {f.shown(role)}"
        raise f.refuse(f"{where}.content", must, None)
    if content is not None and not isinstance(content, (str, list)):
        raise f.refuse(f"{where}.content", "a string or an array of content parts", content)
    for index, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, (str, dict)):
            raise f.refuse(f"{where}.content[{index}]", "a string or an object", part)
    # Every message type declares name a string, except the tool message's, which ignores it.
    if "name" in message and role != "tool" and not isinstance(message["name"], str):
        raise f.refuse(f"{where}.name", "a string", message["name"])
    _check_tool_calls(message.get("tool_calls"), role, f"{where}.tool_calls")


__all__ = ["chat_tool_choice", "chat_tools", "check_message"]
