"""The parse steps both content parsers share; they differ only in how they hand a load over.

Each step resolves what can refuse the request without I/O (the decoder, with the request's
``media_io_kwargs``; whether embeddings are enabled; the per-prompt limit, when the tracker adds
the item) and hands the tracker a load (:mod:`._loads`) to run when the items resolve.

A parser sees its tracker through :class:`ParserTracker`, the few members it uses. The trackers
(:mod:`.item_tracker`) create parsers, so the parsers import no tracker: the interface is written
here, and the trackers satisfy it.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from PIL import Image

from mediaref.exceptions import VLLMValidationError
from mediaref.media.base import MediaIO
from mediaref.media.connector import MediaConnector
from mediaref.media.decode_budget import MediaDecodedBudget
from mediaref.processing.context import BaseProcessingInfo, ModelConfig
from mediaref.renderers.chat_utils._loads import (
    FetchEmbeds,
    FetchMedia,
    FetchSharedPart,
    ItemLoad,
    PendingItem,
    ReadyValue,
    RunOffLoop,
    SharedVideoAudioFetch,
)
from mediaref.renderers.chat_utils._model import (
    config_dtype,
    mm_embeds_enabled,
    prompt_embeds_enabled,
)
from mediaref.renderers.chat_utils._parser_base import (
    AUDIO_IN_VIDEO_UUID_SUFFIX,
    ENABLE_PROMPT_EMBEDS_ERROR,
    PROMPT_EMBEDS_MISSING_DATA_ERROR,
    PROMPT_EMBEDS_PLACEHOLDER_TOKEN,
    BaseMultiModalContentParser,
    use_audio_in_video_from,
)
from mediaref.renderers.chat_utils._parts import PartFieldError
from mediaref.renderers.chat_utils.types import InputAudio, ModalityStr, MultiModalEmbedsPayload
from mediaref.renderers.embed_utils import load_prompt_embeds, prompt_embeds_width

_Item_contra = TypeVar("_Item_contra", contravariant=True)


class ParserTracker(Protocol[_Item_contra]):
    """What a content parser needs from its request's tracker; ``_Item_contra`` is the form in
    which the tracker takes an item (a :class:`PendingItem`, or an awaitable for the async one)."""

    decoded_budget: MediaDecodedBudget

    @property
    def model_config(self) -> ModelConfig: ...

    @property
    def processing_info(self) -> BaseProcessingInfo: ...

    @property
    def connector(self) -> MediaConnector: ...

    def get_media_io(self, modality: str) -> MediaIO[Any]: ...

    def add(self, modality: ModalityStr, item: _Item_contra) -> str | None: ...


# An audio format goes into a data: URL's media type, so it must be a plain token.
_AUDIO_FORMAT = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+-]{0,31}")
# Bytes a decoded PIL image is charged per pixel: RGBA, the widest mode a processor converts to.
_PIL_BYTES_PER_PIXEL = 4


def _input_audio_url(input_audio: object) -> str | None:
    """An ``input_audio`` object as a ``data:`` URL (None when its data is absent)."""
    if input_audio is None:
        return None
    if not isinstance(input_audio, Mapping):
        raise PartFieldError(
            "input_audio must be an object with 'data' and 'format'", parameter="input_audio"
        )
    data = input_audio.get("data")
    if data is None or data == "":
        return None  # a UUID may stand for the audio
    if not isinstance(data, str):
        raise PartFieldError(
            "input_audio.data must be a base64 string", parameter="input_audio.data"
        )
    audio_format = input_audio.get("format")
    if not isinstance(audio_format, str) or not _AUDIO_FORMAT.fullmatch(audio_format):
        raise PartFieldError(
            "input_audio.format must name an audio format such as 'wav' or 'mp3'",
            parameter="input_audio.format",
            value=audio_format,
        )
    return f"data:audio/{audio_format.lower()};base64,{data}"


class TrackedContentParser(BaseMultiModalContentParser):
    """Every parse step, shared by the sync and async parsers; they only say how to track a load."""

    def __init__(
        self,
        tracker: ParserTracker[Any],
        mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self._tracker = tracker
        self._mm_processor_kwargs = mm_processor_kwargs
        self._use_audio_in_video = use_audio_in_video_from(mm_processor_kwargs)

    @property
    def model_config(self) -> ModelConfig:
        return self._tracker.model_config

    @abstractmethod
    def _track(self, modality: ModalityStr, item: PendingItem) -> str | None:
        """Give the tracker ``item`` in this parser's form; the model's placeholder for it."""

    def _add(
        self, modality: ModalityStr, load: ItemLoad, uuid: str | None, marker: ModalityStr
    ) -> None:
        self._add_placeholder(marker, self._track(modality, PendingItem(load, uuid)))

    def _fetch(self, modality: str, url: str | None) -> ItemLoad:
        if not url:
            return ReadyValue(None)  # identified by its UUID only
        media_io = self._tracker.get_media_io(modality)
        return FetchMedia(lambda: self._tracker.connector, modality, url, media_io)

    def _require_mm_embeds(self, modality: str) -> None:
        if not mm_embeds_enabled(self.model_config):
            raise VLLMValidationError(
                f"You must set `--enable-mm-embeds` to input `{modality}_embeds`",
                parameter=f"{modality}_embeds",
            )

    def _embeds(self, modality: str, payload: MultiModalEmbedsPayload | None) -> ItemLoad:
        if payload is None:
            return ReadyValue(None)
        if not isinstance(payload, (str, Mapping)):
            raise PartFieldError(
                f"{modality}_embeds must be a base64 string or an object",
                parameter=f"{modality}_embeds",
            )
        return FetchEmbeds(lambda: self._tracker.connector, modality, payload)

    def parse_image(self, image_url: str | None, uuid: str | None = None) -> None:
        self._add("image", self._fetch("image", image_url), uuid, "image")

    def parse_image_pil(self, image_pil: Image.Image | None, uuid: str | None = None) -> None:
        if image_pil is not None:
            # Already decoded: it counts against the request's decoded bytes at once.
            width, height = image_pil.size
            self._tracker.decoded_budget.charge(width * height * _PIL_BYTES_PER_PIXEL)
        self._add("image", ReadyValue(image_pil), uuid, "image")

    def parse_image_embeds(
        self, image_embeds: MultiModalEmbedsPayload | None, uuid: str | None = None
    ) -> None:
        self._require_mm_embeds("image")
        self._add("image_embeds", self._embeds("image", image_embeds), uuid, "image")

    def parse_audio(self, audio_url: str | None, uuid: str | None = None) -> None:
        self._add("audio", self._fetch("audio", audio_url), uuid, "audio")

    def parse_input_audio(self, input_audio: InputAudio | None, uuid: str | None = None) -> None:
        self.parse_audio(_input_audio_url(input_audio), uuid)

    def parse_audio_embeds(
        self, audio_embeds: MultiModalEmbedsPayload | None, uuid: str | None = None
    ) -> None:
        self._require_mm_embeds("audio")
        self._add("audio_embeds", self._embeds("audio", audio_embeds), uuid, "audio")

    def parse_video(self, video_url: str | None, uuid: str | None = None) -> None:
        if not self._use_audio_in_video:
            self._add("video", self._fetch("video", video_url), uuid, "video")
            return
        audio_uuid = None if uuid is None else uuid + AUDIO_IN_VIDEO_UUID_SUFFIX
        if not video_url:
            video: ItemLoad = ReadyValue(None)
            audio: ItemLoad = ReadyValue(None)
        else:
            # One download, two decoders: both resolved now, so bad kwargs refuse the request.
            shared = SharedVideoAudioFetch(
                lambda: self._tracker.connector,
                video_url,
                self._tracker.get_media_io("video"),
                self._tracker.get_media_io("audio"),
            )
            video, audio = FetchSharedPart(shared, 0), FetchSharedPart(shared, 1)
        self._add("video", video, uuid, "video")
        self._add("audio", audio, audio_uuid, "audio")

    def parse_video_embeds(
        self,
        video_embeds: MultiModalEmbedsPayload | None,
        uuid: str | None = None,
        audio_embeds: MultiModalEmbedsPayload | None = None,
    ) -> None:
        self._require_mm_embeds("video")
        self._add("video_embeds", self._embeds("video", video_embeds), uuid, "video")
        if audio_embeds is not None:
            self.parse_audio_embeds(audio_embeds, uuid)

    def parse_prompt_embeds(self, data: str) -> None:
        """Track a base64 prompt-embeddings tensor; it stands in the prompt as one sentinel token.

        The renderer widens each sentinel to the tensor's ``num_tokens`` after tokenizing.
        """
        if not prompt_embeds_enabled(self.model_config):
            raise VLLMValidationError(
                ENABLE_PROMPT_EMBEDS_ERROR,
                parameter="prompt_embeds",
            )
        if not isinstance(data, str) or not data:
            raise VLLMValidationError(PROMPT_EMBEDS_MISSING_DATA_ERROR, parameter="prompt_embeds")
        model_config = self.model_config
        dtype = config_dtype(model_config)

        def run() -> object:
            hidden_size = prompt_embeds_width(model_config)
            return load_prompt_embeds(data, hidden_size=hidden_size, dtype=dtype)

        self._track("prompt_embeds", PendingItem(RunOffLoop(run), None))
        self._add_placeholder("prompt_embeds", PROMPT_EMBEDS_PLACEHOLDER_TOKEN)


__all__ = ["ParserTracker", "TrackedContentParser"]
