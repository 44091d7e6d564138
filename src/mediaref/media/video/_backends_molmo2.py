"""Molmo2's loader: its HF processor's frame sampling, by uniform spread or by frame rate.

``frame_sample_mode`` chooses the rule (None: every frame):

``"uniform_last_frame"``
    ``num_frames`` frames spread evenly from the first frame to the last; with ``max_fps``, a
    video short enough to be sampled at that rate is sampled at it instead, last frame included.
``"fps"``
    the densest rate that divides the video's rate, is a multiple of the sampling rate (the
    request's ``sampling_fps``) and is at most 8 fps, whose frames still fit in ``num_frames``;
    when none fits, ``num_frames`` frames spread evenly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from mediaref.media.video._backend import check_codec_options, decode_sample, sample_metadata
from mediaref.media.video.decoders.base import VideoSourceMetadata, VideoTargetMetadata
from mediaref.media.video.loader_registry import (
    VIDEO_LOADER_REGISTRY,
    DecodedFrames,
    VideoLoader,
    VideoMetadata,
)

_MODES = ("uniform_last_frame", "fps")


class UnsupportedSamplingModeError(ValueError, NotImplementedError):
    """A ``frame_sample_mode`` Molmo2 does not know (vLLM raises NotImplementedError)."""


@VIDEO_LOADER_REGISTRY.register("molmo2", video_processor="Molmo2VideoProcessor")
class Molmo2VideoBackend(VideoLoader):
    """Molmo2 (``Molmo2VideoProcessor``). Options: ``frame_sample_mode``, ``max_fps`` (2) and
    ``sampling_fps`` (2); the codec is the ``backend`` option (``pyav`` by default)."""

    decoder_version: ClassVar[str] = "molmo2/1"
    sampling_options: ClassVar[frozenset[str]] = frozenset(
        {"frame_sample_mode", "max_fps", "sampling_fps", "frame_recovery", "backend"}
    )

    @classmethod
    def get_candidate_target_fps(
        cls, video_fps: float, sampling_fps: float, max_fps: float = 8.0
    ) -> list[float]:
        """The rates, up to ``max_fps``, that are multiples of ``sampling_fps`` and divide
        ``video_fps`` (all taken as whole numbers): 6 and 2 give [2.0, 6.0].

        ValueError unless both rates are positive and ``sampling_fps`` divides ``video_fps``.
        """
        if sampling_fps is None:
            raise ValueError("sampling_fps must be provided")
        video, sampling, ceiling = int(video_fps), int(sampling_fps), int(max_fps)
        if video <= 0 or sampling <= 0:
            raise ValueError(
                f"video_fps and sampling_fps must be positive (got {video}, {sampling})"
            )
        if video % sampling:
            raise ValueError(f"sampling_fps={sampling} must divide video_fps={video}.")
        multiples = range(sampling, min(video, ceiling) + 1, sampling)
        return [float(rate) for rate in multiples if video % rate == 0]

    @classmethod
    def get_target_fps(
        cls,
        video_fps: float,
        max_frames: int,
        total_frames: int,
        frame_sample_mode: str,
        candidate_target_fps: list[float],
    ) -> float | None:
        """Of ``candidate_target_fps`` (ascending), the rate sampling the most frames within
        ``max_frames``; the first candidate even over it, unless the mode is uniform; None
        when no candidate qualifies."""
        chosen: float | None = None
        chosen_count = 0
        for rate in candidate_target_fps:
            count = total_frames // max(int(video_fps / rate), 1)
            if chosen_count == 0:
                if "uniform" in frame_sample_mode and count > max_frames:
                    break
                chosen, chosen_count = rate, count
            elif chosen_count < count <= max_frames:
                chosen, chosen_count = rate, count
        return chosen

    @classmethod
    def get_frame_times_and_chosen_fps(
        cls,
        selected_target_fps: float | None,
        total_frames: int,
        max_frames: int,
        video_fps: float,
    ) -> tuple[float | None, npt.NDArray[Any]]:
        """The rate and the frame indices it samples (every ``video_fps / rate``-th frame, at
        most ``max_frames``); without a rate, ``max_frames`` indices spread over the video."""
        if selected_target_fps is None:
            indices = np.linspace(0, total_frames, max_frames, endpoint=False, dtype=int)
        else:
            indices = np.arange(0, total_frames, max(int(video_fps / selected_target_fps), 1))
        return selected_target_fps, indices[:max_frames]

    @classmethod
    def sample_times(
        cls,
        duration: float,
        max_frames: int,
        frame_sample_mode: str,
        max_fps: int | None,
        candidate_target_fps: list[float] | None = None,
        **kwargs: Any,
    ) -> npt.NDArray[Any]:
        """The timestamps (seconds) the processor samples from a video of ``duration``."""
        if frame_sample_mode == "fps":
            if not candidate_target_fps:
                raise ValueError("the 'fps' mode needs candidate_target_fps")
            # The fastest candidate whose max_frames still span the whole video.
            rate = candidate_target_fps[0]
            for candidate in candidate_target_fps[1:]:
                if max_frames / candidate < duration:
                    break
                rate = candidate
            times = np.arange(0, max_frames) / rate
            result: npt.NDArray[Any] = times[times < duration]
            return result
        if frame_sample_mode == "uniform_last_frame":
            if max_fps is not None and (max_frames - 1) / max_fps >= duration:
                stepped = np.arange(0.0, stop=duration, step=1 / max_fps)
                return np.concatenate([stepped, [duration]], axis=0)
            return np.linspace(0, duration, num=max_frames, endpoint=True, dtype=np.float64)
        raise UnsupportedSamplingModeError(frame_sample_mode)

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        mode = kwargs.get("frame_sample_mode")
        total = source.total_frames_num
        if mode is None:
            return list(range(total))
        if mode not in _MODES:
            raise UnsupportedSamplingModeError(f"Unsupported frame_sample_mode: {mode}")
        num_frames, max_fps = target.num_frames, kwargs.get("max_fps")
        if mode == "fps":
            candidates = cls.get_candidate_target_fps(source.original_fps, target.fps)
            rate = cls.get_target_fps(source.original_fps, num_frames, total, mode, candidates)
            _, indices = cls.get_frame_times_and_chosen_fps(
                rate, total, num_frames, source.original_fps
            )
        elif max_fps is not None and total <= 2:
            indices = np.arange(total)
        elif max_fps is None or source.duration > (num_frames - 1) / max_fps:
            count = min(num_frames, total)
            indices = np.linspace(0, total - 1, num=count, endpoint=True).astype(int)
        else:
            # Short enough for max_fps: a frame every video_fps / max_fps, and the last one.
            stepped = np.arange(0.0, stop=total - 1, step=float(source.original_fps / max_fps))
            if np.round(stepped[-1]) != total - 1:
                stepped = np.concatenate([stepped, [total - 1]], axis=0)
            indices = np.round(stepped).astype(int)
        result: list[int] = indices.tolist()
        return result

    @classmethod
    def load_bytes_opencv(
        cls,
        data: bytes,
        frame_sample_mode: str | None = None,
        num_frames: int = -1,
        max_fps: int = 2,
        sampling_fps: int = 2,
        frame_recovery: bool = False,
        **kwargs: Any,
    ) -> tuple[DecodedFrames, VideoMetadata]:
        """:meth:`load_bytes` decoded with OpenCV (needs ``cv2``)."""
        return cls._load(
            data, frame_sample_mode, num_frames, max_fps, sampling_fps, frame_recovery, "opencv"
        )

    @classmethod
    def load_bytes(
        cls, data: bytes, num_frames: int = -1, **kwargs: Any
    ) -> tuple[DecodedFrames, VideoMetadata]:
        """``(frames, metadata)`` of Molmo2's sample of ``data``; other options are ignored."""
        return cls._load(
            data,
            kwargs.get("frame_sample_mode"),
            num_frames,
            kwargs.get("max_fps", 2),
            kwargs.get("sampling_fps", 2),
            bool(kwargs.get("frame_recovery", False)),
            kwargs.get("backend", "pyav"),
        )

    @classmethod
    def _load(
        cls,
        data: bytes,
        frame_sample_mode: str | None,
        num_frames: int,
        max_fps: int,
        sampling_fps: int,
        frame_recovery: bool,
        backend: str,
    ) -> tuple[DecodedFrames, VideoMetadata]:
        target = VideoTargetMetadata(num_frames=num_frames, fps=sampling_fps, max_duration=-1)
        options = {"frame_sample_mode": frame_sample_mode, "max_fps": max_fps}
        sample = decode_sample(
            cls, data, target, options, backend=backend, frame_recovery=frame_recovery
        )
        return sample.frames, sample_metadata(cls, sample, backend)

    @classmethod
    def check_options(cls, options: Mapping[str, Any], *, name: str | None = None) -> None:
        check_codec_options(cls, options, cls.sampling_options, name=name or cls.__qualname__)
        mode = options.get("frame_sample_mode")
        if mode is not None and mode not in _MODES:
            raise UnsupportedSamplingModeError(f"Unsupported frame_sample_mode: {mode}")


__all__ = ["Molmo2VideoBackend", "UnsupportedSamplingModeError"]
