"""Content parsers: each media part of one message becomes a tracked item and a placeholder.

A parser serves one message (:meth:`BaseMultiModalItemTracker.create_parser`). For each part it
resolves what can refuse the request without I/O — the decoder the model's processing info picks
(with the request's ``media_io_kwargs``), whether embeddings are enabled, the per-prompt limit —
and hands the tracker a load to run later, so a refused request downloads nothing. It records
the model's placeholder for the item under the modality's generic marker
(:data:`MODALITY_PLACEHOLDERS_MAP`), which string-format messages are built from.

:class:`MultiModalContentParser` and :class:`AsyncMultiModalContentParser` share every step; they
differ only in the form of item they give the tracker: one it resolves in request order, or one it
awaits together with the rest of the request's.

With ``use_audio_in_video`` in ``mm_processor_kwargs`` a video part also yields an audio item,
built from the same download; its UUID is the video's with :data:`AUDIO_IN_VIDEO_UUID_SUFFIX`,
since the processor cache keys items by UUID and the two items' outputs differ.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import torch

from mediaref.media import MEDIA_CONNECTOR_REGISTRY, MediaConnector
from mediaref.renderers.chat_utils._loads import PendingItem
from mediaref.renderers.chat_utils._parser_base import (
    AUDIO_IN_VIDEO_UUID_SUFFIX,
    ENABLE_PROMPT_EMBEDS_ERROR,
    MODALITY_PLACEHOLDERS_MAP,
    PROMPT_EMBEDS_PLACEHOLDER_ID_PREFIX,
    PROMPT_EMBEDS_PLACEHOLDER_TOKEN,
    BaseMultiModalContentParser,
    make_prompt_embeds_placeholder,
    use_audio_in_video_from,
)
from mediaref.renderers.chat_utils._tracked_parser import ParserTracker, TrackedContentParser
from mediaref.renderers.chat_utils.types import InputAudio, ModalityStr, MultiModalEmbedsPayload

AsyncItem = Callable[[], Awaitable[tuple[object, "str | None"]]]
"""How the async tracker takes an item: a call that fetches it when awaited."""


class MultiModalContentParser(TrackedContentParser):
    """Gives the tracker items it resolves one after another, in request order."""

    def __init__(
        self,
        tracker: ParserTracker[PendingItem],
        mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(tracker, mm_processor_kwargs)

    def _track(self, modality: ModalityStr, item: PendingItem) -> str | None:
        return self._tracker.add(modality, item)


class AsyncMultiModalContentParser(TrackedContentParser):
    """Gives the tracker awaitable items, which it awaits all at once."""

    def __init__(
        self,
        tracker: ParserTracker[AsyncItem],
        mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(tracker, mm_processor_kwargs)

    def _track(self, modality: ModalityStr, item: PendingItem) -> str | None:
        return self._tracker.add(modality, item.resolve_async)


_ENABLE_PROMPT_EMBEDS_ERROR = ENABLE_PROMPT_EMBEDS_ERROR  # vLLM's name for it, here


async def _load_embeds_dict(
    data: dict[str, Any], fetch: Callable[[str], Awaitable[torch.Tensor]]
) -> dict[str, Any]:
    """An embeddings dict with each base64 string value fetched into a tensor (all at once) and
    every other value (JSON metadata such as a grid) kept as it is: vLLM's helper, by its name."""
    encoded = [key for key, value in data.items() if isinstance(value, str)]
    tensors = await asyncio.gather(*(fetch(data[key]) for key in encoded))
    return {**data, **dict(zip(encoded, tensors, strict=True))}


__all__ = [
    "AUDIO_IN_VIDEO_UUID_SUFFIX",
    "MEDIA_CONNECTOR_REGISTRY",
    "MODALITY_PLACEHOLDERS_MAP",
    "PROMPT_EMBEDS_PLACEHOLDER_ID_PREFIX",
    "PROMPT_EMBEDS_PLACEHOLDER_TOKEN",
    "AsyncMultiModalContentParser",
    "BaseMultiModalContentParser",
    "InputAudio",
    "MediaConnector",
    "MultiModalContentParser",
    "MultiModalEmbedsPayload",
    "make_prompt_embeds_placeholder",
    "use_audio_in_video_from",
]
