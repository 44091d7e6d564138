"""The PyAV codec, mediaref's default: exact frame counts and keyframe seeks.

Before any frame is decoded the stream is indexed by demuxing its packets (headers only), which
gives the exact frame count, every frame's timestamp and the keyframes. The loader's sampling
rule then sees that count; the chosen frames are decoded by seeking to the keyframe before each
one when the gap is long (32 frames of an hour-long video do not cost an hour of decoding), and
when every frame is chosen the stream is decoded once, front to back. Either way the frames are
bit-identical to a sequential decode's. A frame that will not decode is replaced by the next one
that does, under its own index (so ``frame_recovery`` is always on).

Besides vLLM's four values, :func:`decode_pyav_detailed` reports what the decode saw and did:
``width``, ``height``, ``codec``, the header's own frame count (``header_num_frames``, None
when the container declares none, as webm and mkv do), where the count came from
(``total_num_frames_source``: "demux" when counted from packets, "decode" when counted by
decoding every frame), ``num_decoded_frames`` and ``num_skipped_packets`` (damaged packets the
codec rejected). ``width`` and ``height`` are the kept frames' size: under a frame scaling
(:mod:`mediaref.media.video._frame_scaling`, opt-in) the target size, the source's being in
``source_width`` / ``source_height`` then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import av

from mediaref.media._pyav_open import UnsupportedContainerError
from mediaref.media.video._frame_collector import FrameCollector
from mediaref.media.video._frame_limits import max_frame_pixels
from mediaref.media.video._frame_scaling import current_frame_scaling
from mediaref.media.video._pyav_container import (
    FrameIndex,
    VideoUnreadableError,
    header_fps,
    header_num_frames,
    header_size,
)
from mediaref.media.video._pyav_decode import (
    FrameDecoder,
    TimestampsUnusableError,
    decode_by_timestamp,
    decode_sequentially,
)
from mediaref.media.video.decoders.base import VideoSourceMetadata, VideoTargetMetadata


@dataclass
class PyAVDecodeResult:
    """A PyAV decode: vLLM's four values, and what the decode saw and did (``details``)."""

    frames: Any
    source: VideoSourceMetadata
    frame_idx: list[int]
    valid: list[int]
    details: dict[str, Any] = field(default_factory=dict)

    def as_tuple(self) -> tuple[Any, VideoSourceMetadata, list[int], list[int]]:
        return self.frames, self.source, self.frame_idx, self.valid


def decode_pyav(
    loader_cls: Any,
    data: bytes,
    target: VideoTargetMetadata,
    sampling_kwargs: dict[str, Any],
) -> tuple[Any, VideoSourceMetadata, list[int], list[int]]:
    """``(frames, source, frame_idx, valid)`` of the frames ``loader_cls`` samples from ``data``."""
    return decode_pyav_detailed(loader_cls, data, target, sampling_kwargs).as_tuple()


def decode_pyav_detailed(
    loader_cls: Any,
    data: bytes,
    target: VideoTargetMetadata,
    sampling_kwargs: dict[str, Any],
) -> PyAVDecodeResult:
    """:func:`decode_pyav`, with the decode's details.

    Raises ``ValueError("Failed to decode video: <reason>")`` for a payload that will not
    decode, :class:`~mediaref.exceptions.MediaTooLargeError` for a frame or a stack over a cap.
    """
    try:
        return _decode(loader_cls, data, target, sampling_kwargs)
    except av.FFmpegError as exc:
        # strerror drops PyAV's "[Errno N] ...: '<none>'" framing around FFmpeg's reason.
        raise ValueError(f"Failed to decode video: {exc.strerror or exc}") from exc
    except (VideoUnreadableError, UnsupportedContainerError) as exc:
        raise ValueError(f"Failed to decode video: {exc}") from exc


def _decode(
    loader_cls: Any, data: bytes, target: VideoTargetMetadata, sampling_kwargs: dict[str, Any]
) -> PyAVDecodeResult:
    max_pixels = max_frame_pixels()
    # The opt-in frame scaling of the running decode (VideoMediaIO's frame_scaling); None: exact.
    scaling = current_frame_scaling()
    with FrameDecoder(data, max_pixels=max_pixels) as decoder:
        video_fps = header_fps(decoder.stream)
        size = header_size(decoder.stream)
        details: dict[str, Any] = {
            "header_num_frames": header_num_frames(decoder.stream),
            "codec": decoder.stream.codec_context.name,
        }
        # Even a full decode indexes first: the frame count sizes the output array, and charges
        # it to the request's budget, before a frame is decoded.
        index = decoder.index()
        source = loader_cls._prepare_source(_source(index.num_frames, video_fps))
        frame_idx = [
            int(i)
            for i in loader_cls.compute_frames_index_to_sample(source, target, **sampling_kwargs)
        ]
        # Each frame is decoded once, in order; repeats and indices past the end are the
        # rule's business (the valid indices say what was decoded), as with vLLM's codecs.
        wanted = sorted({i for i in frame_idx if 0 <= i < index.num_frames})
        if index.num_frames and len(wanted) == index.num_frames:
            collector = FrameCollector(
                index.num_frames, header_size=size, max_pixels=max_pixels, scaling=scaling
            )
            total = decode_sequentially(decoder.frames_from_start(), None, collector)
            details["total_num_frames_source"] = "decode"
            if total != source.total_frames_num:
                source = source._replace(
                    total_frames_num=total,
                    duration=total / source.original_fps if source.original_fps > 0 else 0.0,
                )
        else:
            details["total_num_frames_source"] = "demux"
            collector = FrameCollector(
                len(wanted), header_size=size, max_pixels=max_pixels, scaling=scaling
            )
            _decode_wanted(decoder, index, wanted, collector)
    if not len(collector):
        raise VideoUnreadableError("no frame could be decoded")
    frames = collector.frames()
    if scaling is not None and size is not None:
        details.update(source_width=size[0], source_height=size[1])
    details.update(
        width=int(frames.shape[2]),
        height=int(frames.shape[1]),
        num_decoded_frames=decoder.frames_decoded,
        num_skipped_packets=decoder.packets_skipped,
    )
    return PyAVDecodeResult(frames, source, frame_idx, list(collector.indices), details)


def _source(num_frames: int, video_fps: float) -> VideoSourceMetadata:
    duration = num_frames / video_fps if video_fps > 0 else 0.0
    return VideoSourceMetadata(num_frames, video_fps, duration)


def _decode_wanted(
    decoder: FrameDecoder, index: FrameIndex, wanted: list[int], collector: FrameCollector
) -> None:
    if index.frame_pts is not None:
        try:
            decode_by_timestamp(decoder, index, wanted, collector)
            return
        except TimestampsUnusableError:
            collector.clear()
    # Packets or frames without timestamps cannot be matched to the index: count frames instead.
    decode_sequentially(decoder.frames_from_start(), wanted, collector)


__all__ = ["PyAVDecodeResult", "decode_pyav", "decode_pyav_detailed"]
