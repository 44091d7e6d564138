"""Kept frames are converted by swscale on the decoding thread, one scaler thread per frame."""

from __future__ import annotations

from typing import Any

import av
import numpy as np
import pytest

from mediaref.media.video._frame_collector import FrameCollector
from mediaref.media.video._frame_scaling import SWSCALE_ONE_THREAD, FrameScaling

PYAV_TAKES_THREADS = int(av.__version__.split(".")[0]) >= 17


class RecordingFrame:
    """A real frame whose conversions record the keyword arguments they were given."""

    def __init__(self, frame: av.VideoFrame, calls: list[dict[str, Any]]) -> None:
        self._frame, self._calls = frame, calls
        self.width, self.height, self.format = frame.width, frame.height, frame.format

    def to_ndarray(self, **kwargs: Any) -> np.ndarray:
        self._calls.append(kwargs)
        return self._frame.to_ndarray(**kwargs)

    def reformat(self, **kwargs: Any) -> RecordingFrame:
        self._calls.append(kwargs)
        return RecordingFrame(self._frame.reformat(**kwargs), self._calls)


def yuv_frame(width: int = 64, height: int = 48) -> av.VideoFrame:
    rgb = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")


def test_the_setting_names_one_thread_where_pyav_takes_it() -> None:
    assert dict(SWSCALE_ONE_THREAD) == ({"threads": 1} if PYAV_TAKES_THREADS else {})


def test_an_exact_kept_frame_converts_on_one_scaler_thread() -> None:
    calls: list[dict[str, Any]] = []
    frame = yuv_frame()
    collector = FrameCollector(1, header_size=(64, 48))

    collector.add(RecordingFrame(frame, calls), 0)  # type: ignore[arg-type]

    assert calls and all(call.items() >= SWSCALE_ONE_THREAD.items() for call in calls)
    np.testing.assert_array_equal(collector.frames()[0], frame.to_ndarray(format="rgb24"))


@pytest.mark.parametrize("target", [(48, 36), (16, 12)])  # scaled in YUV; in one call
def test_a_scaled_kept_frame_converts_on_one_scaler_thread(target: tuple[int, int]) -> None:
    calls: list[dict[str, Any]] = []
    scaling = FrameScaling(lambda w, h: target, key={"test": "fixed"})
    collector = FrameCollector(1, scaling=scaling)

    collector.add(RecordingFrame(yuv_frame(), calls), 0)  # type: ignore[arg-type]

    assert calls and all(call.items() >= SWSCALE_ONE_THREAD.items() for call in calls)
    assert collector.frames().shape == (1, target[1], target[0], 3)


@pytest.mark.skipif(not PYAV_TAKES_THREADS, reason="PyAV < 17 scales on one thread only")
def test_one_scaler_thread_gives_the_same_pixels_as_pyavs_default() -> None:
    frame = yuv_frame(854, 480)
    np.testing.assert_array_equal(
        frame.to_ndarray(format="rgb24", **SWSCALE_ONE_THREAD), frame.to_ndarray(format="rgb24")
    )
