"""Decoding chosen frames with PyAV: sequentially by count, or by timestamp with keyframe seeks."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from contextlib import ExitStack

import av
from av.container import InputContainer
from av.video.stream import VideoStream

from mediaref.media.video._frame_collector import FrameCollector
from mediaref.media.video._pyav_container import (
    FrameIndex,
    PacketMark,
    index_frames,
    open_video_stream,
    packet_mark,
)

# A seek flushes the decoder, throwing away the frames its threads hold in flight, and the demuxer
# has to find its place again. Below this many skipped frames, decoding through is as cheap.
MIN_FRAMES_SKIPPED_BY_SEEK = 16

# Seeks that landed past their target before falling back to decoding from the start.
_SEEK_ATTEMPTS = 3

# Demuxers whose seek to a stream's first packet is exact (ISO BMFF: a seek sets every stream's
# position in its sample table), so the decode after indexing rewinds there rather than reopening
# the payload (a second open, its header parse and stream probe again, cost 3-4 ms of a 480p
# clip's ~100 ms). The rewind is checked: the first packet after it must be the one a fresh open
# demuxed first.
REWINDABLE_DEMUXERS = frozenset({"mov,mp4,m4a,3gp,3g2,mj2"})

# Codecs whose "non-reference" frames no other frame can predict from, so a decoder told to skip
# them (FFmpeg's skip_frame=NONREF) decodes every other frame to the same pixels. H.264: a
# picture with nal_ref_idc 0 never enters the reference buffer. Left out: HEVC, whose
# "sub-layer non-reference" pictures may still be predicted from by higher temporal layers.
SKIPPABLE_NONREF_CODECS = frozenset({"h264"})


class TimestampsUnusableError(Exception):
    """A decoded frame carried no timestamp, so frames cannot be matched to the index."""


class FrameDecoder:
    """Frames of one payload in presentation order, counting every frame the codec produces.

    Owns the open container: :meth:`frames_from_start` reopens the payload rather than seeking to
    its start, because some demuxers (MPEG-TS) cannot seek back to the first frame reliably,
    except for the first decode after :meth:`index` on a :data:`REWINDABLE_DEMUXERS` container,
    which rewinds (checked) to the packet the index started from. Use as a context manager; the
    container is closed on exit.
    """

    def __init__(self, data: bytes, *, max_pixels: int | None = None) -> None:
        self._data = data
        self.max_pixels = max_pixels
        self._opened = ExitStack()
        self.frames_decoded = 0
        self.packets_skipped = 0
        self._opens = 0
        self._kept_pts: frozenset[int] | None = None
        # Where a rewind to the start must land; set by index(), spent by the first decode.
        self._rewind_mark: PacketMark | None = None
        self.container, self.stream = self._open()

    def __enter__(self) -> FrameDecoder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._opened.close()

    def _open(self) -> tuple[InputContainer, VideoStream]:
        # The first open charges the demuxer's sample index to the request; reopening the same
        # payload builds the same index again, after the previous one was freed.
        first = self._opens == 0
        self._opens += 1
        self._skipping = False  # a new codec context decodes every frame
        return self._opened.enter_context(
            open_video_stream(self._data, max_pixels=self.max_pixels, charge_index=first)
        )

    def index(self) -> FrameIndex:
        """The stream's :func:`index_frames`, demuxed from the open (before any decode); leaves
        the demuxer at the end, so decoding starts with :meth:`frames_from_start`."""
        index = index_frames(self.container, self.stream)
        if self.container.format.name in REWINDABLE_DEMUXERS:
            self._rewind_mark = index.first_packet
        return index

    def frames_from_start(self) -> Iterator[av.VideoFrame]:
        packets = self._rewound()
        if packets is None:
            self._opened.close()
            self.container, self.stream = self._open()
            packets = self.container.demux(self.stream)
        return self._frames(packets)

    def _rewound(self) -> Iterator[av.Packet[VideoStream]] | None:
        """The stream's packets from its first, after a seek back to it; None where that is not
        known to be exact: not right after :meth:`index` (the codec, never fed, is as a fresh
        open leaves it), or a first packet other than the one the index started from."""
        mark, self._rewind_mark = self._rewind_mark, None
        if mark is None or mark.dts is None:
            return None
        try:
            self.container.seek(mark.dts, stream=self.stream, backward=True, any_frame=False)
            packets = self.container.demux(self.stream)
            first = next(packets, None)
        except av.FFmpegError:
            return None
        if first is None or packet_mark(first) != mark:
            return None
        return itertools.chain((first,), packets)

    def frames_from_keyframe(self, pts: int) -> Iterator[av.VideoFrame]:
        """Frames from the keyframe the demuxer finds for ``pts``; PyAV flushes the codec."""
        self.container.seek(pts, stream=self.stream, backward=True, any_frame=False)
        return self.frames()

    def skip_unkept_nonref(self, kept_pts: frozenset[int] | None) -> None:
        """From now on, let the decoder skip non-reference frames whose packet timestamp is not in
        ``kept_pts``, where the codec's non-reference frames are safe to skip
        (:data:`SKIPPABLE_NONREF_CODECS`).

        Every frame that is decoded comes out bit-identical to a full decode; frames that are
        skipped never come out, so only a caller that finds frames by timestamp may ask this.
        A packet without a timestamp is always decoded. None decodes every frame again, from the
        next call of :meth:`frames` on.
        """
        self._kept_pts = kept_pts

    def frames(self) -> Iterator[av.VideoFrame]:
        """Frames from the demuxer's current position (the start, on a fresh open) to the end."""
        self._rewind_mark = None  # the codec is fed from here on: no rewind is exact after it
        return self._frames(self.container.demux(self.stream))

    def _frames(self, packets: Iterator[av.Packet[VideoStream]]) -> Iterator[av.VideoFrame]:
        codec_context = self.stream.codec_context
        kept = self._kept_pts if codec_context.name in SKIPPABLE_NONREF_CODECS else None
        for packet in packets:
            # Per packet: frame threads take the setting with the packet they are handed. The
            # setting outlives this generator (a seek keeps the codec context), so it is tracked
            # on the decoder, not here.
            skip = kept is not None and packet.pts is not None and packet.pts not in kept
            if skip != self._skipping:
                codec_context.skip_frame = "NONREF" if skip else "DEFAULT"
                self._skipping = skip
            try:
                # The empty packet at the end flushes the frames the codec still holds.
                decoded = packet.decode()
            except av.InvalidDataError:
                # A damaged packet costs its frame, not the video, as in the ffmpeg CLI; a
                # payload where nothing decodes still fails, with "no frame could be decoded".
                self.packets_skipped += 1
                continue
            for frame in decoded:
                self.frames_decoded += 1
                yield frame


def decode_sequentially(
    frames: Iterator[av.VideoFrame], wanted: list[int] | None, collector: FrameCollector
) -> int:
    """Keep the frames whose ordinal is in ``wanted`` (ascending; every frame if None).

    Returns how many frames were read, which is the stream's frame count when ``wanted`` is None.
    """
    pending = iter(wanted) if wanted is not None else None
    next_wanted = next(pending, None) if pending is not None else None
    count = 0
    for ordinal, frame in enumerate(frames):
        count = ordinal + 1
        if pending is None:
            collector.add(frame, ordinal)
        elif ordinal == next_wanted:
            collector.add(frame, ordinal)
            next_wanted = next(pending, None)
            if next_wanted is None:
                break
    return count


def _frame_pts(frame: av.VideoFrame) -> int:
    if frame.pts is None:
        raise TimestampsUnusableError("a decoded frame has no timestamp")
    return frame.pts


def _in_presentation_order(frames: Iterator[av.VideoFrame]) -> Iterator[av.VideoFrame]:
    """``frames``, failing once a timestamp fails to increase.

    Frames come out of a decoder in presentation order, so timestamps that go backwards (or
    repeat) cannot name frames of the index: the caller then counts frames instead.
    """
    last: int | None = None
    for frame in frames:
        pts = _frame_pts(frame)
        if last is not None and pts <= last:
            raise TimestampsUnusableError("decoded timestamps go backwards")
        last = pts
        yield frame


def _seek_pays(index: FrameIndex, last_pts: int, keyframe: int | None) -> bool:
    """Whether jumping to ``keyframe`` skips enough frames past ``last_pts`` to pay for itself."""
    if keyframe is None or keyframe <= last_pts:
        return False
    skipped = index.position(keyframe) - index.position(last_pts) - 1
    return skipped >= MIN_FRAMES_SKIPPED_BY_SEEK


def _seek_at_or_before(
    decoder: FrameDecoder, index: FrameIndex, keyframe: int, target: int
) -> tuple[Iterator[av.VideoFrame], av.VideoFrame | None, bool]:
    """Frames starting at or before ``target``, the first of them, and whether a seek landed.

    Demuxers seek by their own notion of time (MPEG-TS by decode timestamps, by bisecting the
    file), so a seek to a keyframe can land on a later one. Each overshoot retries from the
    keyframe before; after a few, the payload is decoded from its start instead.
    """
    end = bisect.bisect_right(index.keyframe_pts, keyframe)
    for candidate in reversed(index.keyframe_pts[max(0, end - _SEEK_ATTEMPTS) : end]):
        frames = _in_presentation_order(decoder.frames_from_keyframe(candidate))
        first = next(frames, None)
        if first is not None and _frame_pts(first) <= target:
            return frames, first, True
    frames = _in_presentation_order(decoder.frames_from_start())
    return frames, next(frames, None), False


def decode_by_timestamp(
    decoder: FrameDecoder, index: FrameIndex, wanted: list[int], collector: FrameCollector
) -> None:
    """Keep frame ``i`` for each ``i`` in ``wanted`` (ascending), seeking across long gaps.

    Frame ``i`` is the frame presented at ``index.frame_pts[i]``: exactly frame ``i`` of a
    sequential decode. If it cannot be decoded, the next frame that is decoded stands in for it,
    under its own index. Unwanted non-reference frames of H.264 are not decoded
    (:meth:`FrameDecoder.skip_unkept_nonref`). Decoding starts from a fresh open of the payload
    (indexing left the demuxer at the end) and seeks only where a keyframe lets it skip enough
    frames.

    A payload whose seeks never land (timestamps the demuxer cannot find again) would otherwise
    be decoded from its start once per wanted frame; after the first such fallback the rest is
    decoded forward without seeking, so the work stays within two passes over the stream.
    Raises :class:`TimestampsUnusableError` when decoded timestamps are missing or go backwards.
    """
    assert index.frame_pts is not None
    # Frames are matched by timestamp, so the non-reference frames nothing asks for need not be
    # decoded at all (x264's defaults make about one frame in five such a B-frame).
    decoder.skip_unkept_nonref(frozenset(index.frame_pts[i] for i in wanted))
    try:
        _keep_by_timestamp(decoder, index, wanted, collector)
    finally:
        decoder.skip_unkept_nonref(None)  # a fallback that counts frames needs them all


def _keep_by_timestamp(
    decoder: FrameDecoder, index: FrameIndex, wanted: list[int], collector: FrameCollector
) -> None:
    assert index.frame_pts is not None
    frames = _in_presentation_order(decoder.frames_from_start())
    frame = next(frames, None)
    last_pts: int | None = None
    seeking = True
    for frame_index in wanted:
        target = index.frame_pts[frame_index]
        if last_pts is not None:
            keyframe = index.keyframe_at_or_before(target)
            if seeking and keyframe is not None and _seek_pays(index, last_pts, keyframe):
                frames, frame, seeking = _seek_at_or_before(decoder, index, keyframe, target)
            else:
                frame = next(frames, None)
        while frame is not None and _frame_pts(frame) < target:
            frame = next(frames, None)
        if frame is None:
            return  # the stream ended early (a truncated payload): keep what was found
        last_pts = _frame_pts(frame)
        # Normally ``frame_index`` itself; a later frame's index when a damaged packet lost it.
        collector.add(frame, index.position(last_pts))
