"""The OpenCV codec (vLLM's default): FFmpeg through ``cv2.VideoCapture`` over the bytes in memory.

Needs ``cv2`` from opencv-python or opencv-python-headless, 4.11 or later (reading from a Python
stream), which is not a dependency of mediaref: without it, selecting this codec raises
:class:`~mediaref.media.video.decoders.errors.VideoCodecUnavailableError` when the decoder is
built. The payload passes the video allow-list of demuxers first (``_external``). Frames are checked
against ``VLLM_MAX_IMAGE_PIXELS`` on the header's size, and the kept frames' RGB bytes are charged
to the request's budget before they are allocated; unlike the PyAV codec, OpenCV cannot be told
to refuse a larger frame midway, so a stream that changes size fails the decode instead.
"""

from __future__ import annotations

import io
import logging
from collections import deque
from typing import Any

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

_INSTALL = "opencv-python-headless >= 4.11"


def cv2_module() -> Any:
    """``cv2``, imported on first use (VideoCodecUnavailableError when it is not installed)."""
    return import_optional("cv2", codec="opencv", install=_INSTALL)


def opencv_unavailable_reason() -> str | None:
    """Why the OpenCV codec cannot decode here, or None when it can."""
    reason = optional_unavailable_reason("cv2", codec="opencv", install=_INSTALL)
    if reason is None and OpenCVVideoBackendMixin.get_cv2_video_api() is None:
        return "this OpenCV build has no backend that reads videos from memory (needs >= 4.11)"
    return reason


def decode_opencv(
    loader_cls: Any,
    data: bytes,
    target: VideoTargetMetadata,
    sampling_kwargs: dict[str, Any],
    *,
    frame_recovery: bool = False,
) -> tuple[np.ndarray, VideoSourceMetadata, list[int], list[int]]:
    """``(frames, source, frame_idx, valid)`` of the frames ``loader_cls`` samples from ``data``."""
    cv2 = cv2_module()
    admit_container(data)
    cap = OpenCVVideoBackendMixin.open_video_capture(data)
    try:
        check_frame_pixel_limit(
            int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        )
        source = loader_cls._prepare_source(OpenCVVideoBackendMixin.get_video_metadata(data))
        frame_idx = [
            int(i)
            for i in loader_cls.compute_frames_index_to_sample(
                source=source, target=target, **sampling_kwargs
            )
        ]
        frames, valid = loader_cls.read_frames(
            cap, frame_idx, total_frames_num=source.total_frames_num, frame_recovery=frame_recovery
        )
    finally:
        cap.release()
    return frames, source, frame_idx, valid


class OpenCVVideoBackendMixin:
    """OpenCV's side of the codec: opening, counting and reading frames from a capture."""

    @staticmethod
    def get_cv2_video_api() -> int | None:
        """The first OpenCV video backend that can read from a Python stream, or None.

        A plugin backend (rather than one built in) qualifies from plugin ABI 1, API 2 on.
        """
        registry = cv2_module().videoio_registry
        for backend in registry.getStreamBufferedBackends():
            if not registry.hasBackend(backend):
                continue
            if not registry.isBackendBuiltIn(backend):
                _, abi, api = registry.getStreamBufferedBackendPluginVersion(backend)
                if (abi, api) < (1, 2):
                    continue
            return int(backend)
        return None

    @classmethod
    def open_video_capture(cls, data: bytes) -> MemoryVideoCapture:
        """A capture reading ``data``; ValueError when OpenCV cannot open it."""
        cap = MemoryVideoCapture(data, cls._stream_api())
        if not cap.isOpened():
            cap.release()
            raise ValueError("Could not open video stream")
        return cap

    @classmethod
    def demux_count_frames(cls, data: bytes) -> int:
        """The number of video packets, counted without decoding (OpenCV's raw-demux mode)."""
        cv2 = cv2_module()
        cap = MemoryVideoCapture(data, cls._stream_api(), [cv2.CAP_PROP_FORMAT, -1])
        try:
            count = 0
            while cap.grab():
                count += 1
        finally:
            cap.release()
        if count == 0:
            raise ValueError("Could not determine the number of video frames")
        return count

    @classmethod
    def _stream_api(cls) -> int:
        api = cls.get_cv2_video_api()
        if api is None:
            raise ValueError("Could not open video stream: OpenCV cannot read from memory")
        return api

    @staticmethod
    def get_video_metadata(data: bytes) -> VideoSourceMetadata:
        """Frame count, rate and duration of ``data`` as OpenCV reports them.

        A container without a frame count (streamed WebM/MKV, raw H.264) is counted by demuxing.
        A count that an MP4 edit list overstates (frames hidden by a lossless trim) is corrected
        by seeking to the end, trusted only when the stream really ends there and the two
        differ by more than one frame.
        """
        cv2 = cv2_module()
        cap = OpenCVVideoBackendMixin.open_video_capture(data)
        try:
            total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
            fps = float(cap.get(cv2.CAP_PROP_FPS))
            if total <= 0:
                total = OpenCVVideoBackendMixin.demux_count_frames(data)
            elif cap.set(cv2.CAP_PROP_POS_AVI_RATIO, 1.0):
                presentable = int(cap.get(cv2.CAP_PROP_POS_FRAMES))
                ended = not cap.grab()
                if ended and 0 < presentable < total - 1:
                    logger.warning(
                        "the video header counts %d frames, %d are presentable; sampling over "
                        "the presentable ones",
                        total,
                        presentable,
                    )
                    total = presentable
        finally:
            cap.release()
        return VideoSourceMetadata(total, fps, total / fps if fps > 0 else 0)

    @classmethod
    def read_frames(
        cls,
        cap: Any,
        frame_idx: list[int],
        total_frames_num: int,
        *,
        frame_recovery: bool = False,
    ) -> tuple[np.ndarray, list[int]]:
        """The frames at ``frame_idx`` (each once, ascending) and the indices actually read.

        Reads forward from the capture's start, decoding only the wanted frames. With
        ``frame_recovery`` a wanted frame that fails is replaced by the next frame that reads,
        if one does before the next wanted frame (its own index is reported); otherwise a
        failed frame is skipped.
        """
        wanted = sorted(set(frame_idx))
        if not wanted:
            return np.empty((0, 0, 0, 3), dtype=np.uint8), []
        cv2 = cv2_module()
        width = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
        height = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        if width <= 0 or height <= 0:
            raise ValueError(f"Invalid video frame size: width={width}, height={height}")
        charge_rgb_frames(len(wanted), height, width)  # before the stack is allocated
        frames = np.empty((len(wanted), height, width, 3), dtype=np.uint8)
        reader = _ForwardReader(cv2, cap, frames)
        valid = reader.read(wanted, total_frames_num, recover=frame_recovery)
        if len(valid) < len(wanted):
            logger.warning(
                "video loading read %d of the %d frames sampled (%d broken or unreadable)",
                len(valid),
                len(wanted),
                len(wanted) - len(valid),
            )
        return frames[: len(valid)], valid


def read_frames_seeking(
    cv2: Any, cap: Any, wanted: list[int], *, max_gap: int
) -> tuple[np.ndarray, list[int]]:
    """The frames at ``wanted`` (ascending, distinct), skipping a gap of up to ``max_gap``
    frames by grabbing through it and a longer one by seeking; a frame that will not read is
    skipped, and the next one seeks to its target."""
    if not wanted:
        return np.empty((0, 0, 0, 3), dtype=np.uint8), []
    width = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
    height = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    if width <= 0 or height <= 0:
        raise ValueError(f"Invalid video frame size: width={width}, height={height}")
    charge_rgb_frames(len(wanted), height, width)  # before the stack is allocated
    frames = np.empty((len(wanted), height, width, 3), dtype=np.uint8)
    valid: list[int] = []
    upcoming: int | None = None  # the index the next read returns, when known
    for index in wanted:
        if upcoming is not None and 1 <= index - upcoming < max_gap:
            skipped = all(cap.grab() for _ in range(index - upcoming))
            upcoming = index if skipped else None
        if upcoming != index:
            cap.set(cv2.CAP_PROP_POS_FRAMES, index)
        ok, frame = cap.read()
        if ok:
            frames[len(valid)] = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
            valid.append(index)
            upcoming = index + 1
        else:
            upcoming = None
    if len(valid) < len(wanted):
        logger.warning("video loading read %d of the %d frames sampled", len(valid), len(wanted))
    return frames[: len(valid)], valid


class MemoryVideoCapture:
    """A ``cv2.VideoCapture`` over bytes in memory, holding the stream it reads.

    OpenCV's Python binding does not keep the stream object alive: once the caller's last
    reference goes, the next seek or ``release()`` reads freed memory (a crash, not an error).
    This owns both and releases the capture before the stream. It offers the capture's calls
    the codec and loaders use; ``capture`` is the ``cv2.VideoCapture`` itself.
    """

    def __init__(self, data: bytes, api: int, params: list[int] | None = None) -> None:
        self._stream = io.BytesIO(data)
        self.capture = cv2_module().VideoCapture(self._stream, api, params or [])

    def isOpened(self) -> bool:
        return bool(self.capture.isOpened())

    def get(self, prop: int) -> float:
        return float(self.capture.get(prop))

    def set(self, prop: int, value: float) -> bool:
        return bool(self.capture.set(prop, value))

    def grab(self) -> bool:
        return bool(self.capture.grab())

    def retrieve(self) -> tuple[bool, Any]:
        ok, frame = self.capture.retrieve()
        return bool(ok), frame

    def read(self) -> tuple[bool, Any]:
        ok, frame = self.capture.read()
        return bool(ok), frame

    def release(self) -> None:
        self.capture.release()

    def __del__(self) -> None:
        # Attributes are dropped in no guaranteed order; the capture must go first.
        capture = getattr(self, "capture", None)
        if capture is not None:
            capture.release()


class _ForwardReader:
    """One forward pass over a capture, keeping the wanted frames in a preallocated stack."""

    def __init__(self, cv2: Any, cap: Any, frames: np.ndarray) -> None:
        self._cv2, self._cap, self._frames = cv2, cap, frames
        self.valid: list[int] = []

    def _keep(self, index: int) -> bool:
        if len(self.valid) == len(self._frames):
            return False
        ok, frame = self._cap.retrieve()
        if not ok or frame is None or frame.size == 0:
            return False
        self._frames[len(self.valid)] = self._cv2.cvtColor(frame, self._cv2.COLOR_BGR2RGB)
        self.valid.append(index)
        return True

    def read(self, wanted: list[int], total: int, *, recover: bool) -> list[int]:
        wanted_set = set(wanted)
        last = wanted[-1]
        # A failed frame may be replaced by a later one only until the next wanted frame.
        window_end = dict(zip(wanted, [*wanted[1:], max(total, last + 1)], strict=True))
        failed: deque[int] = deque()
        index = 0
        while index <= last or failed:
            while failed and index >= window_end[failed[0]]:
                failed.popleft()  # its window closed before a frame could stand in for it
            if index > last and not failed:
                break
            is_wanted = index in wanted_set
            if not self._cap.grab():
                if index >= total:
                    break  # past the frames the container counts, a failed grab is its end
                if is_wanted and recover:
                    failed.append(index)
            elif is_wanted:
                if not self._keep(index) and recover:
                    failed.append(index)
            elif failed and self._keep(index):
                logger.info("video frame %d replaced by frame %d", failed.popleft(), index)
            index += 1
        return self.valid


__all__ = [
    "MemoryVideoCapture",
    "OpenCVVideoBackendMixin",
    "cv2_module",
    "decode_opencv",
    "opencv_unavailable_reason",
    "read_frames_seeking",
]
