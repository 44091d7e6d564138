"""Opening a video payload with PyAV safely, and indexing its frames without decoding them."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import av
from av.container import InputContainer
from av.video.stream import VideoStream

from mediaref.media._pyav_open import open_input
from mediaref.media.video._frame_limits import check_frame_size, decoder_thread_count


class VideoUnreadableError(Exception):
    """The payload opened but holds nothing we can decode (no video stream, no frames)."""


@contextmanager
def open_video_stream(
    data: bytes, *, max_pixels: int | None, charge_index: bool = True
) -> Iterator[tuple[InputContainer, VideoStream]]:
    """The container and its first video stream; the container is closed on every exit path.

    The payload is opened with the video allow-list of demuxers (no concat scripts, playlists,
    image sequences or nested files: :mod:`mediaref.media._pyav_open`). A stream whose header
    declares frames over ``max_pixels`` is refused here, and the decoder is told the cap
    (FFmpeg's ``max_pixels``), so no frame it allocates can pass it.
    """
    container = open_input(data, "video", charge_index=charge_index)
    try:
        if not container.streams.video:
            raise VideoUnreadableError("the container has no video stream")
        stream = container.streams.video[0]
        codec_context = stream.codec_context
        if codec_context is None:
            raise VideoUnreadableError("the video stream's codec is unknown or has no decoder")
        check_frame_size(codec_context.width, codec_context.height, limit=max_pixels)
        if max_pixels is not None:
            codec_context.options = {**codec_context.options, "max_pixels": str(max_pixels)}
        # Slice and frame threads: decoding dominates the cost of a video request. Fewer of
        # them for huge frames, each of which holds a frame in flight.
        stream.thread_type = "AUTO"
        codec_context.thread_count = decoder_thread_count(codec_context.width, codec_context.height)
        yield container, stream
    finally:
        container.close()


def header_size(stream: VideoStream) -> tuple[int, int] | None:
    """The (width, height) the stream's header declares; None when it declares none."""
    width, height = stream.codec_context.width, stream.codec_context.height
    return (width, height) if width > 0 and height > 0 else None


def header_num_frames(stream: VideoStream) -> int | None:
    """The frame count the header declares; None when it declares none (webm, mkv, ts)."""
    return stream.frames or None


def header_fps(stream: VideoStream) -> float:
    """The stream's average frame rate, falling back to FFmpeg's guess; 0.0 when unknown."""
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    return float(rate) if rate else 0.0


class PacketMark(NamedTuple):
    """What tells one packet of a stream from another."""

    pos: int | None
    dts: int | None
    pts: int | None
    size: int


def packet_mark(packet: av.Packet[VideoStream]) -> PacketMark:
    return PacketMark(packet.pos, packet.dts, packet.pts, packet.size)


@dataclass(frozen=True)
class FrameIndex:
    """Where each frame of a stream sits, learned by demuxing packets (no decoding).

    ``frame_pts`` lists presentation timestamps in presentation order, so ``frame_pts[i]`` is the
    timestamp of frame ``i``. It is None when the timestamps do not identify frames (a packet
    without one, or one shared by two packets); frames are then found by counting, without
    seeking. ``keyframe_pts`` is sorted. ``first_packet``: the mark of the first packet a fresh
    open demuxes (None for a stream without packets), which a rewind to the start must land on.
    """

    num_frames: int
    frame_pts: list[int] | None
    keyframe_pts: list[int]
    first_packet: PacketMark | None = None

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
    first_packet: PacketMark | None = None
    for packet in container.demux(stream):
        if first_packet is None and packet.size:
            first_packet = packet_mark(packet)
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
    if not all_timestamped or any(a == b for a, b in itertools.pairwise(frame_pts)):
        return FrameIndex(count, None, [], first_packet)
    keyframe_pts.sort()
    return FrameIndex(count, frame_pts, keyframe_pts, first_packet)
