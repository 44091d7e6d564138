"""The soundfile (libsndfile) audio backend: WAV, FLAC, Ogg Vorbis/Opus, MP3 and the other formats
``soundfile.available_formats()`` lists.

It is tried first because it is the fast path for the common formats and its header is cheap to
read, which is what lets the duration cap fire when a ref is built.
"""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt
import soundfile as sf  # type: ignore[import-untyped]

from mediaref.media._audio_caps import duration_exceeded, max_frames

# What soundfile raises for bytes it cannot open or read: LibsndfileError and its kin derive from
# RuntimeError; ValueError and OSError cover the Python-side checks and the BytesIO adapter.
SOUNDFILE_ERRORS: tuple[type[Exception], ...] = (RuntimeError, ValueError, OSError, EOFError)

# libsndfile's frame count for a stream whose header leaves the length open (e.g. a FLAC written
# to a pipe, with total_samples = 0). It is "unknown", not "endless", so it must not trip the cap.
_SF_COUNT_MAX = 2**63 - 1

# Frames read per call: one call for any clip up to ~22 s at 48 kHz, and a bound on what a header
# can make us allocate before the data has shown it exists.
_BLOCK_FRAMES = 1 << 20


def describe_soundfile_error(exc: BaseException) -> str:
    # LibsndfileError's str() embeds the BytesIO repr ("Error opening <_io.BytesIO object at
    # 0x...>: ..."); its error_string is the part worth showing a client.
    reason = getattr(exc, "error_string", None)
    return str(reason) if reason else str(exc)


def header_duration_s(data: bytes) -> float | None:
    """The duration the header declares, or None if soundfile cannot read it or it is open-ended.

    Opening a ``SoundFile`` parses the header only (no samples are decoded), so this is cheap
    enough to run when a ref is built.
    """
    try:
        with sf.SoundFile(io.BytesIO(data)) as sound_file:
            frames: int = sound_file.frames
            sample_rate: int = sound_file.samplerate
    except SOUNDFILE_ERRORS:
        return None
    if frames >= _SF_COUNT_MAX or sample_rate <= 0:
        return None
    return frames / sample_rate


def decode_with_soundfile(
    data: bytes, max_duration_s: float | None
) -> tuple[npt.NDArray[np.float32], float]:
    """Decode ``data`` to float32 samples at the native rate: (n,) for mono, (channels, n) else.

    Raises ``MediaTooLargeError`` once more than ``max_duration_s`` has been read, whatever the
    header said, and one of :data:`SOUNDFILE_ERRORS` if soundfile cannot decode the bytes.
    """
    with sf.SoundFile(io.BytesIO(data)) as sound_file:
        sample_rate = float(sound_file.samplerate)
        channels = sound_file.channels
        blocks = _read_blocks(sound_file, max_duration_s)
    if not blocks:
        empty = np.zeros((channels, 0) if channels > 1 else (0,), dtype=np.float32)
        return empty, sample_rate
    frames = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
    if channels == 1:
        return frames[:, 0], sample_rate  # (n, 1) -> (n,): a contiguous view, no copy
    # soundfile yields (frames, channels); the convention is (channels, frames), contiguous per
    # channel since resamplers and feature extractors walk one channel at a time.
    return np.ascontiguousarray(frames.T), sample_rate


def _read_blocks(
    sound_file: sf.SoundFile, max_duration_s: float | None
) -> list[npt.NDArray[np.float32]]:
    cap = max_frames(max_duration_s, sound_file.samplerate)
    declared = sound_file.frames
    block = min(declared, _BLOCK_FRAMES) if 0 < declared < _SF_COUNT_MAX else _BLOCK_FRAMES
    blocks: list[npt.NDArray[np.float32]] = []
    total = 0
    while True:
        # Never ask for more than one frame past the cap: that frame is the proof of excess, and
        # the header's frame count is not trusted to bound the work.
        wanted = block if cap is None else min(block, cap + 1 - total)
        chunk = sound_file.read(wanted, dtype="float32", always_2d=True)
        if len(chunk) == 0:
            return blocks
        blocks.append(chunk)
        total += len(chunk)
        if cap is not None and total > cap:
            assert max_duration_s is not None
            raise duration_exceeded(max_duration_s, total / sound_file.samplerate, decoded=True)


__all__ = [
    "SOUNDFILE_ERRORS",
    "decode_with_soundfile",
    "describe_soundfile_error",
    "header_duration_s",
]
