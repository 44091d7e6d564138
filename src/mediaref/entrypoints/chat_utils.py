"""OpenAI-style chat messages in; the conversation, lazy media and client UUIDs out.

::

    conversation, mm_data, mm_uuids = await parse_chat_messages_async(messages, model_config, connector)
    prompt = apply_chat_template(model_config, conversation)
    await renderer.process_multimodal_async(
        MultiModalRequest(prompt, mm_data or {}, mm_uuids=mm_uuids, media_io_kwargs=...)
    )

Each media part is fetched by the connector with the decoder that the model's processing info
resolves (:meth:`~mediaref.processing.context.BaseProcessingInfo.get_media_io`), so ``mm_data``
holds :class:`~mediaref.media.base.MediaRef` objects that are still encoded: the processor
decodes only what its cache does not already hold. With ``use_audio_in_video`` in
``mm_processor_kwargs``, a video part also yields an audio item, built from the same download.

``model_config`` may be a :class:`~mediaref.processing.context.ModelConfig` or the model's
processing info (``renderer.mm_processor.info``), which shares the renderer's loaded HF processor.

Errors: a malformed message or part, a modality the model does not take, a per-prompt limit
exceeded or bad ``media_io_kwargs`` raise :class:`~mediaref.exceptions.VLLMValidationError`
(HTTP 400) whose ``parameter`` names the offending input (``messages[0].content[2].image_url``);
fetch failures propagate as the connector's :class:`~mediaref.exceptions.MediaRefError` types.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from mediaref.entrypoints._chat_messages import (
    ConversationMessage,
    parse_conversation,
    use_audio_in_video_from,
)
from mediaref.entrypoints._chat_template import (
    ChatTemplateContentFormat,
    ChatTemplateContentFormatOption,
    ModelChatTemplate,
    detect_content_format,
)
from mediaref.entrypoints._chat_tracker import (
    AUDIO_IN_VIDEO_UUID_SUFFIX,
    AsyncMultiModalItemTracker,
    BaseMultiModalItemTracker,
    ModelLike,
    MultiModalItemTracker,
    resolve_processing_info,
)
from mediaref.inputs import MultiModalDataDict, MultiModalUUIDDict
from mediaref.media.connector import MediaConnector

ParsedChat = tuple[list[ConversationMessage], MultiModalDataDict | None, MultiModalUUIDDict | None]
"""``(conversation, mm_data, mm_uuids)``, as vLLM's ``parse_chat_messages`` returns them."""


_TrackerT = TypeVar("_TrackerT", bound=BaseMultiModalItemTracker)


def _start_parse(
    tracker_cls: type[_TrackerT],
    messages: Sequence[Mapping[str, Any]],
    model_config: ModelLike,
    connector: MediaConnector | None,
    *,
    content_format: ChatTemplateContentFormatOption,
    media_io_kwargs: Mapping[str, Mapping[str, Any]] | None,
    mm_processor_kwargs: Mapping[str, object] | None,
    limit_mm_per_prompt: Mapping[str, int] | None,
    chat_template: str | None,
    interleave_strings: bool,
) -> tuple[_TrackerT, list[ConversationMessage]]:
    """Everything but the fetches, shared by the sync and async parsers."""
    tracker = tracker_cls(
        model_config,
        connector,
        media_io_kwargs=media_io_kwargs,
        limit_mm_per_prompt=limit_mm_per_prompt,
        chat_template=chat_template,
    )
    resolved_format = tracker.chat_template.resolve_content_format(content_format)
    conversation = parse_conversation(
        messages,
        tracker,
        resolved_format,
        use_audio_in_video=use_audio_in_video_from(mm_processor_kwargs),
        interleave_strings=interleave_strings,
    )
    return tracker, conversation


def parse_chat_messages(
    messages: Sequence[Mapping[str, Any]],
    model_config: ModelLike,
    connector: MediaConnector | None = None,
    *,
    content_format: ChatTemplateContentFormatOption = "auto",
    media_io_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    mm_processor_kwargs: Mapping[str, object] | None = None,
    limit_mm_per_prompt: Mapping[str, int] | None = None,
    chat_template: str | None = None,
    interleave_strings: bool = False,
) -> ParsedChat:
    """Parse ``messages``, fetching their media one after another (refs stay undecoded).

    ``content_format``: "auto" reads it off the chat template (``chat_template`` if given, else
    the model's). ``interleave_strings`` (string format only) keeps placeholders where their
    parts were instead of before the message's text.
    """
    tracker, conversation = _start_parse(
        MultiModalItemTracker,
        messages,
        model_config,
        connector,
        content_format=content_format,
        media_io_kwargs=media_io_kwargs,
        mm_processor_kwargs=mm_processor_kwargs,
        limit_mm_per_prompt=limit_mm_per_prompt,
        chat_template=chat_template,
        interleave_strings=interleave_strings,
    )
    return conversation, tracker.all_mm_data(), tracker.all_mm_uuids()


async def parse_chat_messages_async(
    messages: Sequence[Mapping[str, Any]],
    model_config: ModelLike,
    connector: MediaConnector | None = None,
    *,
    content_format: ChatTemplateContentFormatOption = "auto",
    media_io_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    mm_processor_kwargs: Mapping[str, object] | None = None,
    limit_mm_per_prompt: Mapping[str, int] | None = None,
    chat_template: str | None = None,
    interleave_strings: bool = False,
) -> ParsedChat:
    """:func:`parse_chat_messages`, fetching every item of the request concurrently.

    Parsing runs on a worker thread: on a model's first request it loads the tokenizer and HF
    processor from disk, and a template or decoder lookup must never stall the event loop.
    """
    tracker, conversation = await asyncio.to_thread(
        functools.partial(
            _start_parse,
            AsyncMultiModalItemTracker,
            messages,
            model_config,
            connector,
            content_format=content_format,
            media_io_kwargs=media_io_kwargs,
            mm_processor_kwargs=mm_processor_kwargs,
            limit_mm_per_prompt=limit_mm_per_prompt,
            chat_template=chat_template,
            interleave_strings=interleave_strings,
        )
    )
    return conversation, await tracker.all_mm_data_async(), tracker.all_mm_uuids()


def resolve_chat_template_content_format(
    model_config: ModelLike,
    content_format: ChatTemplateContentFormatOption = "auto",
    *,
    chat_template: str | None = None,
) -> ChatTemplateContentFormat:
    """``"openai"`` or ``"string"``: the given format, or for ``"auto"`` the one the template expects."""
    template = ModelChatTemplate(resolve_processing_info(model_config), chat_template)
    return template.resolve_content_format(content_format)


def apply_chat_template(
    model_config: ModelLike,
    conversation: Sequence[ConversationMessage],
    *,
    chat_template: str | None = None,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The prompt text: ``conversation`` rendered with ``chat_template`` or the model's own.

    ``chat_template_kwargs`` reach the template as variables (e.g. Qwen2-VL's ``add_vision_id``).
    """
    template = ModelChatTemplate(resolve_processing_info(model_config), chat_template)
    return template.render(
        conversation,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        tools=tools,
        chat_template_kwargs=chat_template_kwargs,
    )


__all__ = [
    "AUDIO_IN_VIDEO_UUID_SUFFIX",
    "AsyncMultiModalItemTracker",
    "BaseMultiModalItemTracker",
    "ChatTemplateContentFormat",
    "ChatTemplateContentFormatOption",
    "ConversationMessage",
    "ModelLike",
    "MultiModalItemTracker",
    "ParsedChat",
    "apply_chat_template",
    "detect_content_format",
    "parse_chat_messages",
    "parse_chat_messages_async",
    "resolve_chat_template_content_format",
    "resolve_processing_info",
]
