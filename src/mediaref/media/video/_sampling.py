"""Which frames a sampled video decode keeps: vLLM's uniform and fps-capped sampling rules."""

from __future__ import annotations

import math

import numpy as np

ALL_FRAMES = -1


def validate_num_frames(num_frames: int) -> int:
    """``num_frames`` if it is -1 (every frame) or positive; a ValueError otherwise."""
    if isinstance(num_frames, bool) or not isinstance(num_frames, (int, np.integer)):
        raise TypeError(f"num_frames must be an int, got {type(num_frames).__name__}")
    if num_frames == 0 or num_frames < ALL_FRAMES:
        raise ValueError(
            f"num_frames must be -1 (every frame) or a positive count, got {num_frames}"
        )
    return int(num_frames)


def validate_fps(fps: float | None) -> float | None:
    """The sampling rate in frames per second, or None for no rate cap.

    vLLM spells "no rate cap" as ``fps=-1``; every negative value is taken that way, so a config
    written for vLLM keeps working and keys the same as one that says None.
    """
    if fps is None:
        return None
    if isinstance(fps, bool) or not isinstance(fps, (int, float, np.integer, np.floating)):
        raise TypeError(f"fps must be a number or None, got {type(fps).__name__}")
    fps = float(fps)
    if not math.isfinite(fps) or fps == 0:
        raise ValueError(f"fps must be positive (or negative/None for no cap), got {fps}")
    return None if fps < 0 else fps


def count_frames_to_sample(
    total_num_frames: int, num_frames: int, fps: float | None, duration: float
) -> int:
    """How many frames to keep: the smallest of the total, ``num_frames`` and duration * fps.

    At least one frame is kept from a non-empty video. When the video's duration is unknown (0,
    as when its rate is), the fps cap cannot be computed and is not applied; vLLM would keep a
    single frame then.
    """
    count = total_num_frames
    if num_frames > 0:
        count = min(count, num_frames)
    if fps is not None and fps > 0 and duration > 0:
        count = min(count, math.floor(duration * fps))
    return max(1, count) if total_num_frames > 0 else 0


def uniform_frame_indices(
    total_num_frames: int, num_frames: int, fps: float | None, duration: float
) -> list[int]:
    """The frame indices to keep, ascending and distinct, spread uniformly over the video.

    Every index when the count equals the total; otherwise ``linspace(0, total - 1, count)``
    truncated to ints, which is distinct because the count never exceeds the total.
    """
    count = count_frames_to_sample(total_num_frames, num_frames, fps, duration)
    if count == total_num_frames:
        return list(range(total_num_frames))
    indices: list[int] = np.linspace(0, total_num_frames - 1, count, dtype=int).tolist()
    return indices


def sample_frame_indices(
    total_num_frames: int, num_frames: int, fps: float | None, video_fps: float
) -> list[int]:
    """:func:`uniform_frame_indices` for a video of ``total_num_frames`` at ``video_fps``."""
    duration = total_num_frames / video_fps if video_fps > 0 else 0.0
    return uniform_frame_indices(total_num_frames, num_frames, fps, duration)
