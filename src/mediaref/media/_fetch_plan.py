"""What fetching one URL takes, decided before any payload is read: the connector's scheme
dispatch, policy checks and local reads.

:func:`plan_fetch` settles up front everything a fetch needs, so that the connector's two drivers
(:mod:`._fetch_drivers`) only run what it decided, and a refused URL costs no I/O:

- ``http(s):`` becomes a :class:`~mediaref.media._transport.http_download.DownloadRequest`: the
  URL parsed, the domain and address policy (:func:`url_policy`), the redirect setting, the
  download cap (``VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB`` or the strictest decoder cap), the timeout
  and retries, the request's download budget and fetch scope, the disk cache;
- ``data:`` and ``file:`` (the latter only under the connector's allowed local path) become a
  local read, run later where blocking is acceptable (:func:`read_data_url`,
  :func:`read_file_url`), capped at the strictest decoder cap;
- any other scheme is refused.

Settings are read per fetch, not when the connector is built. Errors are
:mod:`mediaref.exceptions` types naming the URL (``_transport/errors.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mediaref import envs
from mediaref.media._transport.budget import MediaRequestDownloadBudget
from mediaref.media._transport.data_url import parse_data_url
from mediaref.media._transport.errors import RefusedError, transport_errors
from mediaref.media._transport.http_download import DownloadRequest
from mediaref.media._transport.local_file import LocalMediaRoot
from mediaref.media._transport.payload import (
    Payload,
    disk_cache_from_env,
    download_max_bytes,
    fetch_timeout_seconds,
    scheme_of,
    strictest_max_bytes,
)
from mediaref.media._transport.request_scope import MediaRequestFetchScope
from mediaref.media._transport.url_policy import HTTP_SCHEMES, URLPolicy, parse_http_url
from mediaref.media.base import MediaIO, is_jpeg_frames

FetchPlan = DownloadRequest | Callable[[], Payload]
"""A planned load: an http(s) download, or a local read to run where blocking is acceptable."""


def url_policy(
    allowed_media_domains: Sequence[str] | None, allow_private_ips: bool | None
) -> URLPolicy:
    """The http(s) policy: hosts in ``allowed_media_domains`` (None or empty: any host), and
    non-public addresses as ``allow_private_ips`` says (None:
    ``MEDIAREF_MEDIA_URL_ALLOW_PRIVATE_IPS``, read now)."""
    allow_private = allow_private_ips
    if allow_private is None:
        allow_private = envs.MEDIAREF_MEDIA_URL_ALLOW_PRIVATE_IPS
    return URLPolicy.build(allowed_media_domains, allow_private_ips=allow_private)


def plan_fetch(
    url: str,
    media_ios: Sequence[MediaIO[Any]],
    fetch_timeout: float | None,
    *,
    local_root: LocalMediaRoot | None,
    policy: Callable[[], URLPolicy],
    download_budget: MediaRequestDownloadBudget | None,
    fetch_scope: MediaRequestFetchScope | None,
) -> FetchPlan:
    """Dispatch on the scheme and check the policy; no payload is read yet.

    ``local_root`` is the connector's allowed local path (None: ``file:`` URLs are refused);
    ``policy`` builds the http(s) policy, called only for an http(s) URL; ``fetch_timeout``
    (None: the first decoder's modality's fetch timeout) is per attempt.
    """
    max_bytes = strictest_max_bytes(media_ios)
    scheme = scheme_of(url)
    with transport_errors(url):
        if scheme == "data":
            return lambda: read_data_url(url, max_bytes)
        if scheme == "file":
            root = local_root
            if root is None:
                raise RefusedError("file: URLs are disabled (set allowed_local_media_path)")
            return lambda: read_file_url(root, url, max_bytes)
        if scheme in HTTP_SCHEMES:
            return DownloadRequest(
                requested_url=url,
                url=parse_http_url(url),
                policy=policy(),
                allow_redirects=envs.VLLM_MEDIA_URL_ALLOW_REDIRECTS,
                max_bytes=download_max_bytes(max_bytes),
                timeout_seconds=(
                    fetch_timeout
                    if fetch_timeout is not None
                    else fetch_timeout_seconds(media_ios[0])
                ),
                retries=max(1, envs.VLLM_MEDIA_FETCH_MAX_RETRIES) - 1,
                budget=download_budget,
                cache=disk_cache_from_env(),
                scope=fetch_scope,
            )
        raise RefusedError(f"unsupported URL scheme {scheme!r} (use data:, file:, http: or https:)")


def read_data_url(url: str, max_bytes: int | None) -> Payload:
    """A ``data:`` URL's payload: its bytes, or for ``video/jpeg`` frames the base64 form that
    the video decoder takes as is."""
    with transport_errors(url):
        parsed = parse_data_url(url)
        if is_jpeg_frames(parsed.media_type):  # the video decoder owns that form
            parsed.check_size(max_bytes)  # the frames' decoded size, bounded without decoding
            return Payload(base64_form=parsed)
        # Decoded once here, however many decoders share the payload.
        return Payload(parsed.decode(max_bytes))


def read_file_url(root: LocalMediaRoot, url: str, max_bytes: int | None) -> Payload:
    """A ``file:`` URL's bytes, read only if it names a file under ``root``."""
    with transport_errors(url):
        return Payload(root.read(root.resolve(url), max_bytes))


__all__ = ["FetchPlan", "plan_fetch", "read_data_url", "read_file_url", "url_policy"]
