"""One content part of a message: text kept, a media item handed to the message's parser.

See :func:`parse_chat_message_content_part`. Errors name the part's place in the request: a
:class:`~._parts.PartFieldError` gets the part's location prefixed, and an error about the item
itself (a limit, a modality the model does not take, embeddings switched off) is pointed at the
field that brought it (``messages[0].content[2].image_url``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.renderers.chat_utils import _model
from mediaref.renderers.chat_utils._parser_base import (
    PROMPT_EMBEDS_MISSING_DATA_ERROR,
    RESERVED_PLACEHOLDER_IN_TEXT_ERROR,
)
from mediaref.renderers.chat_utils._parts import (
    MM_PARSER_MAP,
    PART_FIELD,
    PART_TYPES_TO_SKIP_NONE_CONTENT,
    TEXT_PART_TYPES,
    ContentPart,
    PartFieldError,
    extra_part_fields,
    parse_chat_message_content_mm_part,
)
from mediaref.renderers.chat_utils.content_parser import (
    MODALITY_PLACEHOLDERS_MAP,
    PROMPT_EMBEDS_PLACEHOLDER_TOKEN,
    BaseMultiModalContentParser,
    make_prompt_embeds_placeholder,
)
from mediaref.renderers.chat_utils.item_tracker import BaseMultiModalItemTracker
from mediaref.renderers.chat_utils.types import ChatCompletionContentPartParam

logger = logging.getLogger(__name__)

# part type -> the modality its item is
_PART_MODALITY = {
    "image_pil": "image",
    "image_url": "image",
    "input_image": "image",
    "image_embeds": "image",
    "audio_embeds": "audio",
    "video_embeds": "video",
    "prompt_embeds": "prompt_embeds",
    "audio_url": "audio",
    "input_audio": "audio",
    "video_url": "video",
}


# Claude Code's attribution header, whose value changes per request (it would defeat prefix caching).
def _reject_reserved_placeholder(text: str, parser: BaseMultiModalContentParser) -> None:
    """With prompt embeddings on, their sentinel token in a text would move or forge a splice."""
    if PROMPT_EMBEDS_PLACEHOLDER_TOKEN in text and _model.prompt_embeds_enabled(
        parser.model_config
    ):
        raise VLLMValidationError(
            RESERVED_PLACEHOLDER_IN_TEXT_ERROR.format(token=PROMPT_EMBEDS_PLACEHOLDER_TOKEN),
            parameter="messages",
        )


def _part_uuid(part: Mapping[str, Any]) -> str | None:
    uuid = part.get("uuid")
    if uuid is not None and (not isinstance(uuid, str) or not uuid):
        raise PartFieldError("uuid must be a non-empty string", parameter="uuid", value=uuid)
    return uuid


def _require_media(part_type: str, content: Any, uuid: str | None) -> None:
    """A media part needs its media, or a UUID naming media the server has seen before.

    Prompt embeddings are never cached by UUID: their data is required, with vLLM's message."""
    if part_type == "prompt_embeds" and not content:
        raise VLLMValidationError(PROMPT_EMBEDS_MISSING_DATA_ERROR, parameter="prompt_embeds")
    if uuid is not None:
        return
    field = PART_FIELD[part_type]
    if part_type == "input_audio":
        missing = not (isinstance(content, Mapping) and content.get("data"))
        field = "input_audio.data"
    else:
        missing = not content
        if part_type in ("image_url", "input_image", "audio_url", "video_url"):
            field += ".url"
    if missing:
        raise PartFieldError(
            f"{field} is missing (a media part needs its media, or a 'uuid' that names media "
            "sent before)",
            parameter=field,
        )


def _parse_media_part(
    part_type: str,
    content: Any,
    part: Mapping[str, Any],
    parser: BaseMultiModalContentParser,
    tracker: BaseMultiModalItemTracker[Any],
) -> str | None:
    """Hand the part's item to ``parser``; the prompt_embeds sentinel text for prompt_embeds."""
    uuid = _part_uuid(part)
    _require_media(part_type, content, uuid)
    if part_type == "image_pil":
        parser.parse_image_pil(content, uuid)
    elif part_type in ("image_url", "input_image"):
        parser.parse_image(content, uuid)
    elif part_type == "image_embeds":
        parser.parse_image_embeds(content, uuid)
    elif part_type == "audio_embeds":
        parser.parse_audio_embeds(content, uuid)
    elif part_type == "video_embeds":
        parser.parse_video_embeds(content, uuid, part.get("audio_embeds"))
    elif part_type == "prompt_embeds":
        index = tracker.get_num_items("prompt_embeds")
        parser.parse_prompt_embeds(content)
        return make_prompt_embeds_placeholder(index)
    elif part_type == "audio_url":
        parser.parse_audio(content, uuid)
    elif part_type == "input_audio":
        parser.parse_input_audio(content, uuid)
    else:
        parser.parse_video(content, uuid)
    return None


def parse_chat_message_content_part(
    part: ChatCompletionContentPartParam,
    mm_parser: BaseMultiModalContentParser,
    *,
    mm_tracker: BaseMultiModalItemTracker[Any],
    wrap_dicts: bool,
    interleave_strings: bool,
    location: str = "part",
) -> ContentPart | None:
    """One part of a message: text, or a media item handed to ``mm_parser``.

    With ``wrap_dicts`` ("openai" format) the result is a dict: ``{"type": "text", "text": ...}``
    or ``{"type": "image"}`` (with the part's unknown fields passed on). Otherwise it is the text,
    or for a media part the modality's marker when ``interleave_strings``, else None (the item's
    placeholder goes in front of the text). ``location`` (mediaref's) names the part in errors.
    """
    if isinstance(part, str):
        _reject_reserved_placeholder(part, mm_parser)
        return {"type": "text", "text": part} if wrap_dicts else part
    if not isinstance(part, Mapping):
        raise VLLMValidationError(f"{location} must be a string or an object", parameter=location)
    field, part_type = "type", ""
    try:
        part_type, content = parse_chat_message_content_mm_part(part)
        if part_type in TEXT_PART_TYPES:
            if content is None:
                if part_type in PART_TYPES_TO_SKIP_NONE_CONTENT:
                    logger.warning("Skipping a %r part with no content at %s", part_type, location)
                return None
            _reject_reserved_placeholder(content, mm_parser)
            return (
                {"type": "text", "text": content, **extra_part_fields(part)}
                if wrap_dicts
                else content
            )
        if part_type == "tool_reference":
            # Not media: a deferred tool, passed on for the template to expand.
            return {"type": "tool_reference", "name": content} if wrap_dicts else content
        if part_type not in PART_FIELD:
            supported = sorted({*MM_PARSER_MAP, *PART_TYPES_TO_SKIP_NONE_CONTENT})
            raise PartFieldError(
                f"Unsupported chat content part type: {part_type!r}. "
                f"Supported types: {', '.join(supported)}.",
                parameter="type",
                value=part_type,
            )
        field = PART_FIELD[part_type]
        sentinel = _parse_media_part(part_type, content, part, mm_parser, mm_tracker)
    except PartFieldError as exc:
        exc.parameter = f"{location}.{exc.parameter}"
        raise
    except VLLMValidationError as exc:
        # About the item itself (a limit, a modality the model lacks, embeddings switched off):
        # point at the part that brought it.
        item_names = {
            None,
            _PART_MODALITY.get(part_type),
            f"{_PART_MODALITY.get(part_type)}_embeds",
        }
        if type(exc) is VLLMValidationError and exc.parameter in item_names:
            exc.parameter = f"{location}.{field}"
        raise
    modality = _PART_MODALITY[part_type]
    if sentinel is not None:
        # Templates know no prompt_embeds parts: the sentinel goes in as text, where it stood.
        return {"type": "text", "text": sentinel} if wrap_dicts else sentinel
    if wrap_dicts:
        return {"type": modality, **extra_part_fields(part)}
    return MODALITY_PLACEHOLDERS_MAP[modality] if interleave_strings else None


__all__ = ["parse_chat_message_content_part"]
