"""The per-request multimodal item tracker: limits, decoders, lazy fetches, placeholders.

Adding an item checks the model's per-prompt limit and resolves the item's decoder through the
model's processing info (:meth:`BaseProcessingInfo.get_media_io`, where decoder resolution lives)
at once, so a request over its limits or with bad ``media_io_kwargs`` fails before anything is
downloaded. The fetch itself is recorded and run when the data is asked for: one by one by the
synchronous tracker, concurrently by the async one. Both hand back the connector's lazy
:class:`~mediaref.media.base.MediaRef` objects; nothing is decoded here.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mediaref.entrypoints._chat_template import ModelChatTemplate
from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import MultiModalDataDict, MultiModalUUIDDict
from mediaref.media.base import MediaIO, MediaRef
from mediaref.media.connector import (
    MediaConnector,
    MediaRequestDownloadBudget,
    load_media_connector,
)
from mediaref.processing.context import BaseProcessingInfo, ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY

ModelLike = ModelConfig | BaseProcessingInfo
"""A model as the chat parser takes it: its config, or its (already loaded) processing info."""

# The audio item read out of a video (use_audio_in_video) is a second item with its own
# processor output; giving it the video's UUID verbatim would make the two collide in the
# processor cache, whose keys are the item hashes (a UUID is its item's hash).
AUDIO_IN_VIDEO_UUID_SUFFIX = "#audio"

_INFO_MEMO_SIZE = 8
_info_memo: OrderedDict[str, BaseProcessingInfo] = OrderedDict()
_info_memo_lock = threading.Lock()


def resolve_processing_info(model: ModelLike) -> BaseProcessingInfo:
    """The processing info of ``model``; for a config, one kept per distinct config.

    Kept because building it is cheap but its first use loads the HF processor (seconds); a
    server parsing every request against the same config must not pay that per request.
    """
    if isinstance(model, BaseProcessingInfo):
        return model
    if not isinstance(model, ModelConfig):
        raise TypeError(
            f"expected a ModelConfig or a BaseProcessingInfo, got {type(model).__name__}"
        )
    memo_key = repr(model)  # the config's dataclass repr carries every field's value
    with _info_memo_lock:
        info = _info_memo.get(memo_key)
        if info is None:
            factories = MULTIMODAL_REGISTRY.get_factories(model)
            info = factories.info.from_model_config(model)
            _info_memo[memo_key] = info
            while len(_info_memo) > _INFO_MEMO_SIZE:
                _info_memo.popitem(last=False)
        else:
            _info_memo.move_to_end(memo_key)
        return info


@dataclass
class _Item:
    uuid: str | None
    ref: MediaRef[Any] | None = None


# What a fetch is for -> the connector's method for it, sync and async. The named fetch_* methods
# (not load_from_url), so a registered connector's overrides apply.
_FETCH_METHODS: dict[
    str, tuple[Callable[[MediaConnector], Any], Callable[[MediaConnector], Any]]
] = {
    "image": (lambda c: c.fetch_image, lambda c: c.fetch_image_async),
    "video": (lambda c: c.fetch_video, lambda c: c.fetch_video_async),
    "audio": (lambda c: c.fetch_audio, lambda c: c.fetch_audio_async),
    "video_and_audio": (lambda c: c.fetch_video_and_audio, lambda c: c.fetch_video_and_audio_async),
}


@dataclass(frozen=True)
class _Fetch:
    """One download and the items it fills: one item, or a video and its audio track."""

    url: str
    media_ios: tuple[MediaIO[Any], ...]
    items: tuple[_Item, ...]
    target: str
    """What is fetched: a modality, or ``"video_and_audio"`` (one download, two refs)."""

    def run(self, connector: MediaConnector) -> Any:
        return _FETCH_METHODS[self.target][0](connector)(self.url, *self.media_ios)

    def run_async(self, connector: MediaConnector) -> Any:
        return _FETCH_METHODS[self.target][1](connector)(self.url, *self.media_ios)

    def store(self, fetched: MediaRef[Any] | tuple[MediaRef[Any], ...]) -> None:
        refs = fetched if isinstance(fetched, tuple) else (fetched,)
        for item, ref in zip(self.items, refs, strict=True):
            item.ref = ref


class BaseMultiModalItemTracker:
    """Tracks one request's media items, per modality, in the order they appear.

    ``model``: the model's config or processing info. ``connector``: the transport for this
    request (default: a new one from ``MEDIA_CONNECTOR_REGISTRY``, which picks
    ``VLLM_MEDIA_CONNECTOR``). ``media_io_kwargs``: the request's per-modality decoder settings,
    over the model config's. ``limit_mm_per_prompt``: per-modality caps over the model's own.
    ``chat_template``: the request's template, which placeholders are never read from.

    ``download_budget`` is this request's :class:`MediaRequestDownloadBudget`, made per tracker
    (one tracker, one request) as in vLLM; the default connector is built with it. A connector
    passed in keeps whatever budget it was built with.
    """

    def __init__(
        self,
        model: ModelLike,
        connector: MediaConnector | None = None,
        *,
        media_io_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        limit_mm_per_prompt: Mapping[str, int] | None = None,
        chat_template: str | None = None,
    ) -> None:
        if isinstance(connector, str):  # vLLM's third positional argument is the content format
            raise TypeError("connector must be a MediaConnector; pass content_format= by keyword")
        self._info = resolve_processing_info(model)
        self._connector = connector
        self._media_io_kwargs = dict(media_io_kwargs or {})
        self._limit_mm_per_prompt = dict(limit_mm_per_prompt or {})
        self.chat_template = ModelChatTemplate(self._info, chat_template)
        self._items: dict[str, list[_Item]] = {}
        self._pending: list[_Fetch] = []
        self._media_ios: dict[str, MediaIO[Any]] = {}
        self.download_budget = MediaRequestDownloadBudget()

    @property
    def processing_info(self) -> BaseProcessingInfo:
        return self._info

    @property
    def connector(self) -> MediaConnector:
        if self._connector is None:
            self._connector = load_media_connector(download_budget=self.download_budget)
        return self._connector

    # -- decoders and limits -------------------------------------------------------------------

    def get_media_io(
        self, modality: str, media_io_kwargs: Mapping[str, Any] | None = None
    ) -> MediaIO[Any]:
        """The model's decoder for ``modality``, with this request's settings (then these)."""
        if media_io_kwargs is None and modality in self._media_ios:
            return self._media_ios[modality]
        kwargs = {**self._media_io_kwargs.get(modality, {}), **(media_io_kwargs or {})}
        try:
            media_io = self._info.get_media_io(modality, kwargs)
        except VLLMValidationError:
            raise
        except (TypeError, ValueError) as exc:
            raise VLLMValidationError(
                f"media_io_kwargs[{modality!r}] is not valid for this model: {exc}",
                parameter="media_io_kwargs",
                value=kwargs,
            ) from exc
        if media_io_kwargs is None:
            self._media_ios[modality] = media_io
        return media_io

    def get_limit(self, modality: str, *, parameter: str | None = None) -> int | None:
        """The most ``modality`` items one prompt may carry (None: no limit)."""
        supported = self._info.get_supported_mm_limits()
        if modality not in supported:
            accepted = ", ".join(sorted(supported)) or "none"
            raise VLLMValidationError(
                f"the model {self._info.model_id!r} does not accept {modality} input "
                f"(it accepts: {accepted})",
                parameter=parameter,
            )
        limits = [
            limit
            for limit in (supported[modality], self._limit_mm_per_prompt.get(modality))
            if limit is not None
        ]
        return min(limits) if limits else None

    def _check_room(self, modality: str, parameter: str | None) -> None:
        limit = self.get_limit(modality, parameter=parameter)
        count = len(self._items.get(modality, ()))
        if limit is not None and count >= limit:
            raise VLLMValidationError(
                f"at most {limit} {modality} item(s) may be sent in one prompt",
                parameter=parameter,
            )

    # -- adding items --------------------------------------------------------------------------

    def _append(self, modality: str, uuid: str | None) -> tuple[int, _Item]:
        items = self._items.setdefault(modality, [])
        items.append(_Item(uuid))
        return len(items) - 1, items[-1]

    @staticmethod
    def _require_media(url: str | None, uuid: str | None, parameter: str | None) -> None:
        if url is None and uuid is None:
            raise VLLMValidationError("a media item needs a URL or a UUID", parameter=parameter)

    def add(
        self,
        modality: str,
        url: str | None,
        uuid: str | None = None,
        *,
        parameter: str | None = None,
    ) -> int:
        """Track one item (``url`` None: identified by ``uuid`` only); its index in its modality."""
        self._require_media(url, uuid, parameter)
        self._check_room(modality, parameter)
        if url is None:
            return self._append(modality, uuid)[0]
        media_io = self.get_media_io(modality)
        index, item = self._append(modality, uuid)
        self._pending.append(_Fetch(url, (media_io,), (item,), modality))
        return index

    def add_video_with_audio(
        self, url: str | None, uuid: str | None = None, *, parameter: str | None = None
    ) -> tuple[int, int]:
        """Track a video and its audio track, both built from one download of ``url``."""
        self._require_media(url, uuid, parameter)
        self._check_room("video", parameter)
        self._check_room("audio", parameter)
        media_ios = (
            (self.get_media_io("video"), self.get_media_io("audio")) if url is not None else None
        )
        video_index, video = self._append("video", uuid)
        audio_uuid = None if uuid is None else uuid + AUDIO_IN_VIDEO_UUID_SUFFIX
        audio_index, audio = self._append("audio", audio_uuid)
        if url is not None and media_ios is not None:
            self._pending.append(_Fetch(url, media_ios, (video, audio), "video_and_audio"))
        return video_index, audio_index

    def placeholder(self, modality: str, index: int) -> str:
        """The model's placeholder text for item ``index`` (0-based) of ``modality``."""
        return self.chat_template.placeholder(modality, index + 1)

    # -- results -------------------------------------------------------------------------------

    def all_mm_uuids(self) -> MultiModalUUIDDict | None:
        """Per modality, each item's client UUID (or None); None when the client gave none."""
        if not any(item.uuid is not None for items in self._items.values() for item in items):
            return None
        return {modality: [item.uuid for item in items] for modality, items in self._items.items()}

    def all_mm_data(self) -> MultiModalDataDict | None:
        """Per modality, each item's lazy MediaRef (None for a UUID-only item); None if no items."""
        self._fetch_pending()
        return self._collect()

    def _fetch_pending(self) -> None:
        if self._pending:
            raise RuntimeError(
                f"{len(self._pending)} fetch(es) have not run; use all_mm_data_async()"
            )

    def _take_pending(self) -> list[_Fetch]:
        pending, self._pending = self._pending, []
        return pending

    def _collect(self) -> MultiModalDataDict | None:
        if not self._items:
            return None
        return {modality: [item.ref for item in items] for modality, items in self._items.items()}


class MultiModalItemTracker(BaseMultiModalItemTracker):
    """Fetches with the connector's synchronous ``fetch_*``, in request order."""

    def _fetch_pending(self) -> None:
        for fetch in self._take_pending():
            fetch.store(fetch.run(self.connector))


class AsyncMultiModalItemTracker(BaseMultiModalItemTracker):
    """Fetches with the connector's ``fetch_*_async``, all of a request's fetches at once."""

    async def all_mm_data_async(self) -> MultiModalDataDict | None:
        pending = self._take_pending()
        connector = self.connector
        results = await asyncio.gather(
            *(fetch.run_async(connector) for fetch in pending),
            # Every fetch runs to its end before a failure is raised: no download is left
            # running unobserved behind an error that has already reached the client.
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result  # the first failure in request order
        for fetch, result in zip(pending, results, strict=True):  # gather: one result per fetch
            fetch.store(result)  # type: ignore[arg-type]  # failures were raised above
        return self._collect()


__all__ = [
    "AUDIO_IN_VIDEO_UUID_SUFFIX",
    "AsyncMultiModalItemTracker",
    "BaseMultiModalItemTracker",
    "ModelLike",
    "MultiModalItemTracker",
    "resolve_processing_info",
]
