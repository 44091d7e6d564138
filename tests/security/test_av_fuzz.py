"""Issue 9, hole 3: whatever bytes arrive, the audio and video decoders fail only as documented.

A decoder may return media, or raise ``ValueError("Failed to decode audio|video: ...")`` (422 once
the processor wraps it) or :class:`~mediaref.exceptions.MediaTooLargeError` (413). Nothing else:
no raw ``av.FFmpegError``, soundfile error, ``OSError``, ``EOFError``, ``IndexError``,
``ZeroDivisionError`` or numpy error, and no crash, hang or allocation beyond the caps.

The inputs are small real files (made with soundfile and PyAV) damaged by hypothesis: header
fields set to extremes, bytes overwritten, chunks cut or repeated, and random bytes behind real
magic prefixes. The caps are set low so that a header that lies about its size is caught by
them rather than by the machine; numpy's allocations are traced (FFmpeg's are not).
"""

from __future__ import annotations

import functools
import tracemalloc
from collections.abc import Iterator

import av
import numpy as np
import pybase64
import pytest
import soundfile as sf  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from _audio_samples import Tones, encode_pyav, encode_soundfile, sine
from _image_samples import encode
from _video_samples import make_clip
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.audio import AudioMediaIO
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO

AUDIO_DECODE_BYTES = 2 << 20
REQUEST_DECODE_BYTES = 8 << 20
FRAME_PIXELS = 256 * 256
# Traced allocations an example may peak at: the caps, plus the payload's own copies and a
# decoder's scratch block.
PEAK_ALLOWANCE = REQUEST_DECODE_BYTES + (8 << 20)

STEREO = Tones((440.0, 1000.0), (0.5, 0.25))
FUZZ_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@functools.cache
def audio_seeds() -> tuple[bytes, ...]:
    clip = sine(STEREO, 8000, 0.1)
    seeds = [
        encode_soundfile(clip, 8000, "WAV", "PCM_16"),
        encode_soundfile(clip, 8000, "FLAC", "PCM_16"),
        encode_soundfile(clip, 8000, "OGG", "VORBIS"),
        encode_pyav(sine(STEREO, 16000, 0.1), 16000, "mp4", "aac"),
        encode_pyav(sine(STEREO, 16000, 0.1), 16000, "adts", "aac"),
    ]
    if "MP3" in sf.available_formats():
        seeds.append(encode_soundfile(sine(STEREO, 16000, 0.1), 16000, "MP3", "MPEG_LAYER_III"))
    return tuple(seeds)


@functools.cache
def video_seeds() -> tuple[bytes, ...]:
    small = {"num_frames": 6, "width": 32, "height": 32, "keyframe_interval": 3}
    seeds = [make_clip("h264", "mp4", **small), make_clip("h264", "matroska", **small)]
    for codec, container in (("vp9", "webm"), ("mpeg4", "avi")):
        if codec != "vp9" or "libvpx-vp9" in av.codecs_available:
            seeds.append(make_clip(codec, container, **small))
    return tuple(seeds)


MAGIC_PREFIXES = (
    b"RIFF\x24\x00\x00\x00WAVEfmt ",
    b"fLaC\x00\x00\x00\x22",
    b"OggS\x00\x02",
    b"ID3\x04\x00",
    b"\xff\xfb\x90\x00",
    b"\xff\xf1\x50\x80",  # ADTS
    b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00",
    b"\x00\x00\x00\x08moov",
    b"\x1aE\xdf\xa3",  # EBML: matroska / webm
    b"RIFF\x00\x10\x00\x00AVI LIST",
    b"\x00\x00\x01\xba",  # MPEG program stream
    b"\x47\x40\x00\x10",  # MPEG-TS
    b"FLV\x01\x05",
    b"ffconcat version 1.0\nfile ",
    b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n",
)

EXTREMES = (0, 1, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


@st.composite
def damaged(draw: st.DrawFn, seeds: tuple[bytes, ...]) -> bytes:
    """A seed with a few damages, most of them in the first 512 bytes where headers live."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        head = min(len(data), 512)
        at = draw(st.integers(0, head - 1) | st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["extreme", "overwrite", "cut", "repeat", "drop"]))
        if kind == "extreme":
            width = draw(st.sampled_from([1, 2, 4]))
            value = draw(st.sampled_from(EXTREMES)) & ((1 << (8 * width)) - 1)
            order = draw(st.sampled_from(["big", "little"]))
            data[at : at + width] = value.to_bytes(width, order)  # type: ignore[arg-type]
        elif kind == "overwrite":
            data[at : at + 8] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "cut":
            del data[at:]
        elif kind == "repeat":
            length = draw(st.integers(1, 256))
            data[at:at] = data[at : at + length] * draw(st.integers(1, 8))
        else:
            del data[at : at + draw(st.integers(1, 64))]
    return bytes(data)


def behind_magic() -> st.SearchStrategy[bytes]:
    return st.builds(
        lambda prefix, tail: prefix + tail,
        st.sampled_from(MAGIC_PREFIXES),
        st.binary(min_size=0, max_size=2048),
    )


@pytest.fixture
def low_caps(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_BYTES", str(AUDIO_DECODE_BYTES))
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", str(REQUEST_DECODE_BYTES))
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", str(FRAME_PIXELS))
    monkeypatch.delenv("VLLM_MAX_AUDIO_DECODE_DURATION_S", raising=False)
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def _assert_documented(exc: BaseException, modality: str) -> None:
    if isinstance(exc, MediaTooLargeError):
        return
    assert type(exc) is ValueError, f"{type(exc).__name__} escaped the {modality} decoder: {exc!r}"
    assert str(exc).startswith(f"Failed to decode {modality}: "), str(exc)


def check_audio(payload: bytes) -> None:
    tracemalloc.reset_peak()
    baseline, _ = tracemalloc.get_traced_memory()
    try:
        samples, rate = AudioMediaIO().load_bytes_ref(payload).decode()
    except Exception as exc:  # judged by _assert_documented
        _assert_documented(exc, "audio")
    else:
        assert isinstance(rate, float) and rate > 0
        assert samples.dtype == np.float32 and samples.ndim in (1, 2)
        assert samples.nbytes <= AUDIO_DECODE_BYTES
    _, peak = tracemalloc.get_traced_memory()
    assert peak - baseline < PEAK_ALLOWANCE


def check_video(payload: bytes, num_frames: int) -> None:
    tracemalloc.reset_peak()
    baseline, _ = tracemalloc.get_traced_memory()
    decoder = VideoMediaIO(ImageMediaIO(), num_frames=num_frames)
    try:
        frames, metadata = decoder.load_bytes_ref(payload).decode()
    except Exception as exc:  # judged by _assert_documented
        _assert_documented(exc, "video")
    else:
        assert frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[3] == 3
        assert len(frames) == len(metadata["frames_indices"]) >= 1
        assert frames.shape[1] * frames.shape[2] <= FRAME_PIXELS
    _, peak = tracemalloc.get_traced_memory()
    assert peak - baseline < PEAK_ALLOWANCE


def test_the_seeds_decode() -> None:
    for seed in audio_seeds():
        samples, _ = AudioMediaIO().load_bytes(seed)
        assert samples.size
    for seed in video_seeds():
        frames, _ = VideoMediaIO(ImageMediaIO(), num_frames=-1).load_bytes(seed)
        assert len(frames) == 6


@pytest.mark.timeout(300)
@FUZZ_SETTINGS
@given(payload=st.deferred(lambda: damaged(audio_seeds())))
def test_damaged_audio(low_caps: None, payload: bytes) -> None:
    check_audio(payload)


@pytest.mark.timeout(300)
@FUZZ_SETTINGS
@given(payload=st.deferred(lambda: damaged(video_seeds())), num_frames=st.sampled_from([-1, 3]))
def test_damaged_video(low_caps: None, payload: bytes, num_frames: int) -> None:
    check_video(payload, num_frames)


@pytest.mark.timeout(300)
@FUZZ_SETTINGS
@given(payload=st.deferred(lambda: damaged(video_seeds() + audio_seeds())))
def test_each_decoder_on_the_other_modality(low_caps: None, payload: bytes) -> None:
    # The audio decoder reads video payloads (use_audio_in_video), and anything can be sent as
    # either.
    check_audio(payload)
    check_video(payload, 3)


@pytest.mark.timeout(300)
@FUZZ_SETTINGS
@given(payload=behind_magic())
def test_random_bytes_behind_magic_prefixes(low_caps: None, payload: bytes) -> None:
    check_audio(payload)
    check_video(payload, -1)


@functools.cache
def jpeg_seeds() -> tuple[bytes, ...]:
    return tuple(
        encode(Image.new("RGB", (size, size), (90, 40, 200)), image_format)
        for size, image_format in ((32, "JPEG"), (24, "PNG"))
    )


@pytest.mark.timeout(300)
@FUZZ_SETTINGS
@given(
    good=st.sampled_from([0, 1, 2]),
    frame=st.deferred(lambda: damaged(jpeg_seeds())),
    num_frames=st.sampled_from([-1, 2]),
)
def test_damaged_jpeg_sequences(low_caps: None, good: int, frame: bytes, num_frames: int) -> None:
    encoded = [pybase64.b64encode(jpeg_seeds()[0]).decode()] * good
    text = ",".join([*encoded, pybase64.b64encode(frame).decode()])
    tracemalloc.reset_peak()
    baseline, _ = tracemalloc.get_traced_memory()
    decoder = VideoMediaIO(ImageMediaIO(), num_frames=num_frames)
    try:
        frames, metadata = decoder.load_base64_ref("video/jpeg", text).decode()
    except Exception as exc:  # judged by _assert_documented
        _assert_documented(exc, "video")
    else:
        assert frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[3] == 3
        assert metadata["video_backend"] == "jpeg_sequence"
    _, peak = tracemalloc.get_traced_memory()
    assert peak - baseline < PEAK_ALLOWANCE


@pytest.mark.parametrize(
    "payload",
    [b"", b"\0", b"RIFF", b"fLaC", b"OggS", b"\x1aE\xdf\xa3", b"\x00\x00\x00\x08ftyp"],
    ids=["empty", "nul", "riff", "flac", "ogg", "ebml", "ftyp"],
)
def test_bare_magic(low_caps: None, payload: bytes) -> None:
    check_audio(payload)
    check_video(payload, -1)
