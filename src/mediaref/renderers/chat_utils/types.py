"""The shapes of a chat request, as vLLM's chat API takes them: content parts, messages, formats.

These are :class:`~typing.TypedDict` s, so a request parsed from JSON already is one: nothing is
validated by constructing them (the parsers in :mod:`.chat_message` do that, naming the offending
input). The OpenAI part types that vLLM imports from the ``openai`` package (``ImageURL``,
``InputAudio``, ``ChatCompletionContentPartTextParam``, ``ChatCompletionContentPartImageParam``)
are written out here with the same keys, since mediaref does not depend on ``openai``; for the
same reason :class:`PILImage` is a plain class rather than a pydantic model, and
:data:`ChatCompletionMessageParam` has no ``openai_harmony`` member.

Keys that a part must carry sit in a private ``_...Required`` base (Python 3.10 has no
``typing.Required``); the public class adds the optional ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeAlias

from PIL import Image
from typing_extensions import TypedDict  # pydantic (vLLM's request models) on Python < 3.12

# --- OpenAI's own part types ------------------------------------------------------------------


class _ImageURLRequired(TypedDict):
    url: str
    """An image URL (``http(s):``, ``file:``) or a ``data:`` URL with base64 image data."""


class ImageURL(_ImageURLRequired, total=False):
    detail: Literal["auto", "low", "high"]
    """OpenAI's resolution hint; only ``"auto"`` is honoured (the model's config decides)."""


class InputAudio(TypedDict):
    data: str
    """Base64-encoded audio."""
    format: str
    """The audio's format, e.g. ``"wav"`` or ``"mp3"``: it becomes the data URL's media type."""


class ChatCompletionContentPartTextParam(TypedDict):
    text: str
    type: Literal["text"]


class ChatCompletionContentPartImageParam(TypedDict):
    image_url: ImageURL
    type: Literal["image_url"]


class ChatCompletionContentPartInputAudioParam(TypedDict):
    input_audio: InputAudio
    type: Literal["input_audio"]


class ChatCompletionContentPartRefusalParam(TypedDict):
    refusal: str
    type: Literal["refusal"]


class ChatCompletionContentPartFileParam(TypedDict, total=False):
    """OpenAI's file part: known to the API, refused by the parser (no modality takes it)."""

    file: dict[str, str]
    type: Literal["file"]


# --- vLLM's additions -------------------------------------------------------------------------


class AudioURL(TypedDict):
    url: str
    """An audio URL or a ``data:`` URL with base64 audio data."""


class VideoURL(TypedDict):
    url: str
    """A video URL or a ``data:`` URL with base64 video data (``video/jpeg``: a frame list)."""


class ChatCompletionContentPartAudioParam(TypedDict):
    audio_url: AudioURL
    type: Literal["audio_url"]


class ChatCompletionContentPartVideoParam(TypedDict):
    video_url: VideoURL
    type: Literal["video_url"]


MultiModalEmbedsPayload: TypeAlias = str | dict[str, str | list[int | float]]
"""Precomputed embeddings: one base64 serialized tensor, or a dict of base64 tensors and numeric
metadata arrays (e.g. Qwen2-VL's ``{"image_embeds": ..., "image_grid_thw": [[1, 4, 4]]}``)."""


class _ImageEmbedsRequired(TypedDict):
    type: Literal["image_embeds"]


class ChatCompletionContentPartImageEmbedsParam(_ImageEmbedsRequired, total=False):
    image_embeds: MultiModalEmbedsPayload | None
    uuid: str | None
    """The client's identity for the item; it must be unique to the media it names."""


class _AudioEmbedsRequired(TypedDict):
    type: Literal["audio_embeds"]


class ChatCompletionContentPartAudioEmbedsParam(_AudioEmbedsRequired, total=False):
    audio_embeds: MultiModalEmbedsPayload | None
    uuid: str | None


class _VideoEmbedsRequired(TypedDict):
    type: Literal["video_embeds"]


class ChatCompletionContentPartVideoEmbedsParam(_VideoEmbedsRequired, total=False):
    video_embeds: MultiModalEmbedsPayload | None
    audio_embeds: MultiModalEmbedsPayload | None
    """The video's audio track (``use_audio_in_video``), under the video's UUID."""
    uuid: str | None


class ChatCompletionContentPartPromptEmbedsParam(TypedDict):
    data: str
    """Base64 of a serialized ``torch.Tensor`` of shape ``(num_tokens, hidden_size)``."""
    type: Literal["prompt_embeds"]


@dataclass
class PILImage:
    """A ``PIL.Image.Image`` carried in a content part (offline callers)."""

    image_pil: Image.Image
    model_config: ClassVar[dict[str, Any]] = {"arbitrary_types_allowed": True}
    """vLLM's pydantic model config, kept: the field holds an arbitrary (PIL) type."""
    __pydantic_config__: ClassVar[dict[str, Any]] = model_config
    """The same, where pydantic reads it on a plain dataclass."""

    def __post_init__(self) -> None:
        if not isinstance(self.image_pil, Image.Image):
            raise TypeError(f"image_pil must be a PIL image, not {type(self.image_pil).__name__}")


class CustomChatCompletionContentPILImageParam(TypedDict, total=False):
    """``{"image_pil": <PIL image>}``: an image already decoded by the caller."""

    image_pil: PILImage | Image.Image | None
    uuid: str | None


# A pydantic model typed with these parts (vLLM's ChatCompletionRequest) takes a PIL image here;
# pydantic reads a TypedDict's config from this attribute (what its ``with_config`` sets).
setattr(  # noqa: B010 - a TypedDict body holds annotations only
    CustomChatCompletionContentPILImageParam,
    "__pydantic_config__",
    {"arbitrary_types_allowed": True},
)


class CustomChatCompletionContentSimpleImageParam(TypedDict, total=False):
    """``{"image_url": "https://..."}``: the URL as a plain string (OpenAI takes it, undocumented)."""

    image_url: str | None
    uuid: str | None


class CustomChatCompletionContentSimpleAudioParam(TypedDict, total=False):
    """``{"audio_url": "https://..."}``."""

    audio_url: str | None


class CustomChatCompletionContentSimpleVideoParam(TypedDict, total=False):
    """``{"video_url": "https://..."}``."""

    video_url: str | None
    uuid: str | None


class _ThinkRequired(TypedDict):
    thinking: str
    type: Literal["thinking"]


class CustomThinkCompletionContentParam(_ThinkRequired, total=False):
    """``{"type": "thinking", "thinking": "...", "closed": True}``: reasoning, passed as text."""

    closed: bool


class CustomChatCompletionContentToolReferenceParam(TypedDict, total=False):
    """``{"type": "tool_reference", "name": "get_weather"}``: left for the template to expand."""

    name: str
    type: Literal["tool_reference"]


ChatCompletionContentPartParam: TypeAlias = (
    ChatCompletionContentPartTextParam
    | ChatCompletionContentPartImageParam
    | ChatCompletionContentPartInputAudioParam
    | ChatCompletionContentPartFileParam
    | ChatCompletionContentPartAudioParam
    | ChatCompletionContentPartVideoParam
    | ChatCompletionContentPartRefusalParam
    | CustomChatCompletionContentPILImageParam
    | CustomChatCompletionContentSimpleImageParam
    | ChatCompletionContentPartImageEmbedsParam
    | ChatCompletionContentPartAudioEmbedsParam
    | ChatCompletionContentPartVideoEmbedsParam
    | ChatCompletionContentPartPromptEmbedsParam
    | CustomChatCompletionContentSimpleAudioParam
    | CustomChatCompletionContentSimpleVideoParam
    | CustomChatCompletionContentToolReferenceParam
    | str
    | CustomThinkCompletionContentParam
)


class _RoleRequired(TypedDict):
    role: str
    """The author's role: ``system``, ``user``, ``assistant``, ``tool``, ``developer`` or custom."""


class CustomChatCompletionMessageParam(_RoleRequired, total=False):
    """One message of a request, any role."""

    content: str | list[ChatCompletionContentPartParam]
    name: str
    """The participant's name, told apart from others of the same role."""
    tool_call_id: str | None
    """The tool call a ``tool`` message answers."""
    tool_calls: list[dict[str, Any]] | None
    """An ``assistant`` message's calls: ``{"id", "type": "function", "function": {...}}``."""
    reasoning: str | ChatCompletionContentPartPromptEmbedsParam | None
    """Interleaved thinking of an ``assistant`` message."""
    tools: list[dict[str, Any]] | None
    """The tools a ``developer`` message declares."""
    task: str | None
    """A model-specific task marker, passed through."""


ChatCompletionMessageParam: TypeAlias = CustomChatCompletionMessageParam
"""A request message (vLLM's union of OpenAI's per-role messages, all of which this one covers)."""


class ConversationMessage(_RoleRequired, total=False):
    """One message as the chat template receives it."""

    content: str | list[dict[str, str]] | None
    """A string (``"string"`` format), or parts such as ``{"type": "image"}`` (``"openai"``)."""
    tool_call_id: str | None
    name: str | None
    tool_calls: list[dict[str, Any]] | None
    """With each call's ``arguments`` parsed from JSON into a dict, as templates expect them."""
    reasoning: str | None
    reasoning_content: str | None
    """The same as ``reasoning``, under the name older templates read."""
    tools: list[dict[str, Any]] | None
    task: str | None


ChatTemplateContentFormatOption = Literal["auto", "string", "openai"]
"""The content format a caller asks for; ``"auto"`` reads it off the chat template."""

ChatTemplateContentFormat = Literal["string", "openai"]
"""The resolved content format: placeholders inside a string, or typed parts in a list."""

ModalityStr = Literal[
    "image",
    "audio",
    "video",
    "image_embeds",
    "audio_embeds",
    "video_embeds",
    "vision_chunk",
    "prompt_embeds",
]

__all__ = [
    "AudioURL",
    "ChatCompletionContentPartAudioEmbedsParam",
    "ChatCompletionContentPartAudioParam",
    "ChatCompletionContentPartFileParam",
    "ChatCompletionContentPartImageEmbedsParam",
    "ChatCompletionContentPartImageParam",
    "ChatCompletionContentPartInputAudioParam",
    "ChatCompletionContentPartParam",
    "ChatCompletionContentPartPromptEmbedsParam",
    "ChatCompletionContentPartRefusalParam",
    "ChatCompletionContentPartTextParam",
    "ChatCompletionContentPartVideoEmbedsParam",
    "ChatCompletionContentPartVideoParam",
    "ChatCompletionMessageParam",
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
    "MultiModalEmbedsPayload",
    "PILImage",
    "VideoURL",
]
