"""The PyAV video loader, the default backend."""

from __future__ import annotations

from typing import ClassVar

import av

from mediaref.media._pyav_open import UnsupportedContainerError
from mediaref.media.video._frame_collector import FrameCollector
from mediaref.media.video._frame_limits import max_frame_pixels
from mediaref.media.video._pyav_container import (
    FrameIndex,
    VideoUnreadableError,
    header_fps,
    header_num_frames,
    header_size,
    index_frames,
)
from mediaref.media.video._pyav_decode import (
    FrameDecoder,
    TimestampsUnusableError,
    decode_by_timestamp,
    decode_sequentially,
)
from mediaref.media.video._sampling import (
    ALL_FRAMES,
    sample_frame_indices,
    validate_fps,
    validate_num_frames,
)
from mediaref.media.video.loader_registry import VIDEO_LOADER_REGISTRY, VideoFrames, VideoMetadata


@VIDEO_LOADER_REGISTRY.register("pyav")
class PyAVVideoBackend:
    """Decodes with FFmpeg through PyAV, seeking to keyframes when sampling a long video.

    Returning every frame decodes the stream once, front to back. Sampling first indexes the
    stream by demuxing its packets (headers only, no decode), which yields the exact frame count,
    every frame's timestamp and the keyframes; it then decodes only from the keyframe before each
    wanted frame when the gap is long, so 32 frames of an hour-long video do not cost an hour of
    decoding. Either way the frames are bit-identical to a sequential decode's.

    Metadata holds vLLM's keys plus ``width``, ``height``, ``codec``, the header's own frame count
    (``header_num_frames``, None when the container declares none, as webm and mkv do), where
    ``total_num_frames`` came from (``total_num_frames_source``: "demux" when counted from
    packets, "decode" when counted by decoding every frame), and the work done:
    ``num_decoded_frames`` and ``num_skipped_packets`` (damaged packets the codec rejected; each
    costs its frame rather than failing the video). Only the HF ``VideoMetadata`` fields may be
    passed on to an HF processor; the rest are for vLLM-side logic and diagnostics.
    """

    decoder_version: ClassVar[str] = "pyav/1"

    @classmethod
    def load_bytes(
        cls, data: bytes, num_frames: int = ALL_FRAMES, fps: float | None = None
    ) -> tuple[VideoFrames, VideoMetadata]:
        num_frames = validate_num_frames(num_frames)
        fps = validate_fps(fps)
        try:
            return _load(data, num_frames, fps)
        except av.FFmpegError as exc:
            # strerror drops PyAV's "[Errno N] ...: '<none>'" framing around FFmpeg's reason.
            raise ValueError(f"Failed to decode video: {exc.strerror or exc}") from exc
        except (VideoUnreadableError, UnsupportedContainerError) as exc:
            raise ValueError(f"Failed to decode video: {exc}") from exc


def _load(data: bytes, num_frames: int, fps: float | None) -> tuple[VideoFrames, VideoMetadata]:
    max_pixels = max_frame_pixels()
    with FrameDecoder(data, max_pixels=max_pixels) as decoder:
        video_fps = header_fps(decoder.stream)
        size = header_size(decoder.stream)
        header = {
            "header_num_frames": header_num_frames(decoder.stream),
            "codec": decoder.stream.codec_context.name,
        }
        # Even a full decode indexes first: the frame count sizes the output array, and charges
        # it to the request's budget, before a frame is decoded.
        index = index_frames(decoder.container, decoder.stream)
        if num_frames == ALL_FRAMES and fps is None:
            collector = FrameCollector(index.num_frames, header_size=size, max_pixels=max_pixels)
            total = decode_sequentially(decoder.frames_from_start(), None, collector)
            source = "decode"
        else:
            total, source = index.num_frames, "demux"
            wanted = sample_frame_indices(total, num_frames, fps, video_fps)
            collector = FrameCollector(len(wanted), header_size=size, max_pixels=max_pixels)
            _decode_wanted(decoder, index, wanted, collector)
    if not len(collector):
        raise VideoUnreadableError("no frame could be decoded")
    frames = collector.frames()
    metadata: VideoMetadata = {
        "total_num_frames": total,
        "fps": video_fps,
        "duration": total / video_fps if video_fps > 0 else 0.0,
        "video_backend": "pyav",
        "frames_indices": collector.indices,
        # False tells the HF processor the frames are already sampled (vLLM's convention).
        "do_sample_frames": len(collector.indices) == total,
        "width": int(frames.shape[2]),
        "height": int(frames.shape[1]),
        "total_num_frames_source": source,
        "num_decoded_frames": decoder.frames_decoded,
        "num_skipped_packets": decoder.packets_skipped,
        **header,
    }
    return frames, metadata


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
