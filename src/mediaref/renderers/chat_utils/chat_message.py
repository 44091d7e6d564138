"""Chat messages in; the conversation for the chat template, lazy media and client UUIDs out.

::

    conversation, mm_data, mm_uuids = await parse_chat_messages_async(messages, model_config, "auto")
    prompt = apply_chat_template(model_config, conversation)

Media parts are handed to the request's tracker and replaced, in the conversation, by what the
chat template expects: a ``{"type": "image"}`` part for an ``"openai"`` template, or the model's
placeholder inside the message string for a ``"string"`` one (``"auto"``, mediaref's addition,
reads the format off the template). ``mm_data`` holds the connector's still-encoded
:class:`~mediaref.media.base.MediaRef` objects: the processor decodes only what its cache lacks.

Besides the content, a message keeps what templates read: ``name``, ``task``, an assistant's
``tool_calls`` (arguments parsed into dicts) and ``reasoning``, a tool message's ``tool_call_id``
(its text parts joined into one string), a developer message's ``tools``.

Errors: a malformed message or part, a modality the model does not take, a per-prompt limit or
bad ``media_io_kwargs`` is a :class:`~mediaref.exceptions.VLLMValidationError` (HTTP 400) whose
``parameter`` names the input (``messages[0].content[2].image_url.url``), raised before anything
is downloaded; fetch failures are the connector's :class:`~mediaref.exceptions.MediaRefError` s.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import MultiModalDataDict, MultiModalUUIDDict
from mediaref.media.connector import MediaConnector
from mediaref.renderers.chat_utils import _model
from mediaref.renderers.chat_utils._content_part import parse_chat_message_content_part
from mediaref.renderers.chat_utils._message import (
    parse_chat_message_content,
    parse_chat_message_content_parts,
)
from mediaref.renderers.chat_utils._parser_base import (
    PROMPT_EMBEDS_MISSING_DATA_ERROR,
    RESERVED_PLACEHOLDER_IN_TEXT_ERROR,
)
from mediaref.renderers.chat_utils._parts import (
    MM_PARSER_MAP,
    PART_TYPES_TO_SKIP_NONE_CONTENT,
    TEXT_PART_TYPES,
    ContentPart,
    has_non_text_content,
    parse_chat_message_content_mm_part,
)
from mediaref.renderers.chat_utils._text_prompt import get_full_multimodal_text_prompt
from mediaref.renderers.chat_utils._tool_calls import normalize_tool_calls
from mediaref.renderers.chat_utils.content_parser import (
    MODALITY_PLACEHOLDERS_MAP,
    PROMPT_EMBEDS_PLACEHOLDER_TOKEN,
    BaseMultiModalContentParser,
    make_prompt_embeds_placeholder,
    use_audio_in_video_from,
)
from mediaref.renderers.chat_utils.item_tracker import (
    AsyncMultiModalItemTracker,
    BaseMultiModalItemTracker,
    MultiModalItemTracker,
)
from mediaref.renderers.chat_utils.types import (
    ChatCompletionContentPartAudioEmbedsParam,
    ChatCompletionContentPartAudioParam,
    ChatCompletionContentPartImageEmbedsParam,
    ChatCompletionContentPartParam,
    ChatCompletionContentPartPromptEmbedsParam,
    ChatCompletionContentPartTextParam,
    ChatCompletionContentPartVideoEmbedsParam,
    ChatCompletionContentPartVideoParam,
    ChatCompletionMessageParam,
    ChatTemplateContentFormat,
    ChatTemplateContentFormatOption,
    ConversationMessage,
    CustomChatCompletionContentPILImageParam,
    CustomChatCompletionContentSimpleAudioParam,
    CustomChatCompletionContentSimpleImageParam,
    CustomChatCompletionContentSimpleVideoParam,
    CustomChatCompletionContentToolReferenceParam,
    CustomThinkCompletionContentParam,
    InputAudio,
    MultiModalEmbedsPayload,
    PILImage,
)

ParsedChat = tuple[list[ConversationMessage], MultiModalDataDict | None, MultiModalUUIDDict | None]
"""``(conversation, mm_data, mm_uuids)``, as :func:`parse_chat_messages` returns them."""


_TrackerT = TypeVar("_TrackerT", bound=BaseMultiModalItemTracker[Any])


def _parse_all(
    tracker_cls: type[_TrackerT],
    messages: Sequence[ChatCompletionMessageParam],
    model_config: _model.ModelLike,
    content_format: ChatTemplateContentFormatOption,
    media_io_kwargs: dict[str, dict[str, Any]] | None,
    mm_processor_kwargs: dict[str, Any] | None,
    options: Mapping[str, Any],
) -> tuple[_TrackerT, list[ConversationMessage]]:
    """Everything but the fetches, shared by the sync and async parsers."""
    if isinstance(content_format, MediaConnector):
        raise TypeError("the third argument is content_format; pass connector= by keyword")
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise VLLMValidationError("messages must be a list of messages", parameter="messages")
    use_audio_in_video_from(mm_processor_kwargs)
    tracker = tracker_cls(
        model_config,
        media_io_kwargs,
        connector=options["connector"],
        limit_mm_per_prompt=options["limit_mm_per_prompt"],
        chat_template=options["chat_template"],
    )
    resolved_format = tracker.chat_template.resolve_content_format(content_format)
    interleave = options["interleave_strings"]
    if interleave is None:
        interleave = _model.interleave_mm_strings(tracker.model_config)
    interleave = bool(interleave) and resolved_format == "string"
    conversation: list[ConversationMessage] = []
    for index, message in enumerate(messages):
        conversation.extend(
            parse_chat_message_content(
                message,
                tracker,
                resolved_format,
                interleave,
                mm_processor_kwargs,
                location=f"messages[{index}]",
            )
        )
    normalize_tool_calls(conversation)  # type: ignore[arg-type]
    return tracker, conversation


def parse_chat_messages(
    messages: Sequence[ChatCompletionMessageParam],
    model_config: _model.ModelLike,
    content_format: ChatTemplateContentFormatOption = "auto",
    media_io_kwargs: dict[str, dict[str, Any]] | None = None,
    mm_processor_kwargs: dict[str, Any] | None = None,
    *,
    connector: MediaConnector | None = None,
    limit_mm_per_prompt: Mapping[str, int] | None = None,
    chat_template: str | None = None,
    interleave_strings: bool | None = None,
) -> ParsedChat:
    """Parse ``messages``, fetching their media one after another (refs stay undecoded).

    ``model_config``: a :class:`~mediaref.processing.context.ModelConfig` or the model's
    processing info (``renderer.mm_processor.info``, which shares the renderer's loaded HF
    processor). mediaref's keyword-only extras: ``connector`` (default: one per request from
    ``MEDIA_CONNECTOR_REGISTRY``), ``limit_mm_per_prompt``, ``chat_template`` (the request's;
    ``"auto"`` reads the content format off it), ``interleave_strings`` (None: the config's
    ``interleave_mm_strings``; string format only).
    """
    options = {
        "connector": connector,
        "limit_mm_per_prompt": limit_mm_per_prompt,
        "chat_template": chat_template,
        "interleave_strings": interleave_strings,
    }
    tracker, conversation = _parse_all(
        MultiModalItemTracker,
        messages,
        model_config,
        content_format,
        media_io_kwargs,
        mm_processor_kwargs,
        options,
    )
    mm_data, mm_uuids = tracker.resolve_items()
    return conversation, mm_data, mm_uuids


async def parse_chat_messages_async(
    messages: Sequence[ChatCompletionMessageParam],
    model_config: _model.ModelLike,
    content_format: ChatTemplateContentFormatOption = "auto",
    media_io_kwargs: dict[str, dict[str, Any]] | None = None,
    mm_processor_kwargs: dict[str, Any] | None = None,
    *,
    connector: MediaConnector | None = None,
    limit_mm_per_prompt: Mapping[str, int] | None = None,
    chat_template: str | None = None,
    interleave_strings: bool | None = None,
) -> ParsedChat:
    """:func:`parse_chat_messages`, fetching every item of the request concurrently.

    Parsing runs on a worker thread: on a model's first request it loads the tokenizer and HF
    processor from disk, and a template or decoder lookup must never stall the event loop.
    """
    options = {
        "connector": connector,
        "limit_mm_per_prompt": limit_mm_per_prompt,
        "chat_template": chat_template,
        "interleave_strings": interleave_strings,
    }
    tracker, conversation = await asyncio.to_thread(
        functools.partial(
            _parse_all,
            AsyncMultiModalItemTracker,
            messages,
            model_config,
            content_format,
            media_io_kwargs,
            mm_processor_kwargs,
            options,
        )
    )
    mm_data, mm_uuids = await tracker.resolve_items()
    return conversation, mm_data, mm_uuids


# vLLM's private names for what lives elsewhere here (its tests import them from this module).
_PROMPT_EMBEDS_MISSING_DATA_ERROR = PROMPT_EMBEDS_MISSING_DATA_ERROR
_RESERVED_PLACEHOLDER_IN_TEXT_ERROR = RESERVED_PLACEHOLDER_IN_TEXT_ERROR
_postprocess_messages = normalize_tool_calls


__all__ = [
    "MM_PARSER_MAP",
    "MODALITY_PLACEHOLDERS_MAP",
    "PART_TYPES_TO_SKIP_NONE_CONTENT",
    "PROMPT_EMBEDS_PLACEHOLDER_TOKEN",
    "TEXT_PART_TYPES",
    "BaseMultiModalContentParser",
    "ChatCompletionContentPartAudioEmbedsParam",
    "ChatCompletionContentPartAudioParam",
    "ChatCompletionContentPartImageEmbedsParam",
    "ChatCompletionContentPartParam",
    "ChatCompletionContentPartPromptEmbedsParam",
    "ChatCompletionContentPartTextParam",
    "ChatCompletionContentPartVideoEmbedsParam",
    "ChatCompletionContentPartVideoParam",
    "ChatTemplateContentFormat",
    "ContentPart",
    "CustomChatCompletionContentPILImageParam",
    "CustomChatCompletionContentSimpleAudioParam",
    "CustomChatCompletionContentSimpleImageParam",
    "CustomChatCompletionContentSimpleVideoParam",
    "CustomChatCompletionContentToolReferenceParam",
    "CustomThinkCompletionContentParam",
    "InputAudio",
    "MultiModalEmbedsPayload",
    "PILImage",
    "ParsedChat",
    "get_full_multimodal_text_prompt",
    "has_non_text_content",
    "make_prompt_embeds_placeholder",
    "parse_chat_message_content",
    "parse_chat_message_content_mm_part",
    "parse_chat_message_content_part",
    "parse_chat_message_content_parts",
    "parse_chat_messages",
    "parse_chat_messages_async",
]
