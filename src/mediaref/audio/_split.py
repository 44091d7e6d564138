"""How long audio is, and splitting long mono audio into clips at quiet points, for models with a
clip-length limit."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.floating[Any]]


def get_audio_duration(*, y: FloatArray, sr: float = 22050) -> float:
    """Seconds of audio in ``y`` (time on the last axis) at ``sr`` Hz, as ``librosa.get_duration``."""
    return float(y.shape[-1]) / sr


def find_split_point(wav: FloatArray, start_idx: int, end_idx: int, min_energy_window: int) -> int:
    """The start of the quietest ``min_energy_window``-sample window in ``wav[start_idx:end_idx]``.

    Windows are laid end to end from ``start_idx`` and compared by RMS energy (a window whose
    energy is NaN never wins); the earliest of equally quiet windows wins. With no window that
    fits the region (only windows strictly shorter than the region count), ``start_idx``.
    """
    segment = np.asarray(wav[start_idx:end_idx])
    if min_energy_window <= 0:
        raise ValueError(f"min_energy_window must be positive, got {min_energy_window}")
    best_energy = math.inf
    best = start_idx
    for offset in range(0, len(segment) - min_energy_window, min_energy_window):
        window = segment[offset : offset + min_energy_window]
        energy = float(np.sqrt(np.mean(np.square(window))))
        if energy < best_energy:  # NaN compares False: never chosen
            best_energy, best = energy, start_idx + offset
    return best


def split_audio(
    audio_data: FloatArray,
    sample_rate: int,
    max_clip_duration_s: float,
    overlap_duration_s: float,
    min_energy_window_size: int,
) -> list[FloatArray]:
    """1-D ``audio_data`` cut into clips of at most ``max_clip_duration_s`` seconds.

    Each cut falls at the quietest point (:func:`find_split_point`) of the last
    ``overlap_duration_s`` seconds before the clip would run out; the last clip takes what is
    left. The clips are consecutive views that together cover the audio exactly. Multi-channel
    audio is a ``ValueError``: downmix it first.
    """
    if audio_data.ndim > 1:
        raise ValueError(f"split_audio expects mono audio, got shape {audio_data.shape}")
    total = audio_data.shape[-1]
    clip = int(sample_rate * max_clip_duration_s)
    overlap = int(sample_rate * overlap_duration_s)
    clips: list[FloatArray] = []
    start = 0
    while start < total:
        if start + clip >= total:
            clips.append(audio_data[start:])
            break
        cut = find_split_point(
            audio_data, start + clip - overlap, start + clip, min_energy_window_size
        )
        if cut <= start:  # no progress (an overlap as long as the clip): cut at the clip's end
            cut = start + clip
        clips.append(audio_data[start:cut])
        start = cut
    return clips


__all__ = ["find_split_point", "get_audio_duration", "split_audio"]
