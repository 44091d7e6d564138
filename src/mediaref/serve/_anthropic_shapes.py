"""An Anthropic Messages request's shapes, checked as vLLM 0.33's ``AnthropicMessagesRequest``
checks them, before anything is converted.

vLLM validates the body with pydantic; mediaref has no pydantic, so each field the conversion reads
is checked here first, and a wrong one is a 400 naming its path (``messages[1].content[0].type``).
Checking everything up front keeps :mod:`._anthropic_blocks` and :mod:`._anthropic_tools` free to
assume well-formed blocks, as vLLM's conversion assumes its validated models. A few checks are
vLLM's model validators rather than types: tool changes only in system messages, a thinking budget
below ``max_tokens``, structured output refused (this server writes no guided-decoding params).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _chat_bridge as bridge
from mediaref.serve import _fields as f
from mediaref.serve.sampling import MAX_STOP_STRINGS

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
TOOL_CHANGES = ("tool_addition", "tool_removal")
"""The block types that change ``tools`` mid-conversation (a system message's only)."""
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
EFFORTS = ("low", "medium", "high", "xhigh", "max")
"""``output_config.effort``'s values (the template probe tries each, :mod:`._anthropic_template`)."""
_THINKING_DISPLAYS = ("summarized", "omitted", "updates")
_MIN_THINKING_BUDGET = 1024


def _check_fields(
    value: Mapping[str, Any], where: str, fields: tuple[tuple[str, type, str], ...]
) -> None:
    for name, kind, must in fields:
        field = value.get(name)
        if field is not None and not isinstance(field, kind):
            raise f.refuse(f"{where}.{name}", must, field)


def check_tool(tool: object, where: str) -> dict[str, Any]:
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
        if block["type"] in TOOL_CHANGES:
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
        check_tool(change.get("definition"), f"{where}.tool.definition")
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
    if block["type"] in TOOL_CHANGES and role != "system":
        raise VLLMValidationError(
            f'{block["type"]} blocks are only allowed in messages with role "system"',
            parameter=where,
        )


def check_content(content: object, where: str, *, role: str) -> None:
    """A message's (or ``system``'s) content: a string or an array of content blocks."""
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise f.refuse(where, "a string or an array of content blocks", content)
    for index, block in enumerate(content):
        _check_block(block, f"{where}[{index}]", role=role)


def check_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``messages``: each a message object with a known role and checked content."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise f.refuse("messages", "an array of message objects", messages)
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise f.refuse(where, "a message object", message)
        if message.get("role") not in _ROLES:
            raise f.refuse(f"{where}.role", "'user', 'assistant' or 'system'", message.get("role"))
        check_content(message.get("content"), f"{where}.content", role=message["role"])
    return messages


def check_tool_choice(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """``tool_choice`` (None: not given); a ``tool`` choice must name its tool."""
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


def check_thinking(body: Mapping[str, Any], max_tokens: int) -> dict[str, Any] | None:
    """``thinking`` (None: not given); an ``enabled`` one's budget comes back as an int."""
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


def check_effort(body: Mapping[str, Any]) -> str | None:
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
    if effort is not None and effort not in EFFORTS:
        raise f.refuse("output_config.effort", f"one of {', '.join(EFFORTS)}", effort)
    return effort


def check_max_tokens(body: Mapping[str, Any]) -> int:
    """``max_tokens``: required, and positive."""
    value = body.get("max_tokens")
    if value is None:
        raise f.refuse("max_tokens", "an integer", None)
    number = f.check_int("max_tokens", value)
    if number <= 0:
        raise VLLMValidationError("max_tokens must be positive", parameter="max_tokens")
    return number


def check_stop_sequences(body: Mapping[str, Any]) -> list[str] | None:
    """``stop_sequences``, no more of them than the sampling params take."""
    stop = f.get_str_list(body, "stop_sequences", single=False)
    if stop is not None and len(stop) > MAX_STOP_STRINGS:
        raise VLLMValidationError(
            f"stop_sequences may hold at most {MAX_STOP_STRINGS} strings, got {len(stop)}.",
            parameter="stop_sequences",
        )
    return stop


__all__ = [
    "EFFORTS",
    "TOOL_CHANGES",
    "check_content",
    "check_effort",
    "check_max_tokens",
    "check_messages",
    "check_stop_sequences",
    "check_thinking",
    "check_tool",
    "check_tool_choice",
]
