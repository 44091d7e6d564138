"""Issue 9, hole 2 (video containers): a 51 KB H.264 must not become 1.8 GB of frames.

Every frame is an image under ``VLLM_MAX_IMAGE_PIXELS``, checked from the stream header before
decoding and bound inside FFmpeg's decoder; the kept frames' RGB bytes are charged to the
request's decoded-bytes budget (``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES``) before the array that
holds them is allocated, for sampled and for every-frame decodes alike.

tracemalloc sees numpy's allocations (the frame array), not FFmpeg's.
"""

from __future__ import annotations

from typing import Any

import av
import numpy as np
import pytest

from _memory import traced_peak
from _video_samples import make_black_clip, make_clip, read_frame_index
from mediaref.exceptions import MediaTooLargeError
from mediaref.media._pyav_mp4_index import INDEX_BYTES_PER_SAMPLE
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO, _frame_limits
from mediaref.media.video._frame_collector import FrameCollector
from mediaref.media.video._pyav_container import open_video_stream

MiB = 1 << 20
FRAME_4K = 4096 * 4096 * 3  # one 4096x4096 RGB frame


@pytest.fixture(autouse=True)
def _default_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_MAX_IMAGE_PIXELS", raising=False)
    monkeypatch.delenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", raising=False)


@pytest.fixture(scope="module")
def red_team_h264() -> bytes:
    """16 black 4096x4096 H.264 frames: ~51 KB that decode to 805 MB of RGB (32 did 1.6 GB)."""
    return make_black_clip(4096, 4096, 16)


def video_io(**kwargs: Any) -> VideoMediaIO:
    return VideoMediaIO(ImageMediaIO(), **kwargs)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_frames", [-1, 16, 32])
def test_red_team_h264_is_refused_before_a_frame_is_allocated(
    red_team_h264: bytes, num_frames: int
) -> None:
    assert len(red_team_h264) < 64 * 1024

    peak, outcome = traced_peak(lambda: video_io(num_frames=num_frames).load_bytes(red_team_h264))

    assert isinstance(outcome, MediaTooLargeError), outcome
    assert f"{16 * FRAME_4K} bytes" in str(outcome)
    assert peak < 2 * MiB


@pytest.mark.timeout(60)
def test_sampled_frames_are_charged_to_the_request_budget() -> None:
    data = make_black_clip(4096, 4096, 4)
    budget = MediaDecodedBudget(limit_bytes=3 * FRAME_4K)

    with decode_budget_scope(budget):
        frames, _ = video_io(num_frames=2).load_bytes(data)
        assert frames.shape == (2, 4096, 4096, 3)
        assert budget.used == frames.nbytes + 4 * INDEX_BYTES_PER_SAMPLE
        # The next video of the same request does not fit what is left.
        peak, outcome = traced_peak(lambda: video_io(num_frames=2).load_bytes(data))

    assert isinstance(outcome, MediaTooLargeError), outcome
    assert peak < 2 * MiB


def test_every_frame_decode_is_charged_from_the_packet_index() -> None:
    data = make_clip(num_frames=30)  # 30 frames of 64x48
    frame_bytes = 48 * 64 * 3
    tight = MediaDecodedBudget(limit_bytes=29 * frame_bytes)

    with decode_budget_scope(tight):
        peak, outcome = traced_peak(lambda: video_io(num_frames=-1).load_bytes(data))

    assert isinstance(outcome, MediaTooLargeError), outcome
    assert peak < 29 * frame_bytes  # refused before the 30-frame array existed
    roomy = MediaDecodedBudget(limit_bytes=31 * frame_bytes)
    with decode_budget_scope(roomy):
        frames, _ = video_io(num_frames=-1).load_bytes(data)
    assert roomy.used == frames.nbytes + 30 * INDEX_BYTES_PER_SAMPLE


def test_the_image_decoders_decoded_budget_is_charged_as_in_vllm() -> None:
    # vLLM's VideoMediaIO charges the frames to image_io.decoded_budget when one is set.
    budget = MediaDecodedBudget(limit_bytes=10**9)
    decoder = VideoMediaIO(ImageMediaIO(decoded_budget=budget), num_frames=4)

    frames, _ = decoder.load_bytes(make_clip(num_frames=30))

    assert budget.used == frames.nbytes + 30 * INDEX_BYTES_PER_SAMPLE


@pytest.mark.timeout(60)
def test_a_frame_over_the_pixel_cap_is_refused_from_the_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000000")

    peak, outcome = traced_peak(
        lambda: video_io(num_frames=1).load_bytes(make_black_clip(4096, 4096, 4))
    )

    assert isinstance(outcome, MediaTooLargeError), outcome
    assert "video frame of 4096x4096" in str(outcome) and "VLLM_MAX_IMAGE_PIXELS" in str(outcome)
    assert peak < 2 * MiB


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_frames", [-1, 4])
def test_frames_that_grow_midway_are_bound_inside_the_decoder(
    monkeypatch: pytest.MonkeyPatch, num_frames: int
) -> None:
    # Two MPEG-TS streams joined: 10 small frames, then 2 of 4096x4096. The header (and the
    # first frame) say 64x48; FFmpeg would allocate each later frame at 4096x4096.
    small = make_clip("h264", "mpegts", num_frames=10, width=64, height=48)
    huge = make_black_clip(4096, 4096, 2, "mpegts")
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000000")

    frames, metadata = video_io(num_frames=num_frames).load_bytes(small + huge)

    # The decoder refused the huge frames (max_pixels): they cost their packets, as damaged
    # packets do, and never reached the output scaled down.
    assert metadata.details["num_skipped_packets"] >= 1
    assert metadata.details["num_decoded_frames"] <= 10
    assert frames.shape[1:] == (48, 64, 3)
    assert all(index < 10 for index in metadata["frames_indices"])
    assert [read_frame_index(frame) for frame in frames] == metadata["frames_indices"]


@pytest.mark.timeout(60)
def test_huge_frames_get_fewer_decoder_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each frame thread holds a frame at the coded size; on a 64-core host, 65 frames of
    # 4096x4096 would be 3 GB in flight.
    monkeypatch.setattr(_frame_limits.os, "cpu_count", lambda: 64)

    with open_video_stream(make_black_clip(4096, 4096, 4), max_pixels=None) as (_, stream):
        assert stream.codec_context.thread_count == 5  # 256 MiB of 48 MiB frames
    with open_video_stream(make_clip(), max_pixels=None) as (_, stream):
        assert stream.codec_context.thread_count == 0  # FFmpeg's choice: one per core


def test_each_frame_is_checked_before_it_is_converted() -> None:
    collector = FrameCollector(2, max_pixels=1000)
    with pytest.raises(MediaTooLargeError, match="64x48"):
        collector.add(av.VideoFrame(64, 48, "yuv420p"), 0)
    assert len(collector) == 0


def test_collector_grows_and_trims_in_place_charging_the_growth() -> None:
    frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 200, np.uint8), format="rgb24")
    budget = MediaDecodedBudget(limit_bytes=10**9)

    with decode_budget_scope(budget):
        under = FrameCollector(1, header_size=(64, 48))  # the index undercounted
        for index in range(5):
            under.add(frame, index)
        grown = under.frames()
        over = FrameCollector(10, header_size=(64, 48))  # the stream ended early
        for index in range(3):
            over.add(frame, index)
        trimmed = over.frames()

    assert grown.shape == (5, 48, 64, 3) and trimmed.shape == (3, 48, 64, 3)
    assert grown.flags.owndata and trimmed.flags.owndata  # not views pinning a larger array
    assert int(grown.mean()) == 200
    one = 48 * 64 * 3
    assert budget.used == (1 + 8) * one + 10 * one  # growth is charged before it is allocated


def test_a_header_smaller_than_the_first_frame_is_topped_up() -> None:
    frame = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
    budget = MediaDecodedBudget(limit_bytes=10**9)

    with decode_budget_scope(budget):
        collector = FrameCollector(4, header_size=(32, 24))
        collector.add(frame, 0)

    assert budget.used == 4 * 48 * 64 * 3
