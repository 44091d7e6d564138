"""The PyAV codec, mediaref's default, beside vLLM's codecs (the code is in
:mod:`mediaref.media.video.decoders.pyav`)."""

from __future__ import annotations

from mediaref.media.video.decoders.pyav import (
    PyAVDecodeResult,
    decode_pyav,
    decode_pyav_detailed,
)

__all__ = ["PyAVDecodeResult", "decode_pyav", "decode_pyav_detailed"]
