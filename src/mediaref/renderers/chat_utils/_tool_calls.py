"""An assistant message's tool calls, in the form chat templates take them.

Templates expect each call's ``function.arguments`` as a dict, while the OpenAI API sends it as a
JSON string. A string that is not a JSON object becomes ``{}`` with a warning rather than an
error: it sits in the conversation's history, and refusing it would refuse every later turn too.
An empty ``tool_calls`` list is dropped, so the template takes its plain assistant path.
"""

from __future__ import annotations

import json
import logging
from collections.abc import MutableMapping, Sequence
from typing import Any

from mediaref.exceptions import VLLMValidationError

logger = logging.getLogger(__name__)


def _arguments(raw: Any) -> dict[str, Any]:
    if not raw:
        return {}
    if isinstance(raw, dict):
        return raw
    parsed: Any = raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            # vLLM's wording: its tests (and operators' log filters) look for it.
            logger.warning(
                "Tool call has arguments that are not valid JSON (%d chars); coercing to an "
                "empty object so the conversation can continue.",
                len(raw),
            )
            return {}
    if parsed is None:
        return {}  # JSON null: nothing to warn about, as in vLLM
    if not isinstance(parsed, dict):
        logger.warning(
            "Tool call arguments decoded to %s, not a JSON object; coercing to an empty object.",
            type(parsed).__name__,
        )
        return {}
    return parsed


def normalize_tool_calls(messages: Sequence[MutableMapping[str, Any]]) -> None:
    """Parse the ``arguments`` of every assistant tool call in place (see the module docstring)."""
    for message in messages:
        if message.get("role") != "assistant" or "tool_calls" not in message:
            continue
        tool_calls = message.get("tool_calls")
        if not isinstance(tool_calls, list):
            continue
        if not tool_calls:
            message.pop("tool_calls", None)
            continue
        for call in tool_calls:
            if not isinstance(call, MutableMapping):
                raise VLLMValidationError(
                    "assistant tool_calls entries must be objects.", parameter="tool_calls"
                )
            function = call.get("function")
            if call.get("type", "function") != "function" or not isinstance(
                function, MutableMapping
            ):
                raise VLLMValidationError(
                    "chat completions only support assistant tool_calls of type 'function'.",
                    parameter="tool_calls",
                )
            function["arguments"] = _arguments(function.get("arguments"))


__all__ = ["normalize_tool_calls"]
