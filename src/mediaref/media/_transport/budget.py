"""The per-request download budget (``VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB``), as in vLLM.

A budget belongs to one request, not to a connector: whoever handles a request makes one
(the chat item tracker does, per request) and hands it to the connector it builds with
``MediaConnector(..., download_budget=budget)``; a connector without one has no request-wide limit
(each download still has its own cap, ``VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB``). So a long-lived
connector reused across requests never runs out.

All of the request's http(s) downloads share it, concurrent ones included: bytes are charged as
they arrive, and the download that crosses the limit is cut off there. As in vLLM, bytes count
"including retried attempts": a failed attempt does not give its bytes back. The budget bounds
what one request can make this server download, and an origin that fails after sending most of a
payload is exactly the one that should not get to send it three times. ``data:`` and ``file:``
payloads are not downloads and are not charged; payloads served from the disk cache are, so the
outcome does not depend on whether the cache happened to hold them.
"""

from __future__ import annotations

import threading

from mediaref import envs
from mediaref.exceptions import MediaTooLargeError

_UNSET: object = object()


class MediaRequestDownloadSizeExceededError(MediaTooLargeError):
    """All HTTP media downloads of one request exceed its budget (HTTP 413)."""


class MediaRequestDownloadBudget:
    """Thread-safe total of the HTTP media bytes received for one request.

    ``limit_bytes`` defaults to ``VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB`` read when the budget
    is made (one request, one limit); ``None`` or a setting of 0 means no limit.
    """

    def __init__(self, limit_bytes: int | object | None = _UNSET) -> None:
        if limit_bytes is _UNSET:
            limit_bytes = envs.size_cap_bytes("VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB")
        if limit_bytes is not None and not isinstance(limit_bytes, int):
            raise TypeError(f"limit_bytes must be an int or None, not {type(limit_bytes).__name__}")
        self.limit_bytes: int | None = limit_bytes
        self.used = 0
        self._lock = threading.Lock()

    def charge(self, size: int) -> None:
        """Count ``size`` more bytes, or raise without counting any if that crosses the limit."""
        with self._lock:
            received = self.used + size
            if self.limit_bytes is not None and received > self.limit_bytes:
                raise MediaRequestDownloadSizeExceededError(
                    "Request media downloads exceed VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB "
                    f"({self.limit_bytes}-byte budget; {received} bytes received, including "
                    "retried attempts)"
                )
            self.used = received


__all__ = ["MediaRequestDownloadBudget", "MediaRequestDownloadSizeExceededError"]
