"""The OpenCV codec (vLLM's default), when ``cv2`` is installed; every test skips without it.

OpenCV is not a dependency of mediaref: install opencv-python-headless (>= 4.11) to run these.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _video_samples import make_clip, read_frame_index
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO
from mediaref.video import Glm5NextVideoBackend, Molmo2VideoBackend, VideoBackend
from mediaref.video_decoders.opencv import OpenCVVideoBackendMixin

cv2 = pytest.importorskip("cv2")

ROOT = Path(__file__).resolve().parent.parent


def painted(frames: Any) -> list[int]:
    return [read_frame_index(frame) for frame in frames]


@pytest.mark.parametrize(
    ("codec", "container"), [("h264", "mp4"), ("vp9", "webm"), ("h264", "matroska")]
)
def test_opencv_decodes_the_frames_pyav_decodes(codec: str, container: str) -> None:
    data = make_clip(codec, container, num_frames=120)

    frames, metadata = VideoMediaIO(
        ImageMediaIO(), num_frames=8, video_backend="opencv"
    ).load_bytes(data)
    reference, _ = VideoMediaIO(ImageMediaIO(), num_frames=8).load_bytes(data)

    assert metadata["video_backend"] == "opencv"
    assert metadata["frames_indices"] == [0, 17, 34, 51, 68, 85, 102, 119] == painted(frames)
    assert metadata["total_num_frames"] == 120 and metadata["fps"] == 30.0
    assert painted(reference) == painted(frames)


def test_metadata_counts_frames_the_header_does_not_declare() -> None:
    data = make_clip("vp9", "webm", num_frames=45)
    assert OpenCVVideoBackendMixin.demux_count_frames(data) == 45
    source = OpenCVVideoBackendMixin.get_video_metadata(data)
    assert source.total_frames_num == 45 and source.original_fps == 30.0


def test_model_loaders_take_the_opencv_codec() -> None:
    data = make_clip(num_frames=120)
    frames, metadata = VideoMediaIO(
        ImageMediaIO(), video_backend="qwen2_vl", backend="opencv"
    ).load_bytes(data)
    assert painted(frames) == list(range(0, 120, 15)) == metadata["frames_indices"]
    frames, metadata = Molmo2VideoBackend.load_bytes_opencv(data, "uniform_last_frame", 4)
    assert painted(frames) == [0, 39, 79, 119] and metadata["video_backend"] == "opencv"


def test_frame_recovery_and_seeking_reads_return_the_same_frames() -> None:
    data = make_clip(num_frames=300, keyframe_interval=30)
    wanted = [0, 1, 40, 200, 299]

    class Chosen(Glm5NextVideoBackend):
        @classmethod
        def compute_frames_index_to_sample(
            cls, source: Any, target: Any, **kwargs: Any
        ) -> list[int]:
            return wanted

    seeking, _ = Chosen.load_bytes(data, backend="opencv")  # grabs short gaps, seeks long ones
    forward, _ = Chosen.load_bytes(data, backend="opencv", frame_recovery=True)
    assert painted(seeking) == painted(forward) == wanted


def test_read_frames_skips_an_index_past_the_end() -> None:
    data = make_clip(num_frames=30)
    cap = OpenCVVideoBackendMixin.open_video_capture(data)
    try:
        frames, valid = VideoBackend.read_frames(cap, [3, 29, 500], 30)
    finally:
        cap.release()
    assert valid == [3, 29] and painted(frames) == [3, 29]
    assert frames.dtype == np.uint8 and frames.shape == (2, 48, 64, 3)


def test_the_capture_outlives_its_callers_stream() -> None:
    # OpenCV does not hold the stream a capture reads; when the caller's reference to it went,
    # a seek and release() read freed memory and killed the process. Run apart to survive that.
    script = (
        "import sys; sys.path[:0] = ['tests', 'src']\n"
        "from _video_samples import make_clip\n"
        "import cv2\n"
        "from mediaref.video_decoders.opencv import OpenCVVideoBackendMixin as M\n"
        "cap = M.open_video_capture(make_clip(num_frames=30))\n"
        "cap.set(cv2.CAP_PROP_POS_AVI_RATIO, 1.0); cap.grab(); cap.release()\n"
        "print(M.get_video_metadata(make_clip(num_frames=30)).total_frames_num)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "30"
