"""The per-request download budget (``VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB``).

One connector serves one request, so the budget lives on the connector and is shared by all of
that request's http(s) downloads, concurrent ones included: bytes are charged as they arrive, and
the download that crosses the limit is cut off there. An attempt that fails gives its bytes back,
so a retried download is not charged twice. ``data:`` and ``file:`` payloads are not downloads and
are not charged; payloads served from the disk cache are, so the outcome does not depend on
whether the cache happened to hold them.
"""

from __future__ import annotations

import threading

from mediaref.media._transport.errors import TooLargeError


class DownloadBudget:
    """A thread-safe byte counter with a limit (``None``: unlimited)."""

    def __init__(self, limit_bytes: int | None) -> None:
        self.limit_bytes = limit_bytes
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        return self._used

    def remaining(self) -> int | None:
        if self.limit_bytes is None:
            return None
        with self._lock:
            return max(0, self.limit_bytes - self._used)

    def charge(self, size: int) -> None:
        """Take ``size`` bytes or raise without taking any."""
        with self._lock:
            if self.limit_bytes is not None and self._used + size > self.limit_bytes:
                raise TooLargeError(
                    f"the request's media downloads exceed its {self.limit_bytes}-byte budget"
                )
            self._used += size

    def refund(self, size: int) -> None:
        with self._lock:
            self._used -= size


__all__ = ["DownloadBudget"]
