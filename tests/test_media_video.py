"""VideoMediaIO, the video loader registry and the PyAV backend, on generated clips.

Every clip paints each frame's index into the frame (tests/_video_samples.py), so the tests check
which frames came back, not only how many.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from typing import Any, ClassVar

import av
import numpy as np
import pybase64
import pytest
import soundfile
from PIL import Image

import mediaref.media.video._pyav_container as pyav_container
import mediaref.media.video._pyav_decode as pyav_decode
from _audio_samples import encode_pyav
from _image_samples import encode
from _video_samples import (
    encoder_unavailable_reason,
    frame_pattern,
    make_clip,
    read_frame_index,
)
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.base import derive_media_key
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import RawBytesVideoMediaIO, VideoMediaIO
from mediaref.video import VIDEO_LOADER_REGISTRY, PyAVVideoBackend, sample_frame_indices

# (codec, container): every codec in the container it usually travels in, plus the containers
# whose headers carry no frame count (webm, matroska, mpegts) and MPEG-TS with B-frames, whose
# demuxer seeks by decode time and lands past its target.
CODEC_CASES = [
    ("h264", "mp4"),
    ("h264_bframes", "mp4"),
    ("hevc", "mp4"),
    ("vp9", "webm"),
    ("av1", "mp4"),
    ("av1", "webm"),
    ("mpeg4", "mp4"),
    ("h264", "matroska"),
    ("h264_bframes", "mpegts"),
]


def _clip_or_skip(codec: str, container: str, **kwargs: Any) -> bytes:
    reason = encoder_unavailable_reason(codec)
    if reason is not None:
        pytest.skip(reason)
    return make_clip(codec, container, **kwargs)


def video_io(**kwargs: Any) -> VideoMediaIO:
    return VideoMediaIO(ImageMediaIO(), **kwargs)


def painted_indices(frames: np.ndarray) -> list[int]:
    return [read_frame_index(frame) for frame in frames]


def chosen_frames(wanted: list[int]) -> type[PyAVVideoBackend]:
    """The PyAV loader sampling exactly ``wanted`` (the sampling rule is a loader's hook)."""

    class ChosenFrames(PyAVVideoBackend):
        @classmethod
        def compute_frames_index_to_sample(
            cls, source: Any, target: Any, **kwargs: Any
        ) -> list[int]:
            return list(wanted)

    return ChosenFrames


# --- frames and metadata --------------------------------------------------------------------


@pytest.mark.parametrize(("codec", "container"), CODEC_CASES)
def test_every_frame_comes_back_in_order(codec: str, container: str) -> None:
    data = _clip_or_skip(codec, container)

    frames, metadata = video_io(num_frames=-1).load_bytes(data)

    assert frames.dtype == np.uint8 and frames.shape == (30, 48, 64, 3)
    assert painted_indices(frames) == list(range(30))
    assert metadata["total_num_frames"] == 30
    assert metadata.details["total_num_frames_source"] == "decode"
    assert metadata["frames_indices"] == list(range(30))
    assert metadata["do_sample_frames"] is True  # nothing sampled: the HF processor may sample
    assert metadata["fps"] == 30.0 and metadata["duration"] == pytest.approx(1.0)
    assert metadata["video_backend"] == "pyav"
    assert (metadata["width"], metadata["height"]) == (64, 48)


@pytest.mark.parametrize(("codec", "container"), CODEC_CASES)
def test_sampled_frames_equal_those_of_a_sequential_decode(codec: str, container: str) -> None:
    data = _clip_or_skip(codec, container, num_frames=120, keyframe_interval=10)
    every_frame, _ = video_io(num_frames=-1).load_bytes(data)

    frames, metadata = video_io(num_frames=5).load_bytes(data)

    expected = np.linspace(0, 119, 5, dtype=int).tolist()  # vLLM's uniform sampling
    assert metadata["frames_indices"] == expected == painted_indices(frames)
    np.testing.assert_array_equal(frames, every_frame[expected])
    assert metadata["do_sample_frames"] is False  # already sampled: HF must not sample again
    assert metadata["total_num_frames"] == 120
    # Gaps of 30 frames with a keyframe every 10: seeking skips most of the clip.
    assert metadata.details["num_decoded_frames"] < 120


@pytest.mark.parametrize("num_frames", [-1, 4])
def test_the_metadata_is_what_transformers_video_metadata_takes(num_frames: int) -> None:
    # vLLM's Qwen2.5-VL, Qwen3-VL and GLM-4.1V model files build transformers.VideoMetadata from
    # every key but do_sample_frames: a key vLLM's loaders never set would fail the request.
    from transformers.video_utils import VideoMetadata

    data = _clip_or_skip("h264", "mp4", num_frames=30)
    _, metadata = video_io(num_frames=num_frames).load_bytes(data)

    fields = {key: value for key, value in metadata.items() if key != "do_sample_frames"}
    hf = VideoMetadata(**fields)
    assert hf.total_num_frames == 30 and (hf.width, hf.height) == (64, 48)
    assert metadata.details["codec"] == "h264"  # what the decode saw, beside the dict


@pytest.mark.parametrize(
    ("container", "declared"), [("mp4", 120), ("webm", None), ("matroska", None)]
)
def test_header_frame_count_is_kept_apart_from_the_counted_one(
    container: str, declared: int | None
) -> None:
    codec = "vp9" if container == "webm" else "h264"
    data = _clip_or_skip(codec, container, num_frames=120)

    _, metadata = video_io(num_frames=4).load_bytes(data)

    assert metadata.details["header_num_frames"] == declared
    assert metadata["total_num_frames"] == 120
    assert metadata.details["total_num_frames_source"] == "demux"
    assert metadata["duration"] == pytest.approx(4.0)


def test_sampling_seeks_instead_of_decoding_the_whole_video(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = make_clip("h264", "mp4", num_frames=300, keyframe_interval=30)

    frames, metadata = video_io(num_frames=4).load_bytes(data)

    assert metadata["frames_indices"] == [0, 99, 199, 299] == painted_indices(frames)
    # Frame 0, then keyframes 90, 180, 270 decoded forward to 99, 199, 299: about 61 frames.
    assert metadata.details["num_decoded_frames"] < 100
    # The counter is honest: with seeking disabled the same frames cost the whole clip.
    monkeypatch.setattr(pyav_decode, "MIN_FRAMES_SKIPPED_BY_SEEK", 10**9)
    sequential, sequential_metadata = video_io(num_frames=4).load_bytes(data)
    assert sequential_metadata.details["num_decoded_frames"] == 300
    np.testing.assert_array_equal(frames, sequential)


@pytest.mark.parametrize(("codec", "container"), CODEC_CASES)
def test_every_long_gap_is_seeked_over_in_every_container(codec: str, container: str) -> None:
    data = _clip_or_skip(codec, container, num_frames=300, keyframe_interval=30)

    frames, metadata = video_io(num_frames=4).load_bytes(data)

    assert metadata["frames_indices"] == [0, 99, 199, 299] == painted_indices(frames)
    # Frame 0, then from keyframes 90, 180 and 270 up to 99, 199 and 299: 1 + 10 + 20 + 30.
    # Decoding through any one gap instead would add at least 60 frames; a few extra are
    # allowed for demuxers that land a little before the keyframe (MPEG-TS seeks by DTS).
    ideal = 61
    assert metadata.details["num_decoded_frames"] < ideal + 10
    if codec != "h264_bframes":  # H.264's unwanted B-frames are not decoded at all (below)
        assert ideal <= metadata.details["num_decoded_frames"]


@pytest.mark.parametrize("container", ["mp4", "mpegts"])
def test_unwanted_h264_nonreference_frames_are_not_decoded(
    container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One GOP: no seek, so every frame up to the last wanted one passes the decoder.
    data = make_clip("h264_bframes", container, num_frames=120, keyframe_interval=120)
    every_frame, _ = video_io(num_frames=-1).load_bytes(data)

    frames, metadata = video_io(num_frames=5).load_bytes(data)

    expected = np.linspace(0, 119, 5, dtype=int).tolist()
    assert metadata["frames_indices"] == expected == painted_indices(frames)
    np.testing.assert_array_equal(frames, every_frame[expected])
    skipped = 120 - metadata.details["num_decoded_frames"]
    assert skipped >= 20  # x264 with 3 B-frames: most frames between the wanted ones
    # Without the skip, the same frames cost every one.
    monkeypatch.setattr(pyav_decode, "SKIPPABLE_NONREF_CODECS", frozenset())
    unskipped, unskipped_metadata = video_io(num_frames=5).load_bytes(data)
    assert unskipped_metadata.details["num_decoded_frames"] == 120
    np.testing.assert_array_equal(unskipped, frames)


def test_wanted_frames_right_after_a_seek_are_decoded() -> None:
    """The skip is the codec's state, not a generator's: after a seek from a run of unwanted
    frames, a keyframe and the non-reference frames after it that are all wanted must decode."""
    data = make_clip("h264_bframes", "mp4", num_frames=120, keyframe_interval=30)
    wanted = [0, *range(60, 70)]  # frames 1..59 unwanted, then a seek to keyframe 60

    frames, metadata = chosen_frames(wanted).load_bytes(data, num_frames=len(wanted))

    assert painted_indices(frames) == metadata["frames_indices"] == wanted


def test_the_counting_fallback_decodes_every_frame_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Frames found by counting must all come out of the decoder: the skip of unwanted
    non-reference frames ends with the timestamp search that asked for it."""
    data = make_clip("h264_bframes", "mp4", num_frames=60, keyframe_interval=60)
    keep_by_timestamp = pyav_decode._keep_by_timestamp

    def timestamps_fail_midway(decoder: Any, index: Any, wanted: Any, collector: Any) -> None:
        keep_by_timestamp(decoder, index, wanted[:2], collector)  # some kept, with the skip on
        raise pyav_decode.TimestampsUnusableError("decoded timestamps go backwards")

    monkeypatch.setattr(pyav_decode, "_keep_by_timestamp", timestamps_fail_midway)
    frames, metadata = video_io(num_frames=6).load_bytes(data)

    expected = np.linspace(0, 59, 6, dtype=int).tolist()
    assert metadata["frames_indices"] == expected == painted_indices(frames)


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each open of a payload by the video decode, as it happens."""
    opens: list[str] = []
    real_open = pyav_container.open_input

    def counted(data: bytes, *args: Any, **kwargs: Any) -> Any:
        opens.append("open")
        return real_open(data, *args, **kwargs)

    monkeypatch.setattr(pyav_container, "open_input", counted)
    return opens


# Every codec case, and a fragmented MP4 (its samples in moof boxes, found through the fragments).
REWIND_CASES = [
    *((codec, container, None) for codec, container in CODEC_CASES),
    ("h264_bframes", "mp4", "frag_keyframe+empty_moov"),
]


@pytest.mark.parametrize("num_frames", [-1, 5], ids=["every-frame", "sampled"])
@pytest.mark.parametrize(("codec", "container", "movflags"), REWIND_CASES)
def test_an_mp4_is_decoded_after_one_open_as_after_two(
    codec: str,
    container: str,
    movflags: str | None,
    num_frames: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After indexing, an ISO BMFF payload rewinds to its first packet instead of being opened
    again; the frames and metadata are those of the reopened decode. Other containers reopen."""
    data = _clip_or_skip(codec, container, num_frames=120, keyframe_interval=10, movflags=movflags)
    rewindable = pyav_decode.REWINDABLE_DEMUXERS
    monkeypatch.setattr(pyav_decode, "REWINDABLE_DEMUXERS", frozenset())
    reopened, reopened_metadata = video_io(num_frames=num_frames).load_bytes(data)
    monkeypatch.setattr(pyav_decode, "REWINDABLE_DEMUXERS", rewindable)
    opens = _count_opens(monkeypatch)

    frames, metadata = video_io(num_frames=num_frames).load_bytes(data)

    assert len(opens) == (1 if container == "mp4" else 2)
    np.testing.assert_array_equal(frames, reopened)
    assert metadata == reopened_metadata


def test_a_rewind_that_lands_on_another_packet_reopens(monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_clip("h264_bframes", "mp4", num_frames=60, keyframe_interval=60)
    expected, _ = video_io(num_frames=5).load_bytes(data)
    real_mark = pyav_decode.packet_mark
    # The check after the seek sees a packet other than the one the index started from.
    monkeypatch.setattr(pyav_decode, "packet_mark", lambda p: (*real_mark(p)[:3], -1))
    opens = _count_opens(monkeypatch)

    frames, metadata = video_io(num_frames=5).load_bytes(data)

    assert len(opens) == 2
    np.testing.assert_array_equal(frames, expected)
    assert metadata["frames_indices"] == painted_indices(frames)


def test_a_rewind_whose_seek_fails_reopens(monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_clip("h264", "mp4", num_frames=30)
    expected, _ = video_io(num_frames=-1).load_bytes(data)
    real_open = pyav_decode.open_video_stream

    class SeekFails:
        def __init__(self, container: Any) -> None:
            self._container = container

        def __getattr__(self, name: str) -> Any:
            return getattr(self._container, name)

        def seek(self, *args: Any, **kwargs: Any) -> None:
            raise av.InvalidDataError(1094995529, "Invalid data found when processing input")

    @contextlib.contextmanager
    def opened(data: bytes, **kwargs: Any) -> Iterator[tuple[Any, Any]]:
        with real_open(data, **kwargs) as (container, stream):
            yield SeekFails(container), stream

    monkeypatch.setattr(pyav_decode, "open_video_stream", opened)
    opens = _count_opens(monkeypatch)

    frames, _ = video_io(num_frames=-1).load_bytes(data)

    assert len(opens) == 2
    np.testing.assert_array_equal(frames, expected)


def test_a_gap_is_seeked_over_exactly_when_it_skips_enough_frames() -> None:
    """Pins the rule at its boundary: a seek to the keyframe before the next wanted frame
    happens when it skips MIN_FRAMES_SKIPPED_BY_SEEK frames past the last one kept, not later."""
    data = make_clip("h264", "mp4", num_frames=120, keyframe_interval=30)
    keyframe, target = 30, 50
    # The last kept frame that leaves exactly the minimum skip between it and the keyframe.
    last = keyframe - pyav_decode.MIN_FRAMES_SKIPPED_BY_SEEK - 1
    assert 0 < last < keyframe
    decoded = {}
    for kept in (last, last + 1):
        wanted = [0, kept, target]

        frames, metadata = chosen_frames(wanted).load_bytes(data, num_frames=3)
        assert painted_indices(frames) == metadata["frames_indices"] == wanted
        decoded[kept] = metadata.details["num_decoded_frames"]

    # At the boundary: frames 0..last, then the keyframe up to the target.
    assert decoded[last] == (last + 1) + (target - keyframe + 1)
    # One frame short of it: decoding through is cheaper, so every frame up to the target.
    assert decoded[last + 1] == target + 1


def test_more_frames_than_the_video_has_returns_each_frame_once() -> None:
    frames, metadata = video_io(num_frames=200).load_bytes(make_clip())

    assert painted_indices(frames) == metadata["frames_indices"] == list(range(30))
    assert metadata["do_sample_frames"] is True


@pytest.mark.parametrize(
    ("num_frames", "fps", "expected"),
    [
        (-1, 1.0, [0, 39, 79, 119]),  # 4 s at 1 fps: 4 frames
        (2, 1.0, [0, 119]),  # num_frames caps the fps count
        (-1, 2.0, np.linspace(0, 119, 8, dtype=int).tolist()),
        (-1, 60.0, list(range(120))),  # faster than the video: every frame
    ],
)
def test_fps_sampling_takes_the_smaller_of_the_two_counts(
    num_frames: int, fps: float, expected: list[int]
) -> None:
    data = make_clip(num_frames=120)

    frames, metadata = video_io(num_frames=num_frames, fps=fps).load_bytes(data)

    assert metadata["frames_indices"] == expected == painted_indices(frames)


def test_metadata_is_plain_json() -> None:
    _, metadata = video_io(num_frames=4).load_bytes(make_clip())

    assert json.loads(json.dumps(metadata)) == metadata  # no numpy scalars in the indices


def test_resolution_change_mid_stream_keeps_the_first_size() -> None:
    # Two MPEG-TS streams joined end to end: a new resolution, and timestamps that restart.
    small = make_clip("h264", "mpegts", num_frames=20, width=64, height=48)
    large = make_clip("h264", "mpegts", num_frames=20, width=128, height=96)

    every_frame, _ = video_io(num_frames=-1).load_bytes(small + large)
    frames, metadata = video_io(num_frames=5).load_bytes(small + large)

    assert every_frame.shape == (40, 48, 64, 3)
    assert metadata["frames_indices"] == [0, 9, 19, 29, 39]
    assert painted_indices(frames[:3]) == [0, 9, 19]  # counted, since the timestamps repeat
    np.testing.assert_array_equal(frames, every_frame[metadata["frames_indices"]])


def test_sample_frame_indices_follows_vllm() -> None:
    assert sample_frame_indices(10, 4, None, 30.0) == [0, 3, 6, 9]
    assert sample_frame_indices(3, 8, None, 30.0) == [0, 1, 2]  # never repeats a frame
    assert sample_frame_indices(300, -1, 0.5, 30.0) == [0, 74, 149, 224, 299]  # 10 s at 0.5 fps
    assert sample_frame_indices(300, -1, 0.001, 30.0) == [0]  # at least one frame
    assert sample_frame_indices(30, -1, 1.0, 0.0) == list(range(30))  # rate unknown: no fps cap


# --- settings and keys ----------------------------------------------------------------------


@pytest.mark.parametrize("num_frames", [0, -2])
def test_invalid_num_frames_is_rejected_at_construction(num_frames: int) -> None:
    with pytest.raises(ValueError, match="num_frames"):
        video_io(num_frames=num_frames)


def test_invalid_fps_is_rejected_and_vllms_sentinel_means_no_cap() -> None:
    with pytest.raises(ValueError, match="fps"):
        video_io(fps=0)
    with pytest.raises(TypeError, match="fps"):
        video_io(fps="2")
    assert video_io(fps=-1).get_decode_spec() == video_io().get_decode_spec()


def test_spec_holds_every_output_affecting_setting() -> None:
    settings = video_io(num_frames=8, fps=2.0).get_decode_spec().settings

    assert settings == {
        "modality": "video",
        "decoder": PyAVVideoBackend.decoder_version,
        "video_backend": "pyav",
        "num_frames": 8,
        "fps": 2.0,
        "loader_kwargs": {},
    }


def test_settings_change_the_key_of_the_same_bytes() -> None:
    data = make_clip()
    keys = {
        video_io(num_frames=8).load_bytes_ref(data).key,
        video_io(num_frames=16).load_bytes_ref(data).key,
        video_io(num_frames=8, fps=1.0).load_bytes_ref(data).key,
        RawBytesVideoMediaIO().load_bytes_ref(data).key,
    }
    assert len(keys) == 4
    same_settings = video_io(num_frames=8).load_bytes_ref(data).key
    assert same_settings == video_io(num_frames=8).load_bytes_ref(data).key


def test_refs_are_lazy_and_decode_to_load_bytes() -> None:
    data = make_clip()
    ref = video_io(num_frames=4).load_bytes_ref(data)

    assert not ref.is_decoded
    frames, metadata = ref.decode()
    expected_frames, expected_metadata = video_io(num_frames=4).load_bytes(data)
    np.testing.assert_array_equal(frames, expected_frames)
    assert metadata == expected_metadata


def test_other_base64_media_types_decode_the_container() -> None:
    data = make_clip()
    text = pybase64.b64encode(data).decode("ascii")
    decoder = video_io(num_frames=4)

    frames, _ = decoder.load_base64("video/mp4", text)

    np.testing.assert_array_equal(frames, decoder.load_bytes(data)[0])
    assert decoder.load_base64_ref("video/mp4", text).key == decoder.load_bytes_ref(data).key


def test_encoded_size_cap_applies_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAREF_MAX_VIDEO_FILESIZE_MB", "0.001")  # 1048 bytes
    data = make_clip()
    assert len(data) > 1048

    with pytest.raises(MediaTooLargeError, match="video"):
        video_io().load_bytes_ref(data)
    with pytest.raises(MediaTooLargeError, match="video"):
        video_io().load_base64_ref("video/jpeg", "A" * 2000)
    with pytest.raises(MediaTooLargeError, match="video"):
        RawBytesVideoMediaIO().load_bytes_ref(data)


# --- the loader registry --------------------------------------------------------------------


@pytest.fixture
def recording_backend():
    """A loader registered as "test-recording" for one test, with one option of its own."""

    @VIDEO_LOADER_REGISTRY.register("test-recording")
    class RecordingLoader:
        decoder_version: ClassVar[str] = "test-recording/1"
        calls: ClassVar[list[tuple[Any, ...]]] = []

        @classmethod
        def load_bytes(
            cls, data: bytes, num_frames: int = -1, fps: float | None = None, *, level: int = 0
        ) -> tuple[np.ndarray, dict[str, Any]]:
            cls.calls.append((data, num_frames, fps, level))
            return np.full((1, 2, 2, 3), level, np.uint8), {"video_backend": "test-recording"}

    yield RecordingLoader
    VIDEO_LOADER_REGISTRY.unregister("test-recording")


def test_unknown_backend_error_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"'nope'.*'pyav'"):
        VIDEO_LOADER_REGISTRY.load("nope")
    with pytest.raises(ValueError, match=r"'nope'.*'pyav'"):
        video_io(video_backend="nope")


def test_unknown_backend_raises_as_vllms_registry_does() -> None:
    # vLLM's ExtensionManager.load: assert cls is not None, f"Extension class {name} not found".
    with pytest.raises(AssertionError, match=r"^Extension class nope not found"):
        VIDEO_LOADER_REGISTRY.load("nope")
    with pytest.raises(AssertionError, match=r"^Extension class nope not found"):
        video_io(video_backend="nope")


def test_pyav_is_registered_as_the_default() -> None:
    assert VIDEO_LOADER_REGISTRY.get("pyav") is PyAVVideoBackend
    assert isinstance(VIDEO_LOADER_REGISTRY.load("pyav"), PyAVVideoBackend)  # vLLM builds one
    assert video_io().video_backend == "pyav"


def test_backend_options_reach_the_loader_and_the_spec(recording_backend: Any) -> None:
    decoder = video_io(video_backend="test-recording", num_frames=3, fps=2.0, level=7)

    frames, _ = decoder.load_bytes(b"payload")

    assert recording_backend.calls == [(b"payload", 3, 2.0, 7)]
    assert frames[0, 0, 0, 0] == 7
    settings = decoder.get_decode_spec().settings
    assert settings["loader_kwargs"] == {"level": 7}
    assert settings["decoder"] == "test-recording/1"
    assert settings["video_backend"] == "test-recording"


def test_unknown_backend_option_is_rejected(recording_backend: Any) -> None:
    with pytest.raises(TypeError, match=r"'test-recording'.*\['levle'\]"):
        video_io(video_backend="test-recording", levle=7)
    with pytest.raises(TypeError, match=r"'pyav'.*\['level'\]"):
        video_io(level=7)


def test_environment_chooses_the_backend_and_an_explicit_one_wins(
    recording_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_VIDEO_LOADER_BACKEND", "test-recording")

    assert video_io().video_backend == "test-recording"
    assert video_io(video_backend="pyav").video_backend == "pyav"


def test_a_taken_backend_name_is_not_silently_replaced(recording_backend: Any) -> None:
    with pytest.raises(ValueError, match="already registered"):

        @VIDEO_LOADER_REGISTRY.register("test-recording")
        class Impostor:
            pass

    assert VIDEO_LOADER_REGISTRY.get("test-recording") is recording_backend


# --- video/jpeg frame sequences ---------------------------------------------------------------


def _jpeg_frames_text(indices: list[int]) -> str:
    encoded = []
    for index in indices:
        frame = encode(Image.fromarray(frame_pattern(index, 64, 48)), "JPEG", quality=95)
        encoded.append(pybase64.b64encode(frame).decode("ascii"))
    return ",".join(encoded)


def test_jpeg_frames_decode_into_a_stack() -> None:
    text = _jpeg_frames_text([5, 9, 12])

    frames, metadata = video_io().load_base64("video/jpeg", text)

    assert frames.dtype == np.uint8 and frames.shape == (3, 48, 64, 3)
    assert painted_indices(frames) == [5, 9, 12]
    assert metadata["video_backend"] == "jpeg_sequence"  # vLLM's name for this form
    assert metadata["total_num_frames"] == 3 and metadata["frames_indices"] == [0, 1, 2]
    # vLLM's default rate for a frame sequence is 1 fps.
    assert metadata["fps"] == 1.0 and metadata["duration"] == pytest.approx(3.0)
    assert video_io(fps=4.0).load_base64("VIDEO/JPEG", text)[1]["fps"] == 4.0


def test_jpeg_frames_keep_only_the_first_num_frames() -> None:
    # vLLM's memory protection: data.split(",", num_frames)[:num_frames]. What follows the kept
    # frames is never split or decoded, so even garbage there does not fail the video.
    text = _jpeg_frames_text([5, 9, 12, 20]) + ",!!not base64!!," + "A" * 1000

    frames, metadata = video_io(num_frames=2).load_base64("video/jpeg", text)
    assert painted_indices(frames) == [5, 9]
    assert metadata["total_num_frames"] == 2 and metadata["frames_indices"] == [0, 1]

    ref = video_io(num_frames=3).load_base64_ref("video/jpeg", text)
    assert painted_indices(ref.decode()[0]) == [5, 9, 12]
    every = video_io(num_frames=-1).load_base64("video/jpeg", _jpeg_frames_text([1, 2, 3]))[0]
    assert painted_indices(every) == [1, 2, 3]


def test_jpeg_frames_key_names_num_frames() -> None:
    text = _jpeg_frames_text([1, 2, 3])

    refs = [video_io(num_frames=n).load_base64_ref("video/jpeg", text) for n in (2, 3, -1)]

    assert [ref.spec.settings["num_frames"] for ref in refs] == [2, 3, -1]
    assert len({ref.key for ref in refs}) == 3


def test_jpeg_frames_ref_is_keyed_by_the_base64_text() -> None:
    text = _jpeg_frames_text([1, 2])
    decoder = video_io()

    ref = decoder.load_base64_ref("video/jpeg", text)

    assert not ref.is_decoded
    assert ref.spec.settings["media_type"] == "video/jpeg"
    assert ref.spec.settings["image"] == ImageMediaIO().get_decode_spec().settings
    assert ref.key == derive_media_key(text.encode("utf-8"), ref.spec)
    np.testing.assert_array_equal(ref.decode()[0], decoder.load_base64("video/jpeg", text)[0])
    assert video_io(fps=4.0).load_base64_ref("video/jpeg", text).key != ref.key


def test_encode_base64_round_trips_through_jpeg_frames() -> None:
    decoder = video_io()
    frames = np.stack([frame_pattern(i, 64, 48) for i in (3, 4)])

    decoded, _ = decoder.load_base64("video/jpeg", decoder.encode_base64(frames))

    assert painted_indices(decoded) == [3, 4]


def test_a_bad_jpeg_frame_fails_at_decode_time_naming_the_frame() -> None:
    text = _jpeg_frames_text([1]) + "," + pybase64.b64encode(b"not a jpeg").decode("ascii")

    ref = video_io().load_base64_ref("video/jpeg", text)
    with pytest.raises(ValueError, match=r"^Failed to decode video: JPEG frame 1"):
        ref.decode()


def test_a_jpeg_frame_over_the_pixel_cap_keeps_its_error_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "100")  # each 64x48 frame has 3072
    ref = video_io().load_base64_ref("video/jpeg", _jpeg_frames_text([1, 2]))

    with pytest.raises(MediaTooLargeError):
        ref.decode()


# --- the raw-bytes decoder ------------------------------------------------------------------


def test_raw_bytes_decoder_returns_the_container_itself() -> None:
    data = make_clip()
    decoder = RawBytesVideoMediaIO()

    assert decoder.load_bytes(data) is data
    ref = decoder.load_bytes_ref(data)
    assert ref.decode() is data
    assert ref.spec.settings["video_decode"] == "raw_bytes"
    assert ref.spec.settings["modality"] == "video"
    assert ref.key != video_io().load_bytes_ref(data).key
    text = pybase64.b64encode(data).decode("ascii")
    assert decoder.load_base64("video/mp4", text) == data


def test_raw_bytes_decoder_refuses_jpeg_frames_at_decode_time() -> None:
    ref = RawBytesVideoMediaIO().load_base64_ref("video/jpeg", _jpeg_frames_text([1, 2]))

    with pytest.raises(ValueError, match=r"^Failed to decode video: .*video/jpeg"):
        ref.decode()


# --- failures ---------------------------------------------------------------------------------


def _audio_only_wav() -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(800, np.float32), 8000, format="WAV")
    return buffer.getvalue()


def _audio_only_mp4() -> bytes:
    # A container the video allow-list admits, holding no video stream.
    return encode_pyav(np.zeros(1600, np.float32), 16000, "mp4", "aac")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"", id="empty"),
        pytest.param(bytes(range(256)) * 40, id="garbage"),
        pytest.param(make_clip()[: len(make_clip()) // 2], id="truncated-mp4"),
        pytest.param(make_clip()[:64], id="header-only"),
        pytest.param(_audio_only_wav(), id="not-a-video-container"),
        pytest.param(_audio_only_mp4(), id="no-video-stream"),
    ],
)
@pytest.mark.parametrize("num_frames", [-1, 4])
def test_undecodable_payload_fails_at_decode_time_with_one_error(
    payload: bytes, num_frames: int
) -> None:
    ref = video_io(num_frames=num_frames).load_bytes_ref(payload)  # construction never decodes

    with pytest.raises(ValueError, match=r"^Failed to decode video: ") as first:
        ref.decode()
    with pytest.raises(ValueError) as second:
        ref.decode()
    assert second.value is first.value


@pytest.mark.timeout(30)
def test_truncated_stream_keeps_the_frames_before_the_cut() -> None:
    data = make_clip("vp9", "webm", num_frames=120)

    frames, metadata = video_io(num_frames=4).load_bytes(data[: len(data) // 2])

    assert 0 < metadata["total_num_frames"] < 120
    assert painted_indices(frames) == metadata["frames_indices"]


def test_a_damaged_packet_costs_its_frame_not_the_video() -> None:
    data = bytearray(make_clip("h264", "mp4", num_frames=60))
    with av.open(io.BytesIO(bytes(data))) as container:
        packets = [(p.pos, p.size) for p in container.demux(video=0) if p.size]
    position, size = packets[25]
    # Ones as NAL lengths point past the packet's end: the decoder rejects the whole packet.
    data[position : position + size] = b"\xff" * size

    frames, metadata = video_io(num_frames=-1).load_bytes(bytes(data))

    assert metadata.details["num_skipped_packets"] == 1
    assert len(frames) == metadata["total_num_frames"] == 59
    assert painted_indices(frames[:25]) == list(range(25))


def test_a_concat_script_cannot_read_local_files(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FFmpeg's concat demuxer opens the files a payload names, relative to the working directory.
    (tmp_path / "secret.mp4").write_bytes(make_clip())
    monkeypatch.chdir(tmp_path)

    with pytest.raises(ValueError, match=r"^Failed to decode video: "):
        video_io(num_frames=-1).load_bytes(b"ffconcat version 1.0\nfile secret.mp4\n")


class _TrackedContainer:
    """Forwards to a PyAV container and remembers whether it was closed."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize(
    ("payload", "num_frames"),
    [
        pytest.param(make_clip(num_frames=120), -1, id="every-frame"),
        pytest.param(make_clip(num_frames=120), 4, id="sampled-with-seeks"),
        pytest.param(_audio_only_mp4(), 4, id="no-video-stream"),
    ],
)
def test_every_opened_container_is_closed(
    payload: bytes, num_frames: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[_TrackedContainer] = []
    real_open = av.open

    def tracking_open(*args: Any, **kwargs: Any) -> _TrackedContainer:
        opened.append(_TrackedContainer(real_open(*args, **kwargs)))
        return opened[-1]

    monkeypatch.setattr(av, "open", tracking_open)
    try:
        video_io(num_frames=num_frames).load_bytes(payload)
    except ValueError:
        pass

    assert opened and all(container.closed for container in opened)
