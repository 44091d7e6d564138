"""How a tracked item's value is obtained, planned at parse time and run when the items resolve.

Parsing a part resolves everything that can refuse the request without I/O (the decoder, the
limits), and records a load; the loads run only once the whole request has parsed, so a request
that is refused downloads nothing. Each load has a synchronous and an asynchronous form over the
same plan, so the two trackers share it: the synchronous tracker runs ``load()`` in request order,
the async one awaits every ``load_async()`` at once.

The loads return the connector's lazy :class:`~mediaref.media.base.MediaRef` objects: nothing
is decoded here.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mediaref.media.base import MediaIO
from mediaref.media.connector import MediaConnector

ConnectorSource = Callable[[], MediaConnector]
"""The request's connector, built on first use (a text-only request never builds one)."""


class ItemLoad(ABC):
    """One item's value: ``load()`` on the calling thread, or ``await load_async()``."""

    @abstractmethod
    def load(self) -> object: ...

    @abstractmethod
    async def load_async(self) -> object: ...


@dataclass(frozen=True)
class ReadyValue(ItemLoad):
    """A value the request carried itself (a PIL image), or None for an item given by UUID only."""

    value: object

    def load(self) -> object:
        return self.value

    async def load_async(self) -> object:
        return self.value


FetchFn = Callable[[MediaConnector, str, MediaIO[Any]], object]
FetchAsyncFn = Callable[[MediaConnector, str, MediaIO[Any]], Awaitable[object]]
EmbeddingFn = Callable[[MediaConnector, str], object]
EmbeddingAsyncFn = Callable[[MediaConnector, str], Awaitable[object]]

# modality -> how to fetch it with a connector, sync and async. Each entry calls the connector's
# named fetch_* method (not load_from_url), so a registered connector's overrides apply.
_FETCH: dict[str, tuple[FetchFn, FetchAsyncFn]] = {
    "image": (
        lambda c, url, io: c.fetch_image(url, io),
        lambda c, url, io: c.fetch_image_async(url, io),
    ),
    "video": (
        lambda c, url, io: c.fetch_video(url, io),
        lambda c, url, io: c.fetch_video_async(url, io),
    ),
    "audio": (
        lambda c, url, io: c.fetch_audio(url, io),
        lambda c, url, io: c.fetch_audio_async(url, io),
    ),
}

# modality -> how to load a base64 embedding of it with a connector, sync and async.
_FETCH_EMBEDDING: dict[str, tuple[EmbeddingFn, EmbeddingAsyncFn]] = {
    "image": (
        lambda c, data: c.fetch_image_embedding(data),
        lambda c, data: c.fetch_image_embedding_async(data),
    ),
    "video": (
        lambda c, data: c.fetch_video_embedding(data),
        lambda c, data: c.fetch_video_embedding_async(data),
    ),
    "audio": (
        lambda c, data: c.fetch_audio_embedding(data),
        lambda c, data: c.fetch_audio_embedding_async(data),
    ),
}


@dataclass(frozen=True)
class FetchMedia(ItemLoad):
    """Download ``url`` into ``media_io``'s lazy ref."""

    connector: ConnectorSource
    modality: str
    url: str
    media_io: MediaIO[Any]

    def load(self) -> object:
        fetch, _ = _FETCH[self.modality]
        return fetch(self.connector(), self.url, self.media_io)

    async def load_async(self) -> object:
        _, fetch_async = _FETCH[self.modality]
        return await fetch_async(self.connector(), self.url, self.media_io)


@dataclass
class SharedVideoAudioFetch:
    """One download of a video serving two items: the video and its audio track.

    Whichever item resolves first runs the fetch; the other reads its result (or its failure).
    """

    connector: ConnectorSource
    url: str
    video_io: MediaIO[Any]
    audio_io: MediaIO[Any]
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _result: tuple[Any, Any] | BaseException | None = None
    _task: asyncio.Future[tuple[Any, Any]] | None = None

    def result(self) -> tuple[Any, Any]:
        with self._lock:
            if self._result is None:
                try:
                    self._result = self.connector().fetch_video_and_audio(
                        self.url, self.video_io, self.audio_io
                    )
                except Exception as exc:  # remembered: the sibling item must not fetch again
                    self._result = exc
        if isinstance(self._result, BaseException):
            raise self._result
        return self._result

    async def result_async(self) -> tuple[Any, Any]:
        if self._task is None:
            fetch = self.connector().fetch_video_and_audio_async
            self._task = asyncio.ensure_future(fetch(self.url, self.video_io, self.audio_io))
        return await self._task


@dataclass(frozen=True)
class FetchSharedPart(ItemLoad):
    """Item ``index`` (0: the video, 1: the audio) of a :class:`SharedVideoAudioFetch`."""

    shared: SharedVideoAudioFetch
    index: int

    def load(self) -> object:
        return self.shared.result()[self.index]

    async def load_async(self) -> object:
        return (await self.shared.result_async())[self.index]


@dataclass(frozen=True)
class FetchEmbeds(ItemLoad):
    """Precomputed embeddings: a base64 tensor, or a dict whose base64 values are tensors.

    Dict values that are not strings (numeric metadata arrays) pass through as they came; the
    tracker turns them into tensors when the items resolve.
    """

    connector: ConnectorSource
    modality: str
    payload: str | Mapping[str, Any]

    def load(self) -> object:
        fetch, _ = _FETCH_EMBEDDING[self.modality]
        connector = self.connector()
        if isinstance(self.payload, str):
            return fetch(connector, self.payload)
        return {
            k: fetch(connector, v) if isinstance(v, str) else v for k, v in self.payload.items()
        }

    async def load_async(self) -> object:
        _, fetch_async = _FETCH_EMBEDDING[self.modality]
        connector = self.connector()
        if isinstance(self.payload, str):
            return await fetch_async(connector, self.payload)
        encoded = {k: v for k, v in self.payload.items() if isinstance(v, str)}
        tensors = await asyncio.gather(*(fetch_async(connector, v) for v in encoded.values()))
        return {**self.payload, **dict(zip(encoded, tensors, strict=True))}


@dataclass(frozen=True)
class RunOffLoop(ItemLoad):
    """A CPU-bound load (deserializing a tensor): on a worker thread when awaited."""

    run: Callable[[], object]

    def load(self) -> object:
        return self.run()

    async def load_async(self) -> object:
        return await asyncio.to_thread(self.run)


@dataclass(frozen=True)
class PendingItem:
    """A tracked item not loaded yet: its load and the client's UUID."""

    item_load: ItemLoad
    uuid: str | None

    def resolve(self) -> tuple[object, str | None]:
        return self.item_load.load(), self.uuid

    def resolve_async(self) -> Awaitable[tuple[object, str | None]]:
        return self._resolve_async()

    async def _resolve_async(self) -> tuple[object, str | None]:
        return await self.item_load.load_async(), self.uuid


__all__ = [
    "ConnectorSource",
    "FetchEmbeds",
    "FetchMedia",
    "FetchSharedPart",
    "ItemLoad",
    "PendingItem",
    "ReadyValue",
    "RunOffLoop",
    "SharedVideoAudioFetch",
]
