"""A test-local decoder for connector tests: its decode returns the payload bytes unchanged.

The connector is transport only, so its tests need a MediaIO but not a real codec. This one
counts how refs are built (bytes vs base64 form) so tests can see what the connector handed it.
"""

from __future__ import annotations

import threading
from typing import ClassVar

from mediaref.media.base import DecodeSpec, MediaIO, MediaRef


class RawMediaIO(MediaIO[bytes]):
    """Decodes to the payload itself. ``max_bytes`` is its encoded-size cap (None: uncapped)."""

    modality: ClassVar[str] = "image"

    def __init__(self, *, max_bytes: int | None = None, tag: str = "raw") -> None:
        self.max_bytes = max_bytes
        self.tag = tag
        self.bytes_refs = 0
        self.base64_refs = 0
        self._lock = threading.Lock()

    def load_bytes(self, data: bytes) -> bytes:
        return data

    def get_decode_spec(self) -> DecodeSpec:
        return DecodeSpec(modality=self.modality, decoder=self.tag)

    def get_max_bytes(self) -> int | None:
        return self.max_bytes

    def load_bytes_ref(self, data: bytes) -> MediaRef[bytes]:
        with self._lock:
            self.bytes_refs += 1
        return super().load_bytes_ref(data)

    def load_base64_ref(self, media_type: str, data: str) -> MediaRef[bytes]:
        with self._lock:
            self.base64_refs += 1
        return super().load_base64_ref(media_type, data)


class RawVideoIO(RawMediaIO):
    modality: ClassVar[str] = "video"


class RawAudioIO(RawMediaIO):
    modality: ClassVar[str] = "audio"
