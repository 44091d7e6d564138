"""What every content parser is: the part-parsing interface, and the placeholders it keeps.

A parser keeps, per generic marker (:data:`MODALITY_PLACEHOLDERS_MAP`), the model placeholder of
each item it tracked, in order: a string-format message is built from them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Mapping
from typing import Final

from PIL import Image

from mediaref.exceptions import VLLMValidationError
from mediaref.processing.context import ModelConfig
from mediaref.renderers.chat_utils.types import InputAudio, ModalityStr, MultiModalEmbedsPayload

MODALITY_PLACEHOLDERS_MAP: Final[dict[str, str]] = {
    "image": "<##IMAGE##>",
    "audio": "<##AUDIO##>",
    "video": "<##VIDEO##>",
    "prompt_embeds": "<##PROMPT_EMBEDS##>",
}
"""Modality -> the generic marker a string-format part leaves in the text (``interleave_strings``)."""

PROMPT_EMBEDS_PLACEHOLDER_TOKEN: Final[str] = "<prompt_embeds>"
"""The special token standing for each ``prompt_embeds`` position while the template renders."""

PROMPT_EMBEDS_PLACEHOLDER_ID_PREFIX: Final[str] = (
    f"{PROMPT_EMBEDS_PLACEHOLDER_TOKEN}__vllm_prompt_embed_"
)

AUDIO_IN_VIDEO_UUID_SUFFIX: Final[str] = "#audio"
"""Appended to a video's UUID for the audio item read out of it (``use_audio_in_video``)."""


def make_prompt_embeds_placeholder(index: int) -> str:
    """The text that marks the ``index``-th ``prompt_embeds`` part of a request in the prompt."""
    return f"{PROMPT_EMBEDS_PLACEHOLDER_ID_PREFIX}{index}__"


def use_audio_in_video_from(mm_processor_kwargs: Mapping[str, object] | None) -> bool:
    """``mm_processor_kwargs["use_audio_in_video"]`` (False when absent); a non-boolean is a 400."""
    value = (mm_processor_kwargs or {}).get("use_audio_in_video", False)
    if not isinstance(value, bool):
        raise VLLMValidationError(
            "mm_processor_kwargs['use_audio_in_video'] must be a boolean",
            parameter="mm_processor_kwargs",
            value=value,
        )
    return value


class BaseMultiModalContentParser(ABC):
    """Parses one message's media parts; keeps the model placeholders they need, by marker."""

    def __init__(self) -> None:
        super().__init__()
        # generic marker -> the model's placeholder of each item, in order:
        # {"<##IMAGE##>": ["<image>", "<image>"], "<##AUDIO##>": ["<audio>"]}
        self._placeholder_storage: dict[str, list[str]] = defaultdict(list)
        # Media items the model has no placeholder text for (string format cannot place them).
        self.unplaced_modalities: list[str] = []

    @property
    @abstractmethod
    def model_config(self) -> ModelConfig: ...

    def _add_placeholder(self, modality: ModalityStr, placeholder: str | None) -> None:
        marker = MODALITY_PLACEHOLDERS_MAP[modality]
        if placeholder:
            self._placeholder_storage[marker].append(placeholder)
        elif modality != "prompt_embeds":
            self.unplaced_modalities.append(modality)

    def mm_placeholder_storage(self) -> dict[str, list[str]]:
        """Marker -> the model placeholders recorded so far (a copy)."""
        return {marker: list(found) for marker, found in self._placeholder_storage.items()}

    @abstractmethod
    def parse_image(self, image_url: str | None, uuid: str | None = None) -> None: ...

    @abstractmethod
    def parse_image_embeds(
        self, image_embeds: MultiModalEmbedsPayload | None, uuid: str | None = None
    ) -> None: ...

    @abstractmethod
    def parse_image_pil(self, image_pil: Image.Image | None, uuid: str | None = None) -> None: ...

    @abstractmethod
    def parse_audio(self, audio_url: str | None, uuid: str | None = None) -> None: ...

    @abstractmethod
    def parse_input_audio(
        self, input_audio: InputAudio | None, uuid: str | None = None
    ) -> None: ...

    @abstractmethod
    def parse_audio_embeds(
        self, audio_embeds: MultiModalEmbedsPayload | None, uuid: str | None = None
    ) -> None: ...

    @abstractmethod
    def parse_prompt_embeds(self, data: str) -> None: ...

    @abstractmethod
    def parse_video(self, video_url: str | None, uuid: str | None = None) -> None: ...

    @abstractmethod
    def parse_video_embeds(
        self,
        video_embeds: MultiModalEmbedsPayload | None,
        uuid: str | None = None,
        audio_embeds: MultiModalEmbedsPayload | None = None,
    ) -> None: ...


# vLLM's wording for the prompt-embeddings refusals, by vLLM's names (its chat_message and
# content_parser modules export them, and its tests match on them).
ENABLE_PROMPT_EMBEDS_ERROR: Final[str] = (
    "You must set `--enable-prompt-embeds` to input `prompt_embeds`"
)
PROMPT_EMBEDS_MISSING_DATA_ERROR: Final[str] = (
    "prompt_embeds content part requires a non-empty `data` field with base64-encoded tensor bytes."
)
RESERVED_PLACEHOLDER_IN_TEXT_ERROR: Final[str] = (
    "Text content may not contain the reserved placeholder {token!r}. "
    "This placeholder is used internally to mark `prompt_embeds` splice "
    "positions in the tokenized prompt."
)


__all__ = [
    "AUDIO_IN_VIDEO_UUID_SUFFIX",
    "ENABLE_PROMPT_EMBEDS_ERROR",
    "MODALITY_PLACEHOLDERS_MAP",
    "PROMPT_EMBEDS_MISSING_DATA_ERROR",
    "PROMPT_EMBEDS_PLACEHOLDER_ID_PREFIX",
    "PROMPT_EMBEDS_PLACEHOLDER_TOKEN",
    "RESERVED_PLACEHOLDER_IN_TEXT_ERROR",
    "BaseMultiModalContentParser",
    "make_prompt_embeds_placeholder",
    "use_audio_in_video_from",
]
