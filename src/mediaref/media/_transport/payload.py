"""What the connector's planning needs beside the transport itself: the scheme of a URL, the
size caps and timeout of a fetch, the disk cache from the settings, and the fetched payload that
becomes one ref per decoder.
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mediaref import envs
from mediaref.media._transport.data_url import DataURL
from mediaref.media._transport.disk_cache import DiskCache
from mediaref.media._transport.errors import map_transport_error
from mediaref.media.base import MediaIO, MediaRef

_FETCH_TIMEOUT_SETTINGS = {
    "image": "VLLM_IMAGE_FETCH_TIMEOUT",
    "video": "VLLM_VIDEO_FETCH_TIMEOUT",
    "audio": "VLLM_AUDIO_FETCH_TIMEOUT",
}
_MAX_SCHEME_CHARS = 32


def scheme_of(url: str) -> str:
    # Only the first few characters are looked at: a data: URL can be megabytes long, and
    # partition() or "in" would copy or scan all of it.
    colon = url.find(":", 0, _MAX_SCHEME_CHARS)
    return url[:colon].lower() if colon > 0 else ""


def smallest(*caps: int | None) -> int | None:
    present = [cap for cap in caps if cap is not None]
    return min(present) if present else None


def strictest_max_bytes(media_ios: Sequence[MediaIO[Any]]) -> int | None:
    """The smallest encoded-size cap among ``media_ios`` (None when none of them has one)."""
    return smallest(*(io.get_max_bytes() for io in media_ios))


def download_max_bytes(decoder_max_bytes: int | None) -> int | None:
    """A download's cap: ``VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB`` or the decoders', if smaller."""
    return smallest(envs.size_cap_bytes("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB"), decoder_max_bytes)


def fetch_timeout_seconds(media_io: MediaIO[Any]) -> float:
    setting = _FETCH_TIMEOUT_SETTINGS.get(media_io.modality, "VLLM_IMAGE_FETCH_TIMEOUT")
    return float(getattr(envs, setting))


def disk_cache_from_env() -> DiskCache | None:
    directory = envs.VLLM_MEDIA_CACHE
    if directory is None:
        return None
    return DiskCache(
        directory,
        max_bytes=envs.size_cap_bytes("VLLM_MEDIA_CACHE_MAX_SIZE_MB") or 0,
        ttl_seconds=envs.VLLM_MEDIA_CACHE_TTL_HOURS * 3600.0,
    )


@dataclass(frozen=True)
class Payload:
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


__all__ = [
    "Payload",
    "disk_cache_from_env",
    "download_max_bytes",
    "fetch_timeout_seconds",
    "scheme_of",
    "smallest",
    "strictest_max_bytes",
]
