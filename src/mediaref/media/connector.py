"""MediaConnector: transport only — ``data:``, ``file:`` and ``http(s):`` URLs in, MediaRefs out.

The connector owns URL scheme dispatch, the allowed domains and local path, the encoded-size cap,
the on-disk download cache, the redirect and address policy and error normalization. How bytes
decode belongs to the caller-supplied :class:`~mediaref.media.base.MediaIO`: every ``fetch_*``
takes one and returns its lazy :class:`~mediaref.media.base.MediaRef`, so the decode spec (and the
cache identity) is the caller's.

Sizes: every http(s) download is capped at ``VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB`` or the strictest
decoder cap, whichever is smaller; ``data:`` and ``file:`` payloads at the decoder cap. A request's
downloads together are held to its :class:`MediaRequestDownloadBudget`
(``VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB``), which belongs to the request, not the connector:
pass one as ``download_budget`` (the chat item tracker makes one per request). A connector built
without one has no request-wide limit, so a long-lived connector never runs out.

Time and connections: vLLM's fetch timeouts are per attempt (``VLLM_*_FETCH_TIMEOUT`` times
``VLLM_MEDIA_FETCH_MAX_RETRIES`` attempts) and a connector's downloads are not bounded in number,
which is what a connector built without a request scope keeps. A request's
:class:`MediaRequestFetchScope` (mediaref's own; pass it as ``fetch_scope``, one per request, as
the chat item tracker and the render server do) gives all of the request's downloads one
deadline, by default the longest fetch timeout among them counted from the first, and lets at
most ``MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS`` (16) of them hold a connection at once; why is
in ``_transport/request_scope.py``.

One implementation, two drivers: the connector's methods delegate planning (scheme dispatch,
policy, local reads) to :mod:`._fetch_plan` and running a plan to :mod:`._fetch_drivers`.

vLLM's calls keep working: ``fetch_image(url)``, ``fetch_video(url, video_processor=...)`` and
``fetch_audio(url)`` without a decoder build vLLM's default one (charging the connector's
``decoded_budget``) and still return a lazy ref. ``fetch_*_embedding(data)`` load base64
embeddings at once, as vLLM's do. ``MODALITY_IO_MAP``, ``merge_media_io_kwargs`` and
``global_thread_pool`` (the shared media pool, created on first use) are vLLM's module names.

Errors are :mod:`mediaref.exceptions` types naming the URL and the reason: refused scheme, domain,
address or path -> ``MediaNotAllowedError``; over a cap or the budget -> ``MediaTooLargeError``;
404/410 or a missing file -> ``MediaNotFoundError``; another client fault (malformed URL or
base64, a ``file:`` URL naming no regular file) -> ``MediaClientError``; timeouts, the
request's fetch deadline included -> ``MediaTimeoutError``; 5xx (after retries), 429, dropped
connections, malformed responses and this server running out of descriptors ->
``MediaServerError``. The table is ``_transport/errors.py``. That holds for refs built from a
``video/jpeg`` data: URL too, whose base64 text goes to the decoders as is: whatever decoder it
reaches, malformed base64 is a 400.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from mediaref import envs
from mediaref.media import _fetch_drivers as drivers
from mediaref.media._default_decoders import (
    default_audio_io,
    default_image_io,
    default_video_io,
    load_embedding,
    merge_media_io_kwargs,
    modality_io_map,
)
from mediaref.media._fetch_plan import (
    FetchPlan,
    plan_fetch,
    url_policy,
)
from mediaref.media._transport.budget import (
    MediaRequestDownloadBudget,
    MediaRequestDownloadSizeExceededError,
)
from mediaref.media._transport.http_client import MediaHTTPClient, default_http_client
from mediaref.media._transport.local_file import LocalMediaRoot
from mediaref.media._transport.request_scope import MediaRequestFetchScope
from mediaref.media._transport.url_policy import URLPolicy
from mediaref.media.base import MediaIO, MediaRef, MediaWithBytes
from mediaref.media.decode_budget import MediaDecodedBudget
from mediaref.media.executor import get_media_executor
from mediaref.media.extensions import ExtensionManager
from mediaref.media.reexports import lazy_exports

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from mediaref.media.audio import AudioEmbeddingMediaIO, AudioMediaIO
    from mediaref.media.image import ImageEmbeddingMediaIO, ImageMediaIO
    from mediaref.media.video import VideoEmbeddingMediaIO, VideoMediaIO
    from mediaref.media.video.loader_registry import get_video_loader_backend_for_processor

    MODALITY_IO_MAP: dict[str, type[MediaIO[Any]]]
    global_thread_pool: ThreadPoolExecutor

_M = TypeVar("_M")
_V = TypeVar("_V")
_A = TypeVar("_A")

MEDIA_CONNECTOR_REGISTRY: ExtensionManager[MediaConnector] = ExtensionManager("media connector")
"""Connector classes by name; a server builds ``VLLM_MEDIA_CONNECTOR``'s (default "http")."""


def load_media_connector(*args: Any, **kwargs: Any) -> MediaConnector:
    """The connector ``VLLM_MEDIA_CONNECTOR`` names, built with the arguments given."""
    return MEDIA_CONNECTOR_REGISTRY.load(envs.VLLM_MEDIA_CONNECTOR, *args, **kwargs)


@MEDIA_CONNECTOR_REGISTRY.register("http")
class MediaConnector:
    """Fetches ``data:``, ``file:`` and ``http(s):`` URLs into lazy :class:`MediaRef` objects.

    ``connection`` is the HTTP client whose pooled sessions downloads use (default: the
    process-wide one). ``allowed_local_media_path`` enables ``file:`` URLs under that directory.
    A non-empty ``allowed_media_domains`` restricts http(s) hosts, on every redirect hop.
    ``allow_private_ips`` (default ``MEDIAREF_MEDIA_URL_ALLOW_PRIVATE_IPS``, read per fetch) permits
    loopback, private, link-local and other non-public addresses. ``download_budget`` is the
    request's :class:`MediaRequestDownloadBudget`, shared by its downloads (None: no request-wide
    limit; each download still has its own cap). ``decoded_budget`` is charged by the decoders the
    connector builds itself, when a ``fetch_*`` call brings none (vLLM's argument).
    ``fetch_scope`` (mediaref's own) is the request's :class:`MediaRequestFetchScope`: one
    deadline and a connection bound for all of its downloads (None: vLLM's per-attempt timeouts
    and retries, no bound but the HTTP client's).

    Unlike vLLM's, the constructor takes no ``media_io_kwargs``: how bytes decode is the
    caller's decoder's business (seeds/000).
    """

    def __init__(
        self,
        connection: MediaHTTPClient | None = None,
        *,
        allowed_local_media_path: str = "",
        allowed_media_domains: Sequence[str] | None = None,
        allow_private_ips: bool | None = None,
        decoded_budget: MediaDecodedBudget | None = None,
        download_budget: MediaRequestDownloadBudget | None = None,
        fetch_scope: MediaRequestFetchScope | None = None,
    ) -> None:
        self.connection = connection if connection is not None else default_http_client()
        self.allowed_local_media_path = allowed_local_media_path
        self.allowed_media_domains = list(allowed_media_domains) if allowed_media_domains else None
        self.allow_private_ips = allow_private_ips
        self._local_root = (
            LocalMediaRoot(allowed_local_media_path) if allowed_local_media_path else None
        )
        self.decoded_budget = decoded_budget
        self.download_budget = download_budget
        self.fetch_scope = fetch_scope

    # --- the shared core: planning in _fetch_plan, the drivers in _fetch_drivers ---------------

    def _url_policy(self) -> URLPolicy:
        return url_policy(self.allowed_media_domains, self.allow_private_ips)

    def _plan(
        self, url: str, media_ios: Sequence[MediaIO[Any]], fetch_timeout: float | None
    ) -> FetchPlan:
        """Dispatch on the scheme and check the policy; no payload is read yet."""
        return plan_fetch(
            url,
            media_ios,
            fetch_timeout,
            local_root=self._local_root,
            policy=self._url_policy,
            download_budget=self.download_budget,
            fetch_scope=self.fetch_scope,
        )

    def _load(
        self, url: str, media_ios: Sequence[MediaIO[Any]], fetch_timeout: float | None
    ) -> list[MediaRef[Any]]:
        """The synchronous driver."""
        plan = self._plan(url, media_ios, fetch_timeout)
        return drivers.load(self.connection, url, plan, media_ios)

    async def _load_async(
        self, url: str, media_ios: Sequence[MediaIO[Any]], fetch_timeout: float | None
    ) -> list[MediaRef[Any]]:
        """The async driver: downloads on the running loop, reads and builds on the media pool."""
        plan = self._plan(url, media_ios, fetch_timeout)
        return await drivers.load_async(self.connection, url, plan, media_ios)

    # --- public API -----------------------------------------------------------------------------

    def load_from_url(
        self, url: str, media_io: MediaIO[_M], *, fetch_timeout: float | None = None
    ) -> MediaRef[_M]:
        """Fetch ``url`` and return ``media_io``'s lazy ref to it (timeout: the modality's)."""
        return self._load(url, (media_io,), fetch_timeout)[0]

    async def load_from_url_async(
        self, url: str, media_io: MediaIO[_M], *, fetch_timeout: float | None = None
    ) -> MediaRef[_M]:
        return (await self._load_async(url, (media_io,), fetch_timeout))[0]

    def fetch_image(
        self,
        image_url: str,
        media_io: MediaIO[_M] | None = None,
        *,
        image_mode: str | None = "RGB",
    ) -> MediaRef[Any]:
        """``media_io``'s lazy ref to the image at ``image_url``; without a decoder, vLLM's
        default one in ``image_mode`` (None: each image keeps its own)."""
        return self.load_from_url(
            image_url,
            self._or_default(media_io, lambda: default_image_io(image_mode, self.decoded_budget)),
        )

    async def fetch_image_async(
        self,
        image_url: str,
        media_io: MediaIO[_M] | None = None,
        *,
        image_mode: str | None = "RGB",
    ) -> MediaRef[Any]:
        return await self.load_from_url_async(
            image_url,
            self._or_default(media_io, lambda: default_image_io(image_mode, self.decoded_budget)),
        )

    def fetch_video(
        self,
        video_url: str,
        media_io: MediaIO[_M] | None = None,
        *,
        image_mode: str | None = "RGB",
        video_processor: str | None = None,
    ) -> MediaRef[Any]:
        """``media_io``'s lazy ref to the video at ``video_url``; without a decoder, vLLM's
        default one, on the loader backend bound to ``video_processor`` (an HF video processor
        class name) when there is one."""
        decoder = self._or_default(
            media_io, lambda: default_video_io(image_mode, video_processor, self.decoded_budget)
        )
        return self.load_from_url(video_url, decoder)

    async def fetch_video_async(
        self,
        video_url: str,
        media_io: MediaIO[_M] | None = None,
        *,
        image_mode: str | None = "RGB",
        video_processor: str | None = None,
    ) -> MediaRef[Any]:
        decoder = self._or_default(
            media_io, lambda: default_video_io(image_mode, video_processor, self.decoded_budget)
        )
        return await self.load_from_url_async(video_url, decoder)

    def fetch_audio(self, audio_url: str, media_io: MediaIO[_M] | None = None) -> MediaRef[Any]:
        """``media_io``'s lazy ref to the audio at ``audio_url``; without a decoder, vLLM's
        default one."""
        return self.load_from_url(
            audio_url, self._or_default(media_io, lambda: default_audio_io(self.decoded_budget))
        )

    async def fetch_audio_async(
        self, audio_url: str, media_io: MediaIO[_M] | None = None
    ) -> MediaRef[Any]:
        return await self.load_from_url_async(
            audio_url, self._or_default(media_io, lambda: default_audio_io(self.decoded_budget))
        )

    def fetch_image_embedding(self, data: str) -> torch.Tensor:
        """Base64 image embeddings (``.npy`` or ``torch.save``), loaded now, as in vLLM."""
        return load_embedding("image", data)

    async def fetch_image_embedding_async(self, data: str) -> torch.Tensor:
        return await self._on_media_pool(load_embedding, "image", data)

    def fetch_audio_embedding(self, data: str) -> torch.Tensor:
        return load_embedding("audio", data)

    async def fetch_audio_embedding_async(self, data: str) -> torch.Tensor:
        return await self._on_media_pool(load_embedding, "audio", data)

    def fetch_video_embedding(self, data: str) -> torch.Tensor:
        return load_embedding("video", data)

    async def fetch_video_embedding_async(self, data: str) -> torch.Tensor:
        return await self._on_media_pool(load_embedding, "video", data)

    @staticmethod
    def _or_default(
        media_io: MediaIO[_M] | None, default: Callable[[], MediaIO[Any]]
    ) -> MediaIO[Any]:
        """The caller's decoder, or vLLM's default one built now (a vLLM-style call brings none)."""
        return default() if media_io is None else media_io

    @staticmethod
    async def _on_media_pool(load: Callable[[str, str], _M], modality: str, data: str) -> _M:
        # Base64 decoding and unpickling are linear in the payload: off the event loop.
        return await drivers.on_media_pool(load, modality, data)

    def fetch_video_and_audio(
        self, video_url: str, video_io: MediaIO[_V], audio_io: MediaIO[_A]
    ) -> tuple[MediaRef[_V], MediaRef[_A]]:
        """One fetch, two refs: the video and the audio track read from the same payload.

        The shared fetch takes the strictest of the two size caps and the video fetch timeout; a
        ``file:`` URL is read once and a ``data:`` URL base64-decoded once, too.
        """
        video, audio = self._load(video_url, (video_io, audio_io), envs.VLLM_VIDEO_FETCH_TIMEOUT)
        return video, audio

    async def fetch_video_and_audio_async(
        self, video_url: str, video_io: MediaIO[_V], audio_io: MediaIO[_A]
    ) -> tuple[MediaRef[_V], MediaRef[_A]]:
        video, audio = await self._load_async(
            video_url, (video_io, audio_io), envs.VLLM_VIDEO_FETCH_TIMEOUT
        )
        return video, audio


# The decoders vLLM's module imports, re-exported on first use (mediaref.media.reexports):
# importing the connector pulls in none of Pillow, PyAV, soundfile or torch.
_EXPORTS = {
    "AudioEmbeddingMediaIO": "mediaref.media.audio",
    "AudioMediaIO": "mediaref.media.audio",
    "ImageEmbeddingMediaIO": "mediaref.media.image",
    "ImageMediaIO": "mediaref.media.image",
    "VideoEmbeddingMediaIO": "mediaref.media.video",
    "VideoMediaIO": "mediaref.media.video",
    "get_video_loader_backend_for_processor": "mediaref.media.video.loader_registry",
}

_reexport, __dir__ = lazy_exports(globals(), _EXPORTS)


def __getattr__(name: str) -> Any:
    # Built on first use rather than at import: the map imports every decoder, and the pool
    # starts threads sized by a setting read when the pool is first needed.
    if name == "MODALITY_IO_MAP":
        return modality_io_map()
    if name == "global_thread_pool":
        return get_media_executor()
    return _reexport(name)


__all__ = [
    "MEDIA_CONNECTOR_REGISTRY",
    "MODALITY_IO_MAP",
    "AudioEmbeddingMediaIO",
    "AudioMediaIO",
    "ImageEmbeddingMediaIO",
    "ImageMediaIO",
    "MediaConnector",
    "MediaRequestDownloadBudget",
    "MediaRequestDownloadSizeExceededError",
    "MediaRequestFetchScope",
    "MediaWithBytes",
    "VideoEmbeddingMediaIO",
    "VideoMediaIO",
    "get_video_loader_backend_for_processor",
    "global_thread_pool",
    "load_media_connector",
    "merge_media_io_kwargs",
]
