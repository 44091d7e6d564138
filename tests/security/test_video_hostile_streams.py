"""What else a hostile container can do to the PyAV video loader, pinned.

Timestamps that go backwards, seeks that never land, headers that declare a billion frames: each
must leave the decode bounded (a couple of passes over the stream, memory for the frames kept)
and its result self-consistent (``frames_indices`` ascending and naming the frames returned).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import av
import pytest

import mediaref.media.video._pyav_decode as pyav_decode
from _video_samples import make_clip, make_clip_with_timestamps, read_frame_index
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO


def video_io(**kwargs: Any) -> VideoMediaIO:
    return VideoMediaIO(ImageMediaIO(), **kwargs)


@pytest.mark.parametrize("container", ["mp4", "matroska", "mpegts"])
@pytest.mark.parametrize(
    "pts_of",
    [lambda i: 1000 - i, lambda i: 10 + i + (5 if i % 2 else -5)],
    ids=["backwards", "zigzag"],
)
def test_timestamps_that_go_backwards_fall_back_to_counting(container: str, pts_of: Any) -> None:
    data = make_clip_with_timestamps(container, pts_of)

    frames, metadata = video_io(num_frames=8).load_bytes(data)

    indices = metadata["frames_indices"]
    assert indices == sorted(indices) and len(indices) == len(frames) == 8
    # Counted in the order the decoder produces them (here, the order they were encoded).
    assert [read_frame_index(frame) for frame in frames] == indices
    assert metadata.details["num_decoded_frames"] <= 3 * metadata["total_num_frames"]


def test_seeks_that_never_land_cost_at_most_one_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_clip("h264", "mp4", num_frames=300, keyframe_interval=10)
    expected, _ = video_io(num_frames=-1).load_bytes(data)
    real_seek = pyav_decode.FrameDecoder.frames_from_keyframe
    restarts = 0
    real_start = pyav_decode.FrameDecoder.frames_from_start

    def overshooting(self: pyav_decode.FrameDecoder, pts: int) -> Iterator[av.VideoFrame]:
        return real_seek(self, 10**9)  # every seek lands at the last keyframe

    def counting_start(self: pyav_decode.FrameDecoder) -> Iterator[av.VideoFrame]:
        nonlocal restarts
        restarts += 1
        return real_start(self)

    monkeypatch.setattr(pyav_decode.FrameDecoder, "frames_from_keyframe", overshooting)
    monkeypatch.setattr(pyav_decode.FrameDecoder, "frames_from_start", counting_start)

    # 8 of 300 frames: gaps of ~42 frames, so every step would seek.
    frames, metadata = video_io(num_frames=8).load_bytes(data)

    assert restarts <= 2  # the first decode, and one fallback; not one per wanted frame
    assert metadata.details["num_decoded_frames"] <= 2 * 300 + 3 * 10
    assert [read_frame_index(frame) for frame in frames] == metadata["frames_indices"]
    assert (frames == expected[metadata["frames_indices"]]).all()


def test_an_avi_header_declaring_a_billion_frames_is_only_a_claim() -> None:
    data = bytearray(make_clip("mpeg4", "avi", num_frames=12))
    avih = data.index(b"avih") + 8
    strh = data.index(b"strh") + 8
    struct.pack_into("<I", data, avih + 16, 10**9)  # dwTotalFrames
    struct.pack_into("<I", data, strh + 32, 10**9)  # dwLength

    frames, metadata = video_io(num_frames=4).load_bytes(bytes(data))

    assert metadata["total_num_frames"] == 12  # counted from packets, not believed
    assert len(frames) == 4
    assert [read_frame_index(frame) for frame in frames] == metadata["frames_indices"]
