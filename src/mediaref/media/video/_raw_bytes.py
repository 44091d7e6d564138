"""The video decoder for models whose HF processor reopens the container itself."""

from __future__ import annotations

from typing import ClassVar

from mediaref import envs
from mediaref.media.base import (
    JPEG_FRAMES_MEDIA_TYPE,
    DecodeSpec,
    MediaIO,
    MediaRef,
    is_jpeg_frames,
)


def video_max_bytes() -> int | None:
    """``MEDIAREF_MAX_VIDEO_FILESIZE_MB`` in bytes; None (no cap) when it is 0 or less."""
    return envs.size_cap_bytes("MEDIAREF_MAX_VIDEO_FILESIZE_MB")


class RawBytesVideoMediaIO(MediaIO[bytes]):
    """``load_bytes`` is the identity: the "decoded" video is its encoded container.

    The spec says ``video_decode: "raw_bytes"``, so this choice lives in the key: a raw-bytes
    item never shares a cache entry with a frame decode of the same payload, and a cache hit and
    a miss hand the HF processor the same thing.
    """

    modality: ClassVar[str] = "video"

    def __init__(self) -> None:
        self._spec = DecodeSpec(
            modality=self.modality, decoder="raw_bytes", video_decode="raw_bytes"
        )

    def get_decode_spec(self) -> DecodeSpec:
        return self._spec

    def get_max_bytes(self) -> int | None:
        return video_max_bytes()

    def load_bytes(self, data: bytes) -> bytes:
        return data

    def load_base64(self, media_type: str, data: str) -> bytes:
        return self.load_base64_ref(media_type, data).decode()

    def load_base64_ref(self, media_type: str, data: str) -> MediaRef[bytes]:
        if is_jpeg_frames(media_type):
            # A frame sequence has no container to hand over. Like any payload that will not
            # decode, it fails at decode time, so the client gets the decode error (422).
            payload = data.encode("utf-8")
            self.check_encoded_size(len(payload))
            return MediaRef(payload, _refuse_jpeg_frames, self._spec.extend(media_type=media_type))
        return super().load_base64_ref(media_type, data)

    def __repr__(self) -> str:
        return "RawBytesVideoMediaIO()"


def _refuse_jpeg_frames() -> bytes:
    raise ValueError(
        "Failed to decode video: this model's video decoder takes an encoded container "
        f"(mp4, webm, ...), not a {JPEG_FRAMES_MEDIA_TYPE} frame sequence"
    )
