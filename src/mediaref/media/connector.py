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

There is one implementation with two drivers. Planning (scheme dispatch and policy), reading a
local payload, the download coroutine and building refs are shared; the synchronous driver runs
the download on a private event loop thread (so it also works when called from a thread whose own
loop is running), the async driver awaits it and builds refs on the media pool, because deriving
a key is linear in the payload.

Errors are :mod:`mediaref.exceptions` types naming the URL and the reason: refused scheme, domain,
address or path -> ``MediaNotAllowedError``; over a cap or the budget -> ``MediaTooLargeError``;
404/410 or a missing file -> ``MediaNotFoundError``; another client fault (malformed URL or
base64, a ``file:`` URL naming no regular file) -> ``MediaClientError``; timeouts ->
``MediaTimeoutError``; 5xx (after retries), 429, dropped connections, malformed responses and
this server running out of descriptors -> ``MediaServerError``. The table is
``_transport/errors.py``. That holds for refs built from a ``video/jpeg`` data: URL too, whose
base64 text goes to the decoders as is: whatever decoder it reaches, malformed base64 is a 400.
"""

from __future__ import annotations

import asyncio
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from mediaref import envs
from mediaref.media._transport.budget import (
    MediaRequestDownloadBudget,
    MediaRequestDownloadSizeExceededError,
)
from mediaref.media._transport.data_url import DataURL, parse_data_url
from mediaref.media._transport.disk_cache import DiskCache
from mediaref.media._transport.errors import (
    RefusedError,
    map_transport_error,
    transport_errors,
)
from mediaref.media._transport.http_client import MediaHTTPClient, default_http_client
from mediaref.media._transport.http_download import DownloadRequest, download
from mediaref.media._transport.local_file import LocalMediaRoot
from mediaref.media._transport.loop_thread import run_sync
from mediaref.media._transport.url_policy import HTTP_SCHEMES, URLPolicy, parse_http_url
from mediaref.media.base import MediaIO, MediaRef, is_jpeg_frames
from mediaref.media.executor import get_media_executor
from mediaref.media.extensions import ExtensionManager

_M = TypeVar("_M")
_V = TypeVar("_V")
_A = TypeVar("_A")

_FETCH_TIMEOUT_SETTINGS = {
    "image": "VLLM_IMAGE_FETCH_TIMEOUT",
    "video": "VLLM_VIDEO_FETCH_TIMEOUT",
    "audio": "VLLM_AUDIO_FETCH_TIMEOUT",
}
_MAX_SCHEME_CHARS = 32


def _scheme_of(url: str) -> str:
    # Only the first few characters are looked at: a data: URL can be megabytes long, and
    # partition() or "in" would copy or scan all of it.
    colon = url.find(":", 0, _MAX_SCHEME_CHARS)
    return url[:colon].lower() if colon > 0 else ""


def _smallest(*caps: int | None) -> int | None:
    present = [cap for cap in caps if cap is not None]
    return min(present) if present else None


def _strictest_max_bytes(media_ios: Sequence[MediaIO[Any]]) -> int | None:
    """The smallest encoded-size cap among ``media_ios`` (None when none of them has one)."""
    return _smallest(*(io.get_max_bytes() for io in media_ios))


def _download_max_bytes(decoder_max_bytes: int | None) -> int | None:
    """A download's cap: ``VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB`` or the decoders', if smaller."""
    return _smallest(envs.size_cap_bytes("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB"), decoder_max_bytes)


def _fetch_timeout_seconds(media_io: MediaIO[Any]) -> float:
    setting = _FETCH_TIMEOUT_SETTINGS.get(media_io.modality, "VLLM_IMAGE_FETCH_TIMEOUT")
    return float(getattr(envs, setting))


def _disk_cache_from_env() -> DiskCache | None:
    directory = envs.VLLM_MEDIA_CACHE
    if directory is None:
        return None
    return DiskCache(
        directory,
        max_bytes=envs.size_cap_bytes("VLLM_MEDIA_CACHE_MAX_SIZE_MB") or 0,
        ttl_seconds=envs.VLLM_MEDIA_CACHE_TTL_HOURS * 3600.0,
    )


@dataclass(frozen=True)
class _Payload:
    """What the transport produced: the bytes, or a base64 form that the decoders take as is."""

    data: bytes = b""
    base64_form: DataURL | None = None

    def build_refs(self, media_ios: Sequence[MediaIO[Any]]) -> list[MediaRef[Any]]:
        form = self.base64_form
        if form is None:
            # One payload, one ref per decoder: the bytes are shared, not copied.
            return [io.load_bytes_ref(self.data) for io in media_ios]
        text = form.base64_text
        refs: list[MediaRef[Any]] = []
        for io in media_ios:
            try:
                refs.append(io.load_base64_ref(form.media_type, text))
            except binascii.Error as exc:
                # A decoder without a base64-frames form decodes the text at once; malformed
                # base64 is then the client's, as for every other data: URL, whatever decoder
                # (and wherever it runs) found it.
                raise map_transport_error(exc, form.url) from exc
        return refs


# A planned load: an http(s) download, or a local read to run where blocking is acceptable.
_Plan = DownloadRequest | Callable[[], _Payload]

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
    ``allow_private_ips`` (default ``VLLM_MEDIA_URL_ALLOW_PRIVATE_IPS``, read per fetch) permits
    loopback, private, link-local and other non-public addresses. ``download_budget`` is the
    request's :class:`MediaRequestDownloadBudget`, shared by its downloads (None: no request-wide
    limit; each download still has its own cap).
    """

    def __init__(
        self,
        connection: MediaHTTPClient | None = None,
        *,
        allowed_local_media_path: str = "",
        allowed_media_domains: Sequence[str] | None = None,
        allow_private_ips: bool | None = None,
        download_budget: MediaRequestDownloadBudget | None = None,
    ) -> None:
        self.connection = connection if connection is not None else default_http_client()
        self.allowed_local_media_path = allowed_local_media_path
        self.allowed_media_domains = list(allowed_media_domains) if allowed_media_domains else None
        self.allow_private_ips = allow_private_ips
        self._local_root = (
            LocalMediaRoot(allowed_local_media_path) if allowed_local_media_path else None
        )
        self.download_budget = download_budget

    # --- the shared core ------------------------------------------------------------------------

    def _url_policy(self) -> URLPolicy:
        allow_private = self.allow_private_ips
        if allow_private is None:
            allow_private = envs.VLLM_MEDIA_URL_ALLOW_PRIVATE_IPS
        return URLPolicy.build(self.allowed_media_domains, allow_private_ips=allow_private)

    def _plan(
        self, url: str, media_ios: Sequence[MediaIO[Any]], fetch_timeout: float | None
    ) -> _Plan:
        """Dispatch on the scheme and check the policy; no payload is read yet."""
        max_bytes = _strictest_max_bytes(media_ios)
        scheme = _scheme_of(url)
        with transport_errors(url):
            if scheme == "data":
                return lambda: self._read_data_url(url, max_bytes)
            if scheme == "file":
                root = self._local_root
                if root is None:
                    raise RefusedError("file: URLs are disabled (set allowed_local_media_path)")
                return lambda: self._read_file_url(root, url, max_bytes)
            if scheme in HTTP_SCHEMES:
                return DownloadRequest(
                    requested_url=url,
                    url=parse_http_url(url),
                    policy=self._url_policy(),
                    allow_redirects=envs.VLLM_MEDIA_URL_ALLOW_REDIRECTS,
                    max_bytes=_download_max_bytes(max_bytes),
                    timeout_seconds=(
                        fetch_timeout
                        if fetch_timeout is not None
                        else _fetch_timeout_seconds(media_ios[0])
                    ),
                    retries=max(1, envs.VLLM_MEDIA_FETCH_MAX_RETRIES) - 1,
                    budget=self.download_budget,
                    cache=_disk_cache_from_env(),
                )
            raise RefusedError(
                f"unsupported URL scheme {scheme!r} (use data:, file:, http: or https:)"
            )

    @staticmethod
    def _read_data_url(url: str, max_bytes: int | None) -> _Payload:
        with transport_errors(url):
            parsed = parse_data_url(url)
            if is_jpeg_frames(parsed.media_type):  # the video decoder owns that form
                parsed.check_size(max_bytes)  # the frames' decoded size, bounded without decoding
                return _Payload(base64_form=parsed)
            # Decoded once here, however many decoders share the payload.
            return _Payload(parsed.decode(max_bytes))

    @staticmethod
    def _read_file_url(root: LocalMediaRoot, url: str, max_bytes: int | None) -> _Payload:
        with transport_errors(url):
            return _Payload(root.read(root.resolve(url), max_bytes))

    def _load(
        self, url: str, media_ios: Sequence[MediaIO[Any]], fetch_timeout: float | None
    ) -> list[MediaRef[Any]]:
        """The synchronous driver."""
        plan = self._plan(url, media_ios, fetch_timeout)
        if isinstance(plan, DownloadRequest):
            # Starting the private loop can fail too (no descriptors left for its self-pipe).
            with transport_errors(url):
                payload = _Payload(run_sync(download(self.connection, plan)))
        else:
            payload = plan()
        return payload.build_refs(media_ios)

    async def _load_async(
        self, url: str, media_ios: Sequence[MediaIO[Any]], fetch_timeout: float | None
    ) -> list[MediaRef[Any]]:
        """The async driver: downloads on the running loop, reads and builds on the media pool."""
        plan = self._plan(url, media_ios, fetch_timeout)
        if isinstance(plan, DownloadRequest):
            payload = _Payload(await download(self.connection, plan))
            return await self._load_refs_async(lambda: payload.build_refs(media_ios))
        read_local = plan
        return await self._load_refs_async(lambda: read_local().build_refs(media_ios))

    async def _load_refs_async(
        self, build: Callable[[], list[MediaRef[Any]]]
    ) -> list[MediaRef[Any]]:
        """Build refs on the media pool: deriving a key is linear in the payload."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(get_media_executor(), build)

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

    def fetch_image(self, image_url: str, media_io: MediaIO[_M]) -> MediaRef[_M]:
        return self.load_from_url(image_url, media_io)

    async def fetch_image_async(self, image_url: str, media_io: MediaIO[_M]) -> MediaRef[_M]:
        return await self.load_from_url_async(image_url, media_io)

    def fetch_video(self, video_url: str, media_io: MediaIO[_M]) -> MediaRef[_M]:
        return self.load_from_url(video_url, media_io)

    async def fetch_video_async(self, video_url: str, media_io: MediaIO[_M]) -> MediaRef[_M]:
        return await self.load_from_url_async(video_url, media_io)

    def fetch_audio(self, audio_url: str, media_io: MediaIO[_M]) -> MediaRef[_M]:
        return self.load_from_url(audio_url, media_io)

    async def fetch_audio_async(self, audio_url: str, media_io: MediaIO[_M]) -> MediaRef[_M]:
        return await self.load_from_url_async(audio_url, media_io)

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


__all__ = [
    "MEDIA_CONNECTOR_REGISTRY",
    "MediaConnector",
    "MediaRequestDownloadBudget",
    "MediaRequestDownloadSizeExceededError",
    "load_media_connector",
]
