"""One request message: its parts parsed, and the fields chat templates read carried over.

Besides the content, a conversation message keeps ``name``, ``task``, an assistant's
``tool_calls`` and ``reasoning`` (also as ``reasoning_content``), a tool message's
``tool_call_id`` (its text parts joined into one string), a developer message's ``tools``; other
fields are dropped, as in vLLM. A system message's Claude Code attribution header (its ``cch``
value changes on every request, which would defeat prefix caching) is dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from mediaref.exceptions import VLLMValidationError
from mediaref.renderers.chat_utils._content_part import parse_chat_message_content_part
from mediaref.renderers.chat_utils._parser_base import BaseMultiModalContentParser
from mediaref.renderers.chat_utils._text_prompt import get_full_multimodal_text_prompt
from mediaref.renderers.chat_utils.item_tracker import BaseMultiModalItemTracker
from mediaref.renderers.chat_utils.types import (
    ChatCompletionContentPartParam,
    ChatCompletionMessageParam,
    ChatTemplateContentFormat,
    ConversationMessage,
)

# Claude Code's attribution header, whose value changes per request (it would defeat prefix caching).
_BILLING_HEADER = "x-anthropic-billing-header"


def parse_chat_message_content_parts(
    role: str,
    parts: Iterable[ChatCompletionContentPartParam],
    mm_tracker: BaseMultiModalItemTracker[Any],
    *,
    wrap_dicts: bool,
    interleave_strings: bool,
    mm_processor_kwargs: dict[str, Any] | None = None,
    multimodal_content_part_separator: str = "\n",
    location: str = "content",
) -> list[ConversationMessage]:
    """One message's parts as one conversation message (its items added to ``mm_tracker``)."""
    mm_parser = mm_tracker.create_parser(mm_processor_kwargs=mm_processor_kwargs)
    content: list[Any] = []
    for index, part in enumerate(parts):
        parsed = parse_chat_message_content_part(
            part,
            mm_parser,
            mm_tracker=mm_tracker,
            wrap_dicts=wrap_dicts,
            interleave_strings=interleave_strings,
            location=f"{location}[{index}]",
        )
        if parsed:
            content.append(parsed)
    if wrap_dicts:
        return [ConversationMessage(role=role, content=content)]
    # A parser not built on mediaref's base (vLLM's tests hand in a mock) tracks no such list.
    unplaced = (
        mm_parser.unplaced_modalities if isinstance(mm_parser, BaseMultiModalContentParser) else ()
    )
    if unplaced:
        modality = unplaced[0]
        raise VLLMValidationError(
            f"the model has no placeholder for {modality} items, so string-format content "
            "cannot place them (its chat template writes none)",
            parameter="chat_template_content_format",
        )
    storage = mm_parser.mm_placeholder_storage()
    text = (
        get_full_multimodal_text_prompt(
            storage,
            content,
            interleave_strings,
            multimodal_content_part_separator=multimodal_content_part_separator,
        )
        if storage
        else "\n".join(content)
    )
    return [ConversationMessage(role=role, content=text)]


def _strip_billing_header(parts: Sequence[Any]) -> list[Any]:
    """Drop the first line of a system text part that is Claude Code's attribution header."""
    kept: list[Any] = []
    for part in parts:
        text = part if isinstance(part, str) else None
        if isinstance(part, Mapping) and part.get("type") == "text":
            text = part.get("text")
        if not (isinstance(text, str) and text.startswith(_BILLING_HEADER)):
            kept.append(part)
            continue
        rest = text.partition("\n")[2]
        if rest:
            kept.append(rest if isinstance(part, str) else {**part, "text": rest})
    return kept


def _content_parts(message: Mapping[str, Any], location: str) -> list[Any]:
    content = message.get("content")
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, Sequence) and not isinstance(content, bytes):
        return list(content)
    raise VLLMValidationError(
        f"{location}.content must be a string or a list of content parts",
        parameter=f"{location}.content",
    )


def _tool_content(content: Any) -> Any:
    """A tool message's text parts joined into the one string most templates print."""
    if not isinstance(content, list):
        return content
    if any(isinstance(item, Mapping) and item.get("type") != "text" for item in content):
        return content  # structured (a tool_reference): the template expands it
    texts = [item.get("text", "") for item in content if isinstance(item, Mapping)]
    return "\n".join(texts) if texts else ""


def _carry_fields(message: Mapping[str, Any], result: ConversationMessage, reasoning: Any) -> None:
    role = message["role"]
    if role == "assistant":
        tool_calls = message.get("tool_calls")
        if tool_calls is not None:
            # Copied: the arguments are parsed in place later, and the request is the caller's.
            result["tool_calls"] = copy.deepcopy(list(tool_calls))
        if reasoning is not None:
            result["reasoning"] = reasoning
            result["reasoning_content"] = reasoning
    elif role == "tool":
        if "tool_call_id" in message:
            result["tool_call_id"] = message["tool_call_id"]
        result["content"] = _tool_content(result.get("content"))
    if isinstance(message.get("name"), str):
        result["name"] = message["name"]
    if isinstance(message.get("task"), str):
        result["task"] = message["task"]
    if role == "developer":
        result["tools"] = message.get("tools")


def parse_chat_message_content(
    message: ChatCompletionMessageParam,
    mm_tracker: BaseMultiModalItemTracker[Any],
    content_format: ChatTemplateContentFormat,
    interleave_strings: bool,
    mm_processor_kwargs: dict[str, Any] | None = None,
    *,
    location: str = "message",
) -> list[ConversationMessage]:
    """One request message as conversation message(s), its media added to ``mm_tracker``."""
    if not isinstance(message, Mapping):
        raise VLLMValidationError(f"{location} must be an object", parameter=location)
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise VLLMValidationError(
            f"{location}.role must be a non-empty string", parameter=f"{location}.role"
        )
    reasoning: Any = message.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("type") == "prompt_embeds":
        reasoning = parse_chat_message_content_parts(
            role,
            [cast("ChatCompletionContentPartParam", reasoning)],
            mm_tracker,
            wrap_dicts=False,
            interleave_strings=interleave_strings,
            mm_processor_kwargs=mm_processor_kwargs,
            location=f"{location}.reasoning",
        )[0]["content"]
    parts = _content_parts(message, location)
    if role == "system":
        parts = _strip_billing_header(parts)
    result = parse_chat_message_content_parts(
        role,
        parts,
        mm_tracker,
        wrap_dicts=content_format == "openai",
        interleave_strings=interleave_strings,
        mm_processor_kwargs=mm_processor_kwargs,
        location=f"{location}.content",
    )
    for converted in result:
        _carry_fields(message, converted, reasoning)
    return result


__all__ = ["parse_chat_message_content", "parse_chat_message_content_parts"]
