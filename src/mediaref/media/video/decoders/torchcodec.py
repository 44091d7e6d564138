"""The torchcodec codec: FFmpeg through torchcodec's ``VideoDecoder``, one batched frame read.

Needs the ``torchcodec`` package (built for the installed torch), which is not a dependency of
mediaref: without it, selecting this codec raises
:class:`~mediaref.media.video.decoders.errors.VideoCodecUnavailableError` when the decoder is
built. Options: ``num_ffmpeg_threads`` (0: FFmpeg's choice), ``seek_mode`` (``"exact"`` scans
the file for exact frame positions when the decoder is built; ``"approximate"`` trusts the
header) and ``device`` (``"cpu"`` returns a host array; ``"cuda"`` decodes with NVDEC and
returns a CUDA tensor). The payload passes the video allow-list of demuxers first; the frames'
bytes are charged to the request's budget before they are decoded.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np

from mediaref.media.video._frame_limits import charge_rgb_frames
from mediaref.media.video.decoders._external import (
    admit_container,
    import_optional,
    optional_unavailable_reason,
)
from mediaref.media.video.decoders.base import (
    VideoSourceMetadata,
    VideoTargetMetadata,
    check_frame_pixel_limit,
)

logger = logging.getLogger(__name__)

_INSTALL = "the torchcodec package (matching the installed torch)"


def torchcodec_unavailable_reason() -> str | None:
    """Why the torchcodec codec cannot decode here, or None when it can."""
    return optional_unavailable_reason("torchcodec.decoders", codec="torchcodec", install=_INSTALL)


def decode_torchcodec(
    loader_cls: Any,
    data: bytes,
    target: VideoTargetMetadata,
    sampling_kwargs: dict[str, Any],
    *,
    num_ffmpeg_threads: int = 0,
    seek_mode: Literal["exact", "approximate"] = "exact",
    device: str = "cpu",
) -> tuple[Any, VideoSourceMetadata, list[int], list[int]]:
    """``(frames, source, frame_idx, valid)`` of the frames ``loader_cls`` samples from ``data``."""
    admit_container(data)
    decoder = TorchCodecVideoBackendMixin.make_torchcodec_decoder(
        data, num_ffmpeg_threads=num_ffmpeg_threads, seek_mode=seek_mode, device=device
    )
    width, height = decoder.metadata.width or 0, decoder.metadata.height or 0
    check_frame_pixel_limit(width, height)
    source = loader_cls._prepare_source(
        TorchCodecVideoBackendMixin.get_torchcodec_metadata(decoder)
    )
    frame_idx = [
        int(i)
        for i in loader_cls.compute_frames_index_to_sample(
            source=source, target=target, **sampling_kwargs
        )
    ]
    if device == "cpu":  # device memory is not the request's host budget
        charge_rgb_frames(len(frame_idx), height, width)
    frames, valid = TorchCodecVideoBackendMixin.decode_torchcodec_frames(
        decoder, frame_idx, device=device
    )
    return frames, source, frame_idx, valid


class TorchCodecVideoBackendMixin:
    """torchcodec's side of the codec: the decoder, its metadata, and one batched read."""

    @staticmethod
    def make_torchcodec_decoder(
        data: bytes,
        *,
        num_ffmpeg_threads: int = 0,
        seek_mode: Literal["exact", "approximate"] = "exact",
        device: str = "cpu",
    ) -> Any:
        """A ``torchcodec.decoders.VideoDecoder`` over ``data`` giving NHWC frames.

        ValueError for a device other than CPU or CUDA, or CUDA where torch has none.
        """
        import torch

        kind = torch.device(device).type
        if kind not in ("cpu", "cuda"):
            raise ValueError(
                f"torchcodec video decoding only supports 'cpu' and 'cuda' devices, got {device!r}."
            )
        if kind == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"torchcodec video decoding on device {device!r} requires a CUDA-capable platform."
            )
        decoders = import_optional("torchcodec.decoders", codec="torchcodec", install=_INSTALL)
        # NHWC is the (T, H, W, 3) layout every other codec returns: no transpose later.
        return decoders.VideoDecoder(
            data,
            dimension_order="NHWC",
            num_ffmpeg_threads=num_ffmpeg_threads,
            seek_mode=seek_mode,
            device=device,
        )

    @staticmethod
    def get_torchcodec_metadata(decoder: Any) -> VideoSourceMetadata:
        """Frame count, rate and duration as torchcodec reports them (0 when unknown); a missing
        count is estimated from the duration and the rate."""
        metadata = decoder.metadata
        fps = float(metadata.average_fps) if metadata.average_fps else 0.0
        duration = float(metadata.duration_seconds) if metadata.duration_seconds else 0.0
        total = int(metadata.num_frames or 0)
        if total == 0 and duration > 0 and fps > 0:
            total = int(duration * fps)
        return VideoSourceMetadata(total, fps, duration)

    @staticmethod
    def decode_torchcodec_frames(
        decoder: Any, frame_indices: list[int], *, device: str = "cpu"
    ) -> tuple[Any, list[int]]:
        """The frames at ``frame_indices`` (in that order, repeats included) in one call.

        A host array on CPU; a tensor on the decoding device otherwise.
        """
        if not frame_indices:
            return np.empty((0,), dtype=np.uint8), []
        frames = decoder.get_frames_at(list(frame_indices)).data  # the GIL is released inside
        if device != "cpu" and bool(getattr(decoder, "cpu_fallback", False)):
            logger.warning(
                "torchcodec could not use NVDEC for this video and decoded it on the CPU; "
                "check codec support and libnvcuvid"
            )
        if frames.device.type == "cpu" and device == "cpu":
            frames = frames.numpy()
        return frames, list(frame_indices)


__all__ = ["TorchCodecVideoBackendMixin", "decode_torchcodec", "torchcodec_unavailable_reason"]
