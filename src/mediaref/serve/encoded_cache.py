"""Encoded tensors of recently sent items, so a processor-cache hit is not re-encoded.

With ``mm_payload: "tensors"`` every response carries each item's processed tensors in base64:
~17 MB for a 1080p image, ~20 ms of one core to build. A hit in the processor cache skips the
decode and the HF processor, but would still pay that. This LRU keeps the encoded form by
``(model, format, mm_hash, part, fields)`` within a byte budget (``--encoded-cache-mb``; 0: off).
An item's hash names its processed content (the payload, the decode settings and the processor
kwargs), and the key holds whatever else its encoding depends on (vLLM's format writes the
request's batch into a flat field), so the stored encoding is exactly what encoding it again
would give.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import cachetools

_Key = tuple[object, ...]


class EncodedItemCache:
    """Thread-safe: responses are built on worker threads."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._entries: cachetools.LRUCache[_Key, bytes] = cachetools.LRUCache(
            maxsize=max(capacity_bytes, 1), getsizeof=len
        )

    def get_or_encode(self, key: _Key, encode: Callable[[], bytes]) -> bytes:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self.hits += 1
                return found
            self.misses += 1
        encoded = encode()  # outside the lock: other responses keep reading
        if 0 < len(encoded) <= self.capacity_bytes:
            with self._lock:
                self._entries[key] = encoded
        return encoded


__all__ = ["EncodedItemCache"]
