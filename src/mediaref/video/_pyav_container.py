"""Opening a video payload with PyAV safely, and indexing its frames without decoding them."""

from __future__ import annotations

import bisect
import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import av
from av.container import InputContainer
from av.video.stream import VideoStream

# Container options for every open. Demuxers such as concat open further files named inside the
# payload ("ffconcat version 1.0 / file secrets.mp4" reads a file relative to the server's working
# directory). The payload arrives through a Python file object, which needs no protocol, so an
# allow-list naming no protocol refuses every nested open and costs ordinary containers nothing.
_CONTAINER_OPTIONS = {"protocol_whitelist": "none"}


class VideoUnreadableError(Exception):
    """The payload opened but holds nothing we can decode (no video stream, no frames)."""


@contextmanager
def open_video_stream(data: bytes) -> Iterator[tuple[InputContainer, VideoStream]]:
    """The container and its first video stream; the container is closed on every exit path."""
    container = av.open(
        io.BytesIO(data), mode="r", container_options=_CONTAINER_OPTIONS, metadata_errors="ignore"
    )
    try:
        if not container.streams.video:
            raise VideoUnreadableError("the container has no video stream")
        stream = container.streams.video[0]
        if stream.codec_context is None:
            raise VideoUnreadableError("the video stream's codec is unknown or has no decoder")
        # Slice and frame threads: decoding dominates the cost of a video request.
        stream.thread_type = "AUTO"
        yield container, stream
    finally:
        container.close()


def header_num_frames(stream: VideoStream) -> int | None:
    """The frame count the header declares; None when it declares none (webm, mkv, ts)."""
    return stream.frames or None


def header_fps(stream: VideoStream) -> float:
    """The stream's average frame rate, falling back to FFmpeg's guess; 0.0 when unknown."""
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    return float(rate) if rate else 0.0


@dataclass(frozen=True)
class FrameIndex:
    """Where each frame of a stream sits, learned by demuxing packets (no decoding).

    ``frame_pts`` lists presentation timestamps in presentation order, so ``frame_pts[i]`` is the
    timestamp of frame ``i``. It is None when the timestamps do not identify frames (a packet
    without one, or one shared by two packets); frames are then found by counting, without
    seeking. ``keyframe_pts`` is sorted.
    """

    num_frames: int
    frame_pts: list[int] | None
    keyframe_pts: list[int]

    def position(self, pts: int) -> int:
        """The index of the first frame presented at or after ``pts``."""
        assert self.frame_pts is not None
        return bisect.bisect_left(self.frame_pts, pts)

    def keyframe_at_or_before(self, pts: int) -> int | None:
        """The latest keyframe timestamp not after ``pts``, or None if every keyframe is later."""
        i = bisect.bisect_right(self.keyframe_pts, pts)
        return self.keyframe_pts[i - 1] if i else None


def index_frames(container: InputContainer, stream: VideoStream) -> FrameIndex:
    """Demux the whole stream once, reading packet headers; leaves the demuxer at the end."""
    count = 0
    frame_pts: list[int] = []
    keyframe_pts: list[int] = []
    all_timestamped = True
    for packet in container.demux(stream):
        # Size 0: the flush packet PyAV yields at the end. Discard: trimmed by an edit list,
        # so the decoder drops the frame and it must not take up an index.
        if packet.size == 0 or packet.is_discard:
            continue
        count += 1
        if packet.pts is None:
            all_timestamped = False
            continue
        frame_pts.append(packet.pts)
        if packet.is_keyframe:
            keyframe_pts.append(packet.pts)
    frame_pts.sort()
    # A repeated timestamp (MPEG-TS streams joined end to end restart their clock) no longer
    # names one frame: such streams are decoded by counting, without seeking.
    if not all_timestamped or any(a == b for a, b in zip(frame_pts, frame_pts[1:])):
        return FrameIndex(count, None, [])
    keyframe_pts.sort()
    return FrameIndex(count, frame_pts, keyframe_pts)
