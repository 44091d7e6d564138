"""The shared core of chat-message parsing: messages in, the conversation for the template out.

Media parts are handed to the tracker (which checks limits and records the fetch) and replaced,
in the conversation, by what the chat template expects: a ``{"type": <modality>}`` part for an
"openai" template, or the model's placeholder text inside the message string for a "string" one.
The sync and async parsers differ only in how the tracker then runs the fetches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from mediaref.entrypoints._chat_parts import MediaPart, TextPart, parse_content_part
from mediaref.entrypoints._chat_template import ChatTemplateContentFormat
from mediaref.entrypoints._chat_tracker import BaseMultiModalItemTracker
from mediaref.exceptions import VLLMValidationError


class _ConversationMessageRole(TypedDict):
    role: str


class ConversationMessage(_ConversationMessageRole, total=False):
    """One message as the chat template receives it (other message fields pass through)."""

    content: str | list[dict[str, str]]
    name: str
    tool_calls: Any
    tool_call_id: str


def use_audio_in_video_from(mm_processor_kwargs: Mapping[str, object] | None) -> bool:
    value = (mm_processor_kwargs or {}).get("use_audio_in_video", False)
    if not isinstance(value, bool):
        raise VLLMValidationError(
            "mm_processor_kwargs['use_audio_in_video'] must be a boolean",
            parameter="mm_processor_kwargs",
            value=value,
        )
    return value


class _MessageContent:
    """Collects one message's content in the form its chat template takes."""

    def __init__(self, content_format: ChatTemplateContentFormat, interleave_strings: bool) -> None:
        self._format = content_format
        self._interleave = interleave_strings
        self._parts: list[dict[str, str]] = []
        self._texts: list[str] = []
        self._placeholders: list[str] = []

    def add_text(self, text: str) -> None:
        if self._format == "openai":
            self._parts.append({"type": "text", "text": text})
        else:
            self._texts.append(text)

    def add_media(self, modality: str, placeholders: Sequence[str]) -> None:
        if self._format == "openai":
            self._parts.append({"type": modality})
        elif self._interleave:
            self._texts.extend(placeholders)
        else:
            self._placeholders.extend(placeholders)

    def build(self) -> str | list[dict[str, str]]:
        if self._format == "openai":
            return self._parts
        # As vLLM: without interleaving, a message's placeholders go before its text.
        return "\n".join([*self._placeholders, *self._texts])


def _add_media(
    part: MediaPart,
    tracker: BaseMultiModalItemTracker,
    content: _MessageContent,
    *,
    needs_placeholders: bool,
    use_audio_in_video: bool,
) -> None:
    indices: tuple[int, ...]
    if part.modality == "video" and use_audio_in_video:
        indices = tracker.add_video_with_audio(part.url, part.uuid, parameter=part.parameter)
        modalities: tuple[str, ...] = ("video", "audio")
    else:
        indices = (tracker.add(part.modality, part.url, part.uuid, parameter=part.parameter),)
        modalities = (part.modality,)
    placeholders = (
        [
            tracker.placeholder(modality, index)
            for modality, index in zip(modalities, indices, strict=True)
        ]
        if needs_placeholders
        else []
    )
    # The template of an "openai"-format model handles the video's audio track itself.
    content.add_media(part.modality, placeholders)


def _parse_message(
    message: object,
    location: str,
    tracker: BaseMultiModalItemTracker,
    content_format: ChatTemplateContentFormat,
    *,
    use_audio_in_video: bool,
    interleave_strings: bool,
) -> ConversationMessage:
    if not isinstance(message, Mapping):
        raise VLLMValidationError(f"{location} must be an object", parameter=location)
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise VLLMValidationError(
            f"{location}.role must be a non-empty string", parameter=f"{location}.role"
        )
    raw_content = message.get("content")
    if raw_content is None:
        raw_parts: Sequence[object] = []
    elif isinstance(raw_content, str):
        raw_parts = [raw_content]
    elif isinstance(raw_content, Sequence):
        raw_parts = raw_content
    else:
        raise VLLMValidationError(
            f"{location}.content must be a string or a list of content parts",
            parameter=f"{location}.content",
        )

    content = _MessageContent(content_format, interleave_strings)
    for index, raw_part in enumerate(raw_parts):
        part = parse_content_part(raw_part, f"{location}.content[{index}]")
        if isinstance(part, TextPart):
            content.add_text(part.text)
        elif isinstance(part, MediaPart):
            _add_media(
                part,
                tracker,
                content,
                needs_placeholders=content_format == "string",
                use_audio_in_video=use_audio_in_video,
            )
    converted: dict[str, Any] = {key: value for key, value in message.items() if key != "content"}
    converted["content"] = content.build()
    return converted  # type: ignore[return-value]


def parse_conversation(
    messages: object,
    tracker: BaseMultiModalItemTracker,
    content_format: ChatTemplateContentFormat,
    *,
    use_audio_in_video: bool = False,
    interleave_strings: bool = False,
) -> list[ConversationMessage]:
    """Convert ``messages``, registering every media part with ``tracker`` (nothing is fetched)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise VLLMValidationError("messages must be a list of messages", parameter="messages")
    return [
        _parse_message(
            message,
            f"messages[{index}]",
            tracker,
            content_format,
            use_audio_in_video=use_audio_in_video,
            interleave_strings=interleave_strings,
        )
        for index, message in enumerate(messages)
    ]


__all__ = ["ConversationMessage", "parse_conversation", "use_audio_in_video_from"]
