"""One content part in: its type and its content, read and checked; no I/O, no tracking.

The accepted forms are the OpenAI chat API's as vLLM extends it: ``text`` (also ``input_text``,
``output_text``, ``refusal``, ``thinking``), ``image_url`` / ``video_url`` / ``audio_url``
(``{"url": ...}`` or the URL as a string), ``input_image`` (the Responses API's), ``input_audio``,
``image_pil``, ``image_embeds`` / ``audio_embeds`` / ``video_embeds``, ``prompt_embeds`` and
``tool_reference``. A part without ``type`` is recognised by the field it carries.

A malformed part raises :class:`PartFieldError`, a
:class:`~mediaref.exceptions.VLLMValidationError` (HTTP 400) whose ``parameter`` is relative to
the part (``image_url.url``); the message parser prefixes the part's place in the request
(``messages[0].content[2].image_url.url``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, cast, get_args, get_origin

from PIL import Image

from mediaref.exceptions import VLLMValidationError
from mediaref.renderers.chat_utils.types import (
    ChatCompletionContentPartParam,
    InputAudio,
    MultiModalEmbedsPayload,
    PILImage,
)

logger = logging.getLogger(__name__)


class PartFieldError(VLLMValidationError):
    """A malformed content part; ``parameter`` is the field's path within the part."""


ContentPart: TypeAlias = (
    MultiModalEmbedsPayload | dict[str, str] | InputAudio | PILImage | Image.Image
)
"""What a part carries once read: text or a URL, an embeddings payload, an audio object, an image."""

_Extractor = Callable[[Mapping[str, Any]], Any]


def _text(key: str) -> _Extractor:
    def extract(part: Mapping[str, Any]) -> str | None:
        value = part.get(key)
        if value is not None and not isinstance(value, str):
            raise PartFieldError(f"{key} must be a string", parameter=key)
        return value

    return extract


def _url(key: str) -> _Extractor:
    """``{"url": ...}`` or the URL itself; None when absent (a UUID may stand for the media)."""

    def extract(part: Mapping[str, Any]) -> str | None:
        value = part.get(key)
        parameter = key
        if isinstance(value, Mapping):
            detail = value.get("detail", "auto")
            if key == "image_url" and detail not in ("auto", None):
                # The model's config decides the resolution; OpenAI's "low"/"high" have no knob.
                logger.warning("'image_url.detail' (%r) is not supported and is ignored", detail)
            value = value.get("url")
            parameter = f"{key}.url"
        elif value is not None and not isinstance(value, str):
            raise PartFieldError(
                f"{key} must be an object with a 'url' or a URL string", parameter=key
            )
        if value is not None and (not isinstance(value, str) or not value):
            raise PartFieldError(f"{parameter} must be a non-empty string", parameter=parameter)
        return value

    return extract


def _embeds(key: str) -> _Extractor:
    def extract(part: Mapping[str, Any]) -> MultiModalEmbedsPayload | None:
        value = part.get(key)
        if value is not None and not isinstance(value, (str, Mapping)):
            raise PartFieldError(f"{key} must be a base64 string or an object", parameter=key)
        return cast("MultiModalEmbedsPayload | None", value)

    return extract


def _image_pil(part: Mapping[str, Any]) -> Image.Image | None:
    value = part.get("image_pil")
    if isinstance(value, PILImage):
        value = value.image_pil
    if value is not None and not isinstance(value, Image.Image):
        raise PartFieldError("image_pil must be a PIL image", parameter="image_pil")
    return value


def _input_audio(part: Mapping[str, Any]) -> InputAudio | None:
    value = part.get("input_audio")
    if value is not None and not isinstance(value, Mapping):
        raise PartFieldError(
            "input_audio must be an object with 'data' and 'format'", parameter="input_audio"
        )
    return value  # type: ignore[return-value]


MM_PARSER_MAP: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "text": _text("text"),
    "thinking": _text("thinking"),
    "input_text": _text("text"),
    "output_text": _text("text"),
    "input_image": _url("image_url"),
    "image_url": _url("image_url"),
    "image_embeds": _embeds("image_embeds"),
    "audio_embeds": _embeds("audio_embeds"),
    "video_embeds": _embeds("video_embeds"),
    "prompt_embeds": _text("data"),
    "image_pil": _image_pil,
    "audio_url": _url("audio_url"),
    "input_audio": _input_audio,
    "refusal": _text("refusal"),
    "video_url": _url("video_url"),
    "tool_reference": _text("name"),
}
"""Part type -> how its content is read from the part."""

PART_TYPES_TO_SKIP_NONE_CONTENT = ("text", "refusal")
"""Text part types whose part is skipped (with a warning) when it carries no text."""

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text", "refusal", "thinking"})
"""Part types read as text rather than multimodal data."""

# Part types that carry no multimodal data, and the fields that make a part multimodal whatever
# its type says.
_NON_MEDIA_PART_TYPES = TEXT_PART_TYPES | {"tool_reference"}
_MEDIA_PART_KEYS = frozenset(MM_PARSER_MAP) - _NON_MEDIA_PART_TYPES

# A part without "type": the first of these fields it carries says what it is.
_TYPE_BY_FIELD = (
    ("image_url", "image_url"),
    ("image_pil", "image_pil"),
    ("image_embeds", "image_embeds"),
    ("audio_embeds", "audio_embeds"),
    ("video_embeds", "video_embeds"),
    ("prompt_embeds", "prompt_embeds"),
    ("audio_url", "audio_url"),
    ("input_audio", "input_audio"),
    ("video_url", "video_url"),
    ("tool_reference", "tool_reference"),
    ("text", "text"),
)

PART_FIELD: Mapping[str, str] = {
    "input_image": "image_url",
    "image_url": "image_url",
    "image_pil": "image_pil",
    "image_embeds": "image_embeds",
    "audio_url": "audio_url",
    "input_audio": "input_audio",
    "audio_embeds": "audio_embeds",
    "video_url": "video_url",
    "video_embeds": "video_embeds",
    "prompt_embeds": "data",
}
"""Media part type -> the field holding its media (where errors about the item point)."""


def _known_part_fields() -> frozenset[str]:
    fields: set[str] = set()
    for member in get_args(ChatCompletionContentPartParam):
        if get_origin(member) is None and hasattr(member, "__required_keys__"):
            fields |= member.__required_keys__ | member.__optional_keys__
    return frozenset(fields)


KNOWN_PART_FIELDS = _known_part_fields()


def extra_part_fields(part: Mapping[str, Any]) -> dict[str, Any]:
    """The part's fields no part type defines (``cache_control``...): passed on to the template."""
    return {key: value for key, value in part.items() if key not in KNOWN_PART_FIELDS}


def parse_chat_message_content_mm_part(part: Mapping[str, Any]) -> tuple[str, Any]:
    """``(part_type, content)`` of a part: its type (or the one its fields imply) and its content.

    Content is text or a URL for text and URL parts, the payload for embeddings, the object for
    ``input_audio``, the image for ``image_pil``; None when absent. An unknown type comes back with
    placeholder content for the caller to refuse.
    """
    if not isinstance(part, Mapping):
        raise PartFieldError("a content part must be a string or an object", parameter="type")
    part_type = part.get("type")
    if part_type is None:
        part_type = next((kind for field, kind in _TYPE_BY_FIELD if field in part), None)
        if part_type is None:
            raise PartFieldError("Missing 'type' field in multimodal part.", parameter="type")
    if not isinstance(part_type, str):
        raise PartFieldError(
            "Invalid 'type' field in multimodal part.", parameter="type", value=part_type
        )
    extract = MM_PARSER_MAP.get(part_type)
    if extract is None:
        return part_type, "unknown part_type content"
    if part_type == "image_url" and part.get("detail", "auto") != "auto":
        logger.warning("'image_url.detail' is not supported and is ignored")
    return part_type, extract(part)


def has_non_text_content(messages: Any) -> bool:
    """Whether any message carries anything but text: a media part, or ``prompt_embeds`` reasoning.

    Only list content is looked at, so content given as a one-shot iterator is never consumed.
    """
    if not isinstance(messages, list):
        return False
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        for field in ("reasoning", "reasoning_content"):
            reasoning = message.get(field)
            if isinstance(reasoning, Mapping) and reasoning.get("type") == "prompt_embeds":
                return True
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, Mapping):
                continue
            part_type = part.get("type", "text")
            if (
                any(key in part for key in _MEDIA_PART_KEYS)
                or not isinstance(part_type, str)
                or part_type not in _NON_MEDIA_PART_TYPES
            ):
                return True
    return False


__all__ = [
    "KNOWN_PART_FIELDS",
    "MM_PARSER_MAP",
    "PART_FIELD",
    "PART_TYPES_TO_SKIP_NONE_CONTENT",
    "TEXT_PART_TYPES",
    "ContentPart",
    "PartFieldError",
    "extra_part_fields",
    "has_non_text_content",
    "parse_chat_message_content_mm_part",
]
