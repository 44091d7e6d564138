"""One chat content part in, a text piece or a media reference request out; no I/O here.

The accepted forms follow the OpenAI chat API as vLLM extends it:

- ``{"type": "text", "text": ...}`` (also ``input_text``, ``output_text``, and ``refusal``
  carrying ``"refusal"``), or a bare string;
- ``{"type": "image_url", "image_url": {"url": ..., "detail": ...}}`` and the same for
  ``video_url`` and ``audio_url``; the field may also hold the URL as a plain string;
- ``{"type": "input_audio", "input_audio": {"data": <base64>, "format": "wav"}}``, which becomes a
  ``data:audio/<format>;base64,...`` URL;
- a ``uuid`` on any media part: the client's identity for the item. With a uuid the media itself
  may be absent (``"image_url": null``): the item is then served from the processor cache.

A part without ``type`` is recognised by the media field it carries. Every malformed part raises
:class:`~mediaref.exceptions.VLLMValidationError` naming its place, e.g.
``messages[0].content[2].image_url.url``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from mediaref.exceptions import VLLMValidationError

logger = logging.getLogger(__name__)

# part type -> the key that holds its text
TEXT_PART_TYPES: Mapping[str, str] = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
}
# part type -> the modality it carries
MEDIA_PART_TYPES: Mapping[str, str] = {
    "image_url": "image",
    "video_url": "video",
    "audio_url": "audio",
    "input_audio": "audio",
}
SUPPORTED_PART_TYPES: tuple[str, ...] = (*TEXT_PART_TYPES, *MEDIA_PART_TYPES)

# An audio format goes into a data: URL's media type, so it must be a plain token.
_AUDIO_FORMAT = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+-]{0,31}")


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class MediaPart:
    """A media item the request asks for: fetch ``url`` (None: UUID only) as ``modality``."""

    modality: str
    url: str | None
    uuid: str | None
    parameter: str
    """Where the part sits in the request, for error messages: ``messages[0].content[1].image_url``."""


def _infer_part_type(part: Mapping[str, object], location: str) -> str:
    for part_type in MEDIA_PART_TYPES:
        if part_type in part:
            return part_type
    if "text" in part:
        return "text"
    raise VLLMValidationError(
        f"{location} has no 'type' and no media field; supported types: "
        f"{', '.join(SUPPORTED_PART_TYPES)}",
        parameter=f"{location}.type",
    )


def _parse_uuid(part: Mapping[str, object], location: str) -> str | None:
    uuid = part.get("uuid")
    if uuid is None:
        return None
    if not isinstance(uuid, str) or not uuid:
        raise VLLMValidationError(
            f"{location}.uuid must be a non-empty string", parameter=f"{location}.uuid", value=uuid
        )
    return uuid


def _url_field(part: Mapping[str, object], part_type: str, location: str) -> str | None:
    """The URL of an ``image_url``/``video_url``/``audio_url`` part (None when absent)."""
    value = part.get(part_type)
    parameter = f"{location}.{part_type}"
    if value is None or isinstance(value, str):
        url = value
    elif isinstance(value, Mapping):
        url = value.get("url")
        parameter += ".url"
        detail = value.get("detail", "auto")
        if part_type == "image_url" and detail not in ("auto", None):
            # The processor decides the resolution from the model's config; there is no knob
            # for OpenAI's "low"/"high", so the request is served as "auto".
            logger.warning("%s.detail=%r is not supported and is ignored", parameter, detail)
    else:
        raise VLLMValidationError(
            f"{parameter} must be an object with a 'url' or a URL string", parameter=parameter
        )
    if url is not None and (not isinstance(url, str) or not url):
        raise VLLMValidationError(
            f"{parameter} must be a non-empty string", parameter=parameter, value=url
        )
    return url


def _input_audio_url(part: Mapping[str, object], location: str) -> str | None:
    """``input_audio`` as a ``data:`` URL (None when its data is absent)."""
    parameter = f"{location}.input_audio"
    value = part.get("input_audio")
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise VLLMValidationError(
            f"{parameter} must be an object with 'data' and 'format'", parameter=parameter
        )
    data = value.get("data")
    if data is None or data == "":
        return None
    if not isinstance(data, str):
        raise VLLMValidationError(
            f"{parameter}.data must be a base64 string", parameter=f"{parameter}.data"
        )
    audio_format = value.get("format")
    if not isinstance(audio_format, str) or not _AUDIO_FORMAT.fullmatch(audio_format):
        raise VLLMValidationError(
            f"{parameter}.format must name an audio format such as 'wav' or 'mp3'",
            parameter=f"{parameter}.format",
            value=audio_format,
        )
    return f"data:audio/{audio_format.lower()};base64,{data}"


def parse_content_part(part: object, location: str) -> TextPart | MediaPart | None:
    """Parse the content part found at ``location``; None for a text part without text."""
    if isinstance(part, str):
        return TextPart(part)
    if not isinstance(part, Mapping):
        raise VLLMValidationError(f"{location} must be a string or an object", parameter=location)
    part_type = part.get("type")
    if part_type is None:
        part_type = _infer_part_type(part, location)
    if not isinstance(part_type, str) or part_type not in SUPPORTED_PART_TYPES:
        raise VLLMValidationError(
            f"unsupported content part type {part_type!r} at {location}; supported types: "
            f"{', '.join(SUPPORTED_PART_TYPES)}",
            parameter=f"{location}.type",
            value=part_type,
        )

    text_key = TEXT_PART_TYPES.get(part_type)
    if text_key is not None:
        text = part.get(text_key)
        if text is None:
            return None  # as vLLM: an empty text part is skipped, not an error
        if not isinstance(text, str):
            raise VLLMValidationError(
                f"{location}.{text_key} must be a string", parameter=f"{location}.{text_key}"
            )
        return TextPart(text)

    uuid = _parse_uuid(part, location)
    if part_type == "input_audio":
        url = _input_audio_url(part, location)
        missing = f"{location}.input_audio.data"
    else:
        url = _url_field(part, part_type, location)
        missing = f"{location}.{part_type}.url"
    if url is None and uuid is None:
        raise VLLMValidationError(
            f"{missing} is missing (a media part needs its media, or a 'uuid' that names "
            "media sent before)",
            parameter=missing,
        )
    return MediaPart(MEDIA_PART_TYPES[part_type], url, uuid, f"{location}.{part_type}")


__all__ = [
    "MEDIA_PART_TYPES",
    "SUPPORTED_PART_TYPES",
    "TEXT_PART_TYPES",
    "MediaPart",
    "TextPart",
    "parse_content_part",
]
