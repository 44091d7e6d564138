"""OpenAI-style chat messages in; the conversation, lazy media and client UUIDs out.

vLLM 0.33's ``vllm.renderers.chat_utils``, module for module: :mod:`.types` (the content-part and
message shapes), :mod:`.chat_message` (parsing messages), :mod:`.content_parser` (one message's
media parts), :mod:`.item_tracker` (one request's items), :mod:`.chat_template` (where a server's
template comes from) and :mod:`.tool_call` (tool-call IDs). ``mediaref.entrypoints.chat_utils``,
the path before 0.33, re-exports this package.

::

    conversation, mm_data, mm_uuids = await parse_chat_messages_async(
        messages, model_config, "auto", media_io_kwargs={"video": {"num_frames": 16}}
    )
    prompt = apply_chat_template(model_config, conversation)
    await renderer.process_multimodal_async(
        MultiModalRequest(prompt, mm_data or {}, mm_uuids=mm_uuids, media_io_kwargs=...)
    )

What mediaref keeps of its own: each media part is fetched with the decoder the model's
processing info resolves (:meth:`~mediaref.processing.context.BaseProcessingInfo.get_media_io`),
so ``mm_data`` holds still-encoded :class:`~mediaref.media.base.MediaRef` objects; a request is
checked whole (every part, limit and decoder setting) before anything is downloaded; the async
parser parses off the event loop and fetches every item at once; each request has its own
download budget; the chat template's placeholders and content format are read off the model's
template and memoized. Rendering the prompt is :func:`apply_chat_template` (vLLM has it in
``vllm.renderers.hf``).
"""

from __future__ import annotations

from mediaref.renderers.chat_utils._model import ModelLike, resolve_processing_info
from mediaref.renderers.chat_utils._template import (
    apply_chat_template,
    detect_content_format,
    resolve_chat_template_content_format,
)
from mediaref.renderers.chat_utils.chat_message import (
    ParsedChat,
    has_non_text_content,
    parse_chat_message_content,
    parse_chat_message_content_parts,
    parse_chat_messages,
    parse_chat_messages_async,
)
from mediaref.renderers.chat_utils.chat_template import (
    ChatTemplateConfig,
    load_chat_template,
    validate_chat_template,
)
from mediaref.renderers.chat_utils.content_parser import (
    AUDIO_IN_VIDEO_UUID_SUFFIX,
    PROMPT_EMBEDS_PLACEHOLDER_TOKEN,
)
from mediaref.renderers.chat_utils.item_tracker import (
    AsyncMultiModalItemTracker,
    BaseMultiModalItemTracker,
    MultiModalItemTracker,
)
from mediaref.renderers.chat_utils.tool_call import get_tool_call_id_type, make_tool_call_id
from mediaref.renderers.chat_utils.types import (
    ChatCompletionContentPartAudioEmbedsParam,
    ChatCompletionContentPartAudioParam,
    ChatCompletionContentPartImageEmbedsParam,
    ChatCompletionContentPartImageParam,
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
    CustomChatCompletionMessageParam,
    CustomThinkCompletionContentParam,
    ImageURL,
    InputAudio,
    ModalityStr,
    MultiModalEmbedsPayload,
    PILImage,
)

__all__ = [
    "AUDIO_IN_VIDEO_UUID_SUFFIX",
    "PROMPT_EMBEDS_PLACEHOLDER_TOKEN",
    "AsyncMultiModalItemTracker",
    "BaseMultiModalItemTracker",
    "ChatCompletionContentPartAudioEmbedsParam",
    "ChatCompletionContentPartAudioParam",
    "ChatCompletionContentPartImageEmbedsParam",
    "ChatCompletionContentPartImageParam",
    "ChatCompletionContentPartParam",
    "ChatCompletionContentPartPromptEmbedsParam",
    "ChatCompletionContentPartTextParam",
    "ChatCompletionContentPartVideoEmbedsParam",
    "ChatCompletionContentPartVideoParam",
    "ChatCompletionMessageParam",
    "ChatTemplateConfig",
    "ChatTemplateContentFormat",
    "ChatTemplateContentFormatOption",
    "ConversationMessage",
    "CustomChatCompletionContentPILImageParam",
    "CustomChatCompletionContentSimpleAudioParam",
    "CustomChatCompletionContentSimpleImageParam",
    "CustomChatCompletionContentSimpleVideoParam",
    "CustomChatCompletionContentToolReferenceParam",
    "CustomChatCompletionMessageParam",
    "CustomThinkCompletionContentParam",
    "ImageURL",
    "InputAudio",
    "ModalityStr",
    "ModelLike",
    "MultiModalEmbedsPayload",
    "MultiModalItemTracker",
    "PILImage",
    "ParsedChat",
    "apply_chat_template",
    "detect_content_format",
    "get_tool_call_id_type",
    "has_non_text_content",
    "load_chat_template",
    "make_tool_call_id",
    "parse_chat_message_content",
    "parse_chat_message_content_parts",
    "parse_chat_messages",
    "parse_chat_messages_async",
    "resolve_chat_template_content_format",
    "resolve_processing_info",
    "validate_chat_template",
]
