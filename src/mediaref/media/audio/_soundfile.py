"""The soundfile (libsndfile) audio backend: WAV, FLAC, Ogg Vorbis/Opus, MP3 and the other formats
``soundfile.available_formats()`` lists.

It is tried first because it is the fast path for the common formats and its header is cheap to
read, which is what lets the caps fire when a ref is built. libsndfile reads only the bytes it is
given (no nested files or URLs), so it needs none of the PyAV backend's allow-lists.
"""

from __future__ import annotations

import io
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import soundfile as sf

from mediaref.media.audio._caps import PCM_SAMPLE_BYTES, AudioLimits, check_stream_shape
from mediaref.media.audio._pcm import DecodeCharge, PcmBuffer

# What soundfile raises for bytes it cannot open or read: LibsndfileError and its kin derive from
# RuntimeError; ValueError and OSError cover the Python-side checks and the BytesIO adapter.
SOUNDFILE_ERRORS: tuple[type[Exception], ...] = (RuntimeError, ValueError, OSError, EOFError)

# libsndfile's frame count for a stream whose header leaves the length open (e.g. a FLAC written
# to a pipe, with total_samples = 0). It is "unknown", not "endless", so it must not trip a cap.
_SF_COUNT_MAX = 2**63 - 1

# Bytes read per call. soundfile reads into a (frames, channels) scratch block, which is then
# written into place in the output; bounding it in bytes (not frames) keeps a 255-channel header
# from making the scratch block itself large.
_BLOCK_BYTES = 4 << 20


class SoundHeader(NamedTuple):
    """What a header declares. ``frames`` is None when the header leaves the length open."""

    frames: int | None
    sample_rate: int
    channels: int


def describe_soundfile_error(exc: BaseException) -> str:
    # LibsndfileError's str() embeds the BytesIO repr ("Error opening <_io.BytesIO object at
    # 0x...>: ..."); its error_string is the part worth showing a client.
    reason = getattr(exc, "error_string", None)
    return str(reason) if reason else str(exc)


def read_header(data: bytes) -> SoundHeader | None:
    """The header's declared shape, or None if soundfile cannot read it.

    Opening a ``SoundFile`` parses the header only (no samples are decoded), so this is cheap
    enough to run when a ref is built.
    """
    try:
        with sf.SoundFile(io.BytesIO(data)) as sound_file:
            return _header(sound_file)
    except SOUNDFILE_ERRORS:
        return None


def _header(sound_file: sf.SoundFile) -> SoundHeader:
    frames: int = sound_file.frames
    return SoundHeader(
        frames if 0 <= frames < _SF_COUNT_MAX else None,
        sound_file.samplerate,
        sound_file.channels,
    )


def check_header(data: bytes, limits: AudioLimits) -> None:
    """Refuse, with ``MediaTooLargeError``, a clip whose header declares more than the caps allow.

    Headers soundfile cannot read (or that declare no length) are left to decode time.
    """
    header = read_header(data)
    if header is None or header.frames is None:
        return
    try:
        check_stream_shape(header.sample_rate, header.channels)
    except ValueError:
        return  # not a shape audio can have: decode time reports it
    limits.check_declared(header.frames, header.sample_rate, header.channels)


def decode_with_soundfile(
    data: bytes, limits: AudioLimits, charge: DecodeCharge | None = None
) -> tuple[npt.NDArray[np.float32], float]:
    """Decode ``data`` to float32 samples at the native rate: (n,) for mono, (channels, n) else.

    Raises ``MediaTooLargeError`` when the header declares, or the decode reaches, more than the
    caps allow (the header is not trusted to bound the work), and one of
    :data:`SOUNDFILE_ERRORS` if soundfile cannot decode the bytes.
    """
    with sf.SoundFile(io.BytesIO(data)) as sound_file:
        header = _header(sound_file)
        pcm = PcmBuffer(
            header.channels,
            header.sample_rate,
            limits,
            expected_frames=header.frames,
            charge=charge,
        )
        block_frames = max(1, _BLOCK_BYTES // (header.channels * PCM_SAMPLE_BYTES))
        block = np.empty((block_frames, header.channels), dtype=np.float32)
        while True:
            wanted = block_frames
            room = pcm.room()
            if room is not None:
                # Never ask for more than one frame past the caps: that frame is the proof of
                # excess, and PcmBuffer refuses the block that carries it.
                wanted = min(wanted, room + 1)
            chunk = sound_file.read(wanted, dtype="float32", always_2d=True, out=block[:wanted])
            if len(chunk) == 0:
                break
            pcm.append_interleaved(chunk)
    return pcm.result(), float(header.sample_rate)


__all__ = [
    "SOUNDFILE_ERRORS",
    "SoundHeader",
    "check_header",
    "decode_with_soundfile",
    "describe_soundfile_error",
    "read_header",
]
