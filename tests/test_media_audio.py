"""AudioMediaIO: soundfile first, PyAV fallback, output convention, caps and bad input."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import soundfile as sf  # type: ignore[import-untyped]

from _audio_samples import (
    Tones,
    dominant_frequency_hz,
    encode_open_ended_flac,
    encode_pyav,
    encode_soundfile,
    encode_video_only_mp4,
    rms,
    sine,
)
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.audio import AudioMediaIO
from mediaref.media.audio import _pyav as _audio_pyav
from mediaref.media.audio import _soundfile as _audio_soundfile
from mediaref.media.audio._caps import AudioLimits
from mediaref.media.base import DecodeSpec

MONO = Tones((440.0,), (0.5,))
# Distinct frequency and loudness per channel: a transposed or swapped result cannot pass.
STEREO = Tones((440.0, 1000.0), (0.5, 0.25))
HAS_MP3 = "MP3" in sf.available_formats()

BackendCalls = list[tuple[str, str]]


@pytest.fixture
def backend_calls(monkeypatch: pytest.MonkeyPatch) -> BackendCalls:
    """Record, in order, which backend was asked to decode and whether it succeeded."""
    calls: BackendCalls = []

    def spy(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(data: bytes, limits: AudioLimits, charge: Any = None) -> Any:
            try:
                result = real(data, limits, charge)
            except BaseException:
                calls.append((name, "failed"))
                raise
            calls.append((name, "ok"))
            return result

        return wrapper

    monkeypatch.setattr(
        _audio_soundfile,
        "decode_with_soundfile",
        spy("soundfile", _audio_soundfile.decode_with_soundfile),
    )
    monkeypatch.setattr(_audio_pyav, "decode_with_pyav", spy("pyav", _audio_pyav.decode_with_pyav))
    return calls


@pytest.fixture(autouse=True)
def _default_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", raising=False)
    monkeypatch.delenv("VLLM_MAX_AUDIO_DECODE_DURATION_S", raising=False)


def _assert_layout(samples: np.ndarray, channels: int, num_samples: int | None = None) -> None:
    assert samples.dtype == np.float32
    assert samples.flags.c_contiguous
    if channels == 1:
        assert samples.ndim == 1
    else:
        assert samples.ndim == 2 and samples.shape[0] == channels
    if num_samples is not None:
        assert samples.shape[-1] == num_samples


def _assert_sounds_like(samples: np.ndarray, rate: float, tones: Tones) -> None:
    """Lossy codecs: per channel, the dominant frequency and the loudness match the source."""
    freqs, amplitudes = tones
    channels = samples[None, :] if samples.ndim == 1 else samples
    assert channels.shape[0] == len(freqs)
    for channel, freq, amplitude in zip(channels, freqs, amplitudes, strict=True):
        assert dominant_frequency_hz(channel, rate) == pytest.approx(freq, abs=3.0)
        assert rms(channel) == pytest.approx(amplitude / math.sqrt(2), rel=0.15)


# -- decoding: soundfile formats -------------------------------------------------------------


@pytest.mark.parametrize("tones", [MONO, STEREO], ids=["mono", "stereo"])
@pytest.mark.parametrize(
    ("fmt", "subtype", "atol"),
    [("WAV", "PCM_16", 1.5 / 32768), ("WAV", "FLOAT", 0.0), ("FLAC", "PCM_16", 1.5 / 32768)],
)
def test_lossless_formats_decode_exactly_with_soundfile(
    backend_calls: BackendCalls, tones: Tones, fmt: str, subtype: str, atol: float
) -> None:
    source = sine(tones, sample_rate=22050, seconds=0.5)
    data = encode_soundfile(source, 22050, fmt, subtype)

    samples, rate = AudioMediaIO().load_bytes_ref(data).decode()

    assert backend_calls == [("soundfile", "ok")]
    assert isinstance(rate, float) and rate == 22050.0
    _assert_layout(samples, tones.channels, source.shape[-1])
    np.testing.assert_allclose(samples, source, rtol=0, atol=atol)


@pytest.mark.parametrize("tones", [MONO, STEREO], ids=["mono", "stereo"])
@pytest.mark.parametrize(
    ("fmt", "subtype"),
    [
        ("OGG", "VORBIS"),
        pytest.param(
            "MP3",
            "MPEG_LAYER_III",
            marks=pytest.mark.skipif(not HAS_MP3, reason="libsndfile < 1.1 has no MP3"),
        ),
    ],
)
def test_lossy_soundfile_formats(
    backend_calls: BackendCalls, tones: Tones, fmt: str, subtype: str
) -> None:
    source = sine(tones, sample_rate=16000, seconds=1.0)
    data = encode_soundfile(source, 16000, fmt, subtype)

    samples, rate = AudioMediaIO().load_bytes_ref(data).decode()

    assert backend_calls == [("soundfile", "ok")]
    assert rate == 16000.0
    _assert_layout(samples, tones.channels)
    assert samples.shape[-1] / rate == pytest.approx(1.0, abs=0.1)
    _assert_sounds_like(samples, rate, tones)


def test_ogg_opus_decodes(backend_calls: BackendCalls) -> None:
    # libsndfile >= 1.0.29 reads Ogg Opus; an older one fails and PyAV takes over. Either way
    # the output convention holds.
    source = sine(STEREO, sample_rate=48000, seconds=1.0)
    data = encode_pyav(source, 48000, "ogg", "libopus")

    samples, rate = AudioMediaIO().load_bytes_ref(data).decode()

    assert backend_calls[-1][1] == "ok"
    assert rate == 48000.0
    _assert_layout(samples, 2)
    _assert_sounds_like(samples, rate, STEREO)


# -- decoding: the PyAV fallback -------------------------------------------------------------


@pytest.mark.parametrize("tones", [MONO, STEREO], ids=["mono", "stereo"])
@pytest.mark.parametrize(
    ("container_format", "codec", "sample_rate"),
    [("mp4", "aac", 16000), ("adts", "aac", 44100), ("webm", "libopus", 48000)],
)
def test_formats_soundfile_cannot_read_fall_back_to_pyav(
    backend_calls: BackendCalls, tones: Tones, container_format: str, codec: str, sample_rate: int
) -> None:
    source = sine(tones, sample_rate=sample_rate, seconds=1.0)
    data = encode_pyav(source, sample_rate, container_format, codec)

    samples, rate = AudioMediaIO().load_bytes_ref(data).decode()

    assert backend_calls == [("soundfile", "failed"), ("pyav", "ok")]
    assert isinstance(rate, float) and rate == float(sample_rate)
    _assert_layout(samples, tones.channels)
    # AAC adds encoder priming and pads its last frame: a few ms either way.
    assert samples.shape[-1] / rate == pytest.approx(1.0, abs=0.1)
    _assert_sounds_like(samples, rate, tones)


def test_invalid_utf8_metadata_does_not_fail_the_decode() -> None:
    source = sine(MONO, sample_rate=16000, seconds=0.5)
    data = encode_pyav(source, 16000, "mp4", "aac", title="XX\u00e9XX")
    assert data.count(b"XX\xc3\xa9XX") == 1
    data = data.replace(b"XX\xc3\xa9XX", b"XX\xff\xfeXX")  # same length: the atom stays valid

    samples, rate = AudioMediaIO().load_bytes_ref(data).decode()

    assert rate == 16000.0
    _assert_sounds_like(samples, rate, MONO)


def test_open_ended_header_does_not_trip_the_eager_cap() -> None:
    # libsndfile reports an open-ended FLAC as SF_COUNT_MAX frames: "unknown", not "too long".
    source = sine(MONO, sample_rate=16000, seconds=2.0)
    data = encode_open_ended_flac(source, 16000)

    samples, rate = AudioMediaIO(max_duration_s=5).load_bytes_ref(data).decode()

    assert rate == 16000.0
    _assert_layout(samples, 1, source.shape[-1])
    np.testing.assert_allclose(samples, source, rtol=0, atol=2 / 32768)


def test_concurrent_decodes_match_sequential_ones() -> None:
    clips = [
        encode_soundfile(sine(STEREO, sample_rate=16000, seconds=0.5), 16000, "FLAC", "PCM_16"),
        encode_pyav(sine(MONO, sample_rate=16000, seconds=0.5), 16000, "mp4", "aac"),
    ] * 4
    decoder = AudioMediaIO()
    expected = [decoder.load_bytes(clip) for clip in clips]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda clip: decoder.load_bytes_ref(clip).decode(), clips))

    for (samples, rate), (want_samples, want_rate) in zip(results, expected, strict=True):
        assert rate == want_rate
        np.testing.assert_array_equal(samples, want_samples)


def test_decode_path_never_imports_librosa(tmp_path: Path) -> None:
    wav = tmp_path / "clip.wav"
    m4a = tmp_path / "clip.m4a"
    wav.write_bytes(encode_soundfile(sine(MONO, 16000, 0.5), 16000, "WAV", "PCM_16"))
    m4a.write_bytes(encode_pyav(sine(MONO, 16000, 0.5), 16000, "mp4", "aac"))
    script = textwrap.dedent(
        f"""
        import json, sys
        from mediaref.media.audio import AudioMediaIO
        decoder = AudioMediaIO()
        for path in ({str(wav)!r}, {str(m4a)!r}):
            decoder.load_file_ref(path).decode()
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("librosa", "numba"))))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


# -- spec and constructor --------------------------------------------------------------------


def test_spec_names_modality_and_decoder() -> None:
    assert AudioMediaIO().get_decode_spec() == DecodeSpec(
        modality="audio", decoder="soundfile+pyav"
    )


def test_duration_cap_stays_out_of_the_key() -> None:
    data = encode_soundfile(sine(MONO, 16000, 0.5), 16000, "WAV", "PCM_16")
    keys = {
        AudioMediaIO(max_duration_s=cap).load_bytes_ref(data).key for cap in (None, 1, math.inf)
    }
    assert len(keys) == 1


def test_other_keywords_are_kept_and_counted_in_the_key() -> None:
    # vLLM keeps options it does not know for custom decoders; here they are part of the spec.
    data = encode_soundfile(sine(MONO, 16000, 0.5), 16000, "WAV", "PCM_16")
    custom = AudioMediaIO(sr=16000)
    assert custom.kwargs == {"sr": 16000}
    assert custom.load_bytes_ref(data).key != AudioMediaIO().load_bytes_ref(data).key


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, True, "5"])
def test_max_duration_must_be_positive(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_duration_s must be a positive number"):
        AudioMediaIO(max_duration_s=bad)


def test_duration_cap_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AudioMediaIO().get_max_duration_s() == 600.0
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_DURATION_S", "12.5")
    assert AudioMediaIO().get_max_duration_s() == 12.5
    assert AudioMediaIO(max_duration_s=30).get_max_duration_s() == 30.0
    assert AudioMediaIO(max_duration_s=math.inf).get_max_duration_s() is None
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_DURATION_S", "0")
    assert AudioMediaIO().get_max_duration_s() is None


# -- caps ------------------------------------------------------------------------------------


def test_encoded_size_cap_fires_at_construction(
    monkeypatch: pytest.MonkeyPatch, backend_calls: BackendCalls
) -> None:
    assert AudioMediaIO().get_max_bytes() == 25 * 1024 * 1024
    monkeypatch.setenv("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", str(4096 / (1024 * 1024)))
    decoder = AudioMediaIO()
    assert decoder.get_max_bytes() == 4096

    with pytest.raises(MediaTooLargeError, match="audio payload of 4097 bytes"):
        decoder.load_bytes_ref(b"\0" * 4097)
    decoder.load_bytes_ref(b"\0" * 4096)  # at the cap: accepted (and it would fail to decode)
    assert backend_calls == []

    monkeypatch.setenv("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", "0")
    assert AudioMediaIO().get_max_bytes() is None


@pytest.mark.parametrize("via_env", [False, True], ids=["kwarg", "env"])
def test_header_duration_over_the_cap_fails_at_construction(
    monkeypatch: pytest.MonkeyPatch, backend_calls: BackendCalls, via_env: bool
) -> None:
    if via_env:
        monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_DURATION_S", "2")
    decoder = AudioMediaIO() if via_env else AudioMediaIO(max_duration_s=2)
    too_long = encode_soundfile(sine(MONO, 8000, 2.5), 8000, "FLAC", "PCM_16")
    at_cap = encode_soundfile(sine(MONO, 8000, 2.0), 8000, "FLAC", "PCM_16")

    with pytest.raises(MediaTooLargeError, match=r"2-second .*header declares 2\.500 s"):
        decoder.load_bytes_ref(too_long)
    assert backend_calls == []  # rejected from the header alone

    samples, _ = decoder.load_bytes_ref(at_cap).decode()
    assert samples.shape == (16000,)


def test_kwarg_overrides_env_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_DURATION_S", "1")
    data = encode_soundfile(sine(MONO, 8000, 2.0), 8000, "WAV", "PCM_16")
    samples, _ = AudioMediaIO(max_duration_s=10).load_bytes_ref(data).decode()
    assert samples.shape == (16000,)


def test_soundfile_decode_stops_at_the_cap_without_trying_pyav(
    backend_calls: BackendCalls,
) -> None:
    # load_bytes skips the eager check when the ref is built; the decode checks the header too.
    declared = encode_soundfile(sine(MONO, 8000, 3.0), 8000, "WAV", "PCM_16")
    with pytest.raises(MediaTooLargeError, match=r"header declares 3\.000 s"):
        AudioMediaIO(max_duration_s=1).load_bytes(declared)
    # A header that declares no length: the cap fires inside the read loop.
    open_ended = encode_open_ended_flac(sine(MONO, 8000, 3.0), 8000)
    with pytest.raises(MediaTooLargeError, match=r"stopped decoding at 1\.000 s"):
        AudioMediaIO(max_duration_s=1).load_bytes(open_ended)
    assert backend_calls == [("soundfile", "failed")] * 2


def test_pyav_decode_refuses_a_container_declared_excess(backend_calls: BackendCalls) -> None:
    # soundfile cannot read an M4A header, so the ref builds; PyAV reads the container's
    # duration before decoding. (test_endless_frame_source_stops_just_past_the_cap covers a
    # stream that declares nothing.)
    data = encode_pyav(sine(MONO, 16000, 3.0), 16000, "mp4", "aac")
    ref = AudioMediaIO(max_duration_s=1).load_bytes_ref(data)

    with pytest.raises(MediaTooLargeError, match=r"1-second duration limit .*header declares 3\."):
        ref.decode()
    assert backend_calls == [("soundfile", "failed"), ("pyav", "failed")]
    # A cap is not a verdict on the payload, so the ref does not memoize it: it tries again.
    with pytest.raises(MediaTooLargeError):
        ref.decode()
    assert len(backend_calls) == 4


def test_open_ended_header_is_capped_while_decoding() -> None:
    data = encode_open_ended_flac(sine(MONO, 16000, 2.0), 16000)
    ref = AudioMediaIO(max_duration_s=1).load_bytes_ref(data)  # no length in the header
    with pytest.raises(MediaTooLargeError, match="stopped decoding"):
        ref.decode()


@pytest.mark.timeout(30)
def test_endless_frame_source_stops_just_past_the_cap() -> None:
    # What a container with a lying or missing length looks like to the collector: frames that
    # never end. It must stop one frame past the cap, not run on.
    silence = np.zeros((1, 1000), np.float32)
    frame = av.AudioFrame.from_ndarray(silence, format="fltp", layout="mono")
    frame.sample_rate = 8000
    pulled = 0

    def endless() -> Iterator[av.AudioFrame]:
        nonlocal pulled
        for item in itertools.repeat(frame):
            pulled += 1
            yield item

    with pytest.raises(MediaTooLargeError, match=r"stopped decoding at 2\.125 s"):
        _audio_pyav.collect_frames(endless(), AudioLimits(max_duration_s=2.0))
    assert pulled == 17


# -- bad input -------------------------------------------------------------------------------


def _truncated_m4a() -> bytes:
    data = encode_pyav(sine(MONO, 16000, 1.0), 16000, "mp4", "aac")
    return data[: len(data) // 2]  # the moov atom (written last) is gone


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("make_payload", "reason"),
    [
        (lambda: b"", None),
        (lambda: b"this is not audio at all " * 40, None),
        (lambda: np.random.default_rng(0).bytes(50_000), None),
        (lambda: encode_soundfile(sine(MONO, 8000, 0.5), 8000, "WAV", "PCM_16")[:30], None),
        (_truncated_m4a, None),
        (encode_video_only_mp4, "no audio stream"),
    ],
    ids=["empty", "text", "random", "truncated-wav-header", "truncated-m4a", "video-only"],
)
def test_bad_input_builds_a_ref_whose_decode_fails(
    backend_calls: BackendCalls, make_payload: Callable[[], bytes], reason: str | None
) -> None:
    ref = AudioMediaIO().load_bytes_ref(make_payload())

    with pytest.raises(ValueError) as first:
        ref.decode()
    message = str(first.value)
    assert not isinstance(first.value, MediaTooLargeError)
    assert message.startswith("Failed to decode audio: soundfile: ")
    assert "; pyav: " in message
    assert "BytesIO object at" not in message  # reasons are the readable part, not reprs
    if reason is not None:
        assert reason in message
    assert backend_calls == [("soundfile", "failed"), ("pyav", "failed")]

    with pytest.raises(ValueError) as second:
        ref.decode()
    assert second.value is first.value
    assert len(backend_calls) == 2  # memoized: no second attempt
