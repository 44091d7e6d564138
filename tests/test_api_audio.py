"""vLLM's audio helpers at ``mediaref.audio`` and its ``load_audio*`` / ``AudioMediaIO`` surface.

Behaviour compared with vLLM 0.33.0's documented one: channel specs and reductions, the four
resampling methods (torchaudio's default filter without torchaudio: parity against vectors
torchaudio 2.11 computed, ``tests/data/torchaudio_resample_vectors.npz``, made by
``torchaudio.transforms.Resample(orig, new)(x)`` on float32 normal noise), splitting at quiet
points, and the decoder's backends, caps and encoder.
"""

from __future__ import annotations

import importlib.util
import io
import math
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from _audio_samples import Tones, dominant_frequency_hz, encode_pyav, encode_soundfile, sine
from mediaref import audio as mm_audio
from mediaref.audio import (
    MONO_AUDIO_SPEC,
    PASSTHROUGH_AUDIO_SPEC,
    AudioResampler,
    AudioSpec,
    ChannelReduction,
    find_split_point,
    get_audio_duration,
    normalize_audio,
    resample_audio_pyav,
    resample_audio_scipy,
    resample_audio_soxr,
    resample_audio_torchaudio,
    split_audio,
)
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.audio import (
    AUDIO_BACKENDS,
    AudioMediaIO,
    load_audio,
    load_audio_pyav,
    load_audio_soundfile,
    load_audio_torchcodec,
)

VECTORS = Path(__file__).parent / "data" / "torchaudio_resample_vectors.npz"
MONO = Tones((440.0,), (0.5,))
STEREO = Tones((440.0, 1000.0), (0.5, 0.3))


def noise(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# --- specs and channel normalization -----------------------------------------------------------


def test_audio_specs() -> None:
    assert MONO_AUDIO_SPEC.target_channels == 1 and MONO_AUDIO_SPEC.needs_normalization
    assert not PASSTHROUGH_AUDIO_SPEC.needs_normalization
    assert repr(PASSTHROUGH_AUDIO_SPEC) == "AudioSpec(passthrough)"
    assert repr(AudioSpec(2, ChannelReduction.MAX)) == "AudioSpec(channels=2, reduction=max)"
    assert ChannelReduction("sum") is ChannelReduction.SUM and ChannelReduction.MEAN == "mean"


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [
        (ChannelReduction.MEAN, lambda a: a.mean(0)),
        (ChannelReduction.FIRST, lambda a: a[0]),
        (ChannelReduction.MAX, lambda a: a.max(0)),
        (ChannelReduction.SUM, lambda a: a.sum(0)),
    ],
)
def test_normalize_audio_reductions_numpy_and_torch(
    reduction: ChannelReduction, expected: Any
) -> None:
    stereo = noise((2, 50))
    spec = AudioSpec(1, reduction)
    np.testing.assert_allclose(normalize_audio(stereo, spec), expected(stereo), rtol=1e-6)
    as_tensor = normalize_audio(torch.from_numpy(stereo), spec)
    assert isinstance(as_tensor, torch.Tensor)
    np.testing.assert_allclose(as_tensor.numpy(), expected(stereo), rtol=1e-6)


def test_normalize_audio_layouts_and_errors() -> None:
    stereo = noise((2, 50))
    # (time, channels), as soundfile gives it, is recognised by its longer time axis.
    np.testing.assert_allclose(normalize_audio(stereo.T, MONO_AUDIO_SPEC), stereo.mean(0))
    assert normalize_audio(noise((4, 50)), AudioSpec(2)).shape == (2, 50)
    mono = noise((50,))
    assert normalize_audio(mono, MONO_AUDIO_SPEC) is mono
    assert normalize_audio(stereo, PASSTHROUGH_AUDIO_SPEC) is stereo
    single = noise((1, 50))
    np.testing.assert_array_equal(normalize_audio(single, MONO_AUDIO_SPEC), single[0])
    with pytest.raises(ValueError, match="Cannot expand mono audio to 2 channels"):
        normalize_audio(mono, AudioSpec(2))
    with pytest.raises(ValueError, match="Cannot expand 2 audio channels to 3"):
        normalize_audio(stereo, AudioSpec(3))
    with pytest.raises(ValueError, match="Unsupported audio shape"):
        normalize_audio(noise((1, 2, 3)), MONO_AUDIO_SPEC)
    # A clip shorter than its channel count: guessing reads it the wrong way round.
    short = noise((6, 4))
    assert normalize_audio(short, MONO_AUDIO_SPEC, channels_first=True).shape == (4,)
    assert normalize_audio(short, MONO_AUDIO_SPEC).shape == (6,)


def test_get_audio_duration() -> None:
    assert get_audio_duration(y=np.zeros(44100), sr=22050) == 2.0
    assert get_audio_duration(y=np.zeros((2, 16000)), sr=16000) == 1.0
    assert get_audio_duration(y=np.zeros(22050)) == 1.0


# --- resampling --------------------------------------------------------------------------------


def test_torchaudio_method_matches_torchaudio_without_it() -> None:
    vectors = np.load(VECTORS)
    for index in range(6):
        orig, target = (int(r) for r in vectors[f"rates{index}"])
        ours = resample_audio_torchaudio(vectors[f"x{index}"], orig_sr=orig, target_sr=target)
        theirs = vectors[f"y{index}"]
        assert ours.shape == theirs.shape and ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs, atol=5e-5)


@pytest.mark.parametrize(
    "resample",
    [resample_audio_pyav, resample_audio_scipy, resample_audio_soxr, resample_audio_torchaudio],
)
def test_every_method_keeps_a_tone_and_the_shape(resample: Any) -> None:
    tone = sine(MONO, 44100, 0.5)
    out = resample(tone, orig_sr=44100, target_sr=16000)
    assert out.shape == (8000,)
    assert dominant_frequency_hz(out.astype(np.float32), 16000) == pytest.approx(440, abs=5)
    stereo = sine(STEREO, 44100, 0.5)
    both = resample(stereo, orig_sr=44100, target_sr=16000)
    assert both.shape == (2, 8000)
    assert dominant_frequency_hz(both[1].astype(np.float32), 16000) == pytest.approx(1000, abs=5)
    # Rates equal once rounded to whole hertz: the input itself comes back.
    assert resample(tone, orig_sr=44100.2, target_sr=44100) is tone


def test_pyav_method_handles_clips_shorter_than_its_filter() -> None:
    out = resample_audio_pyav(noise((10,)), orig_sr=8000, target_sr=16000)
    assert out.shape == (20,) and out.dtype == np.float32


def test_audio_resampler_defaults_to_torchaudio_and_checks_its_method() -> None:
    resampler = AudioResampler(16000)
    assert resampler.method == "torchaudio"
    vectors = np.load(VECTORS)
    np.testing.assert_allclose(
        resampler.resample(vectors["x0"], orig_sr=44100), vectors["y0"], atol=5e-5
    )
    with pytest.raises(ValueError, match="Invalid resampling method"):
        AudioResampler(16000, "sox")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="target_sr"):
        AudioResampler().resample(noise((10,)), orig_sr=8000)
    tone = noise((100,))
    assert AudioResampler(16000, "soxr").resample(tone, orig_sr=16000.0000001) is tone


def test_parse_layer_resamples_through_mediaref_audio() -> None:
    from mediaref.parse import _parser as parse_audio

    assert parse_audio.AudioResampler is AudioResampler


# --- splitting ---------------------------------------------------------------------------------


def test_split_audio_cuts_at_quiet_points_and_covers_everything() -> None:
    audio = noise((1_040_000,))  # 65 s at 16 kHz
    chunks = split_audio(audio, 16000, 30.0, 1.0, 1600)
    assert len(chunks) == 3
    assert sum(len(c) for c in chunks) == len(audio)
    np.testing.assert_array_equal(np.concatenate(chunks), audio)
    assert all(len(c) <= 30 * 16000 for c in chunks)


def test_find_split_point_finds_the_quiet_window() -> None:
    audio = noise((32000,))
    audio[16000:17600] = 0.01
    assert 16000 <= find_split_point(audio, 0, 32000, 1600) <= 17600
    audio[:] = np.nan  # no window is comparable: the start of the region
    assert find_split_point(audio, 100, 5000, 1600) == 100


def test_split_audio_refuses_multichannel() -> None:
    with pytest.raises(ValueError, match="mono"):
        split_audio(noise((2, 100)), 16000, 1.0, 0.1, 10)


# --- load_audio* -------------------------------------------------------------------------------


def test_load_audio_resamples_downmixes_and_takes_paths_and_buffers(tmp_path: Path) -> None:
    data = encode_soundfile(sine(STEREO, 44100, 1.0), 44100, "WAV", "FLOAT")
    path = tmp_path / "tone.wav"
    path.write_bytes(data)
    for source in (io.BytesIO(data), path, str(path)):
        samples, rate = load_audio(source)
        assert rate == 22050 and samples.shape == (22050,) and samples.dtype == np.float32
    native, native_rate = load_audio(io.BytesIO(data), sr=None, mono=False)
    assert native_rate == 44100 and native.shape == (2, 44100)
    assert dominant_frequency_hz(native[1], 44100) == pytest.approx(1000, abs=2)


def test_load_audio_backends_and_their_errors() -> None:
    assert AUDIO_BACKENDS == ("auto", "soundfile", "pyav", "torchcodec")
    aac = encode_pyav(sine(MONO, 16000, 1.0), 16000, "adts", "aac")
    samples, rate = load_audio(io.BytesIO(aac), sr=None)  # auto: soundfile fails, PyAV reads it
    assert rate == 16000 and abs(samples.shape[0] - 16000) < 2048
    assert load_audio_pyav(io.BytesIO(aac), sr=None)[1] == 16000
    with pytest.raises(ValueError, match="Failed to decode audio: soundfile"):
        load_audio_soundfile(io.BytesIO(aac))
    with pytest.raises(ValueError, match="Unknown audio backend 'nope'"):
        load_audio(io.BytesIO(aac), backend="nope")
    with pytest.raises(ValueError, match="Failed to decode audio"):
        load_audio(io.BytesIO(b"not audio at all"))


def test_load_audio_caps_raise_value_errors() -> None:
    wav = io.BytesIO(encode_soundfile(sine(MONO, 16000, 2.0), 16000, "WAV", "PCM_16"))
    with pytest.raises(MediaTooLargeError, match="duration"):
        load_audio(wav, sr=None, max_duration_s=1.0)
    with pytest.raises(ValueError, match="byte decode limit"):
        load_audio(wav, sr=None, max_decode_bytes=1000)
    assert load_audio(wav, sr=None, max_duration_s=3.0)[0].shape == (32000,)


@pytest.mark.skipif(importlib.util.find_spec("torchcodec") is not None, reason="installed")
def test_torchcodec_backend_without_torchcodec_is_an_import_error() -> None:
    wav = io.BytesIO(encode_soundfile(sine(MONO, 16000, 0.1), 16000, "WAV", "PCM_16"))
    with pytest.raises(ImportError, match="torchcodec"):
        load_audio_torchcodec(wav)
    with pytest.raises(ImportError, match="torchcodec"):
        AudioMediaIO(audio_backend="torchcodec").load_bytes(wav.getvalue())


class _FakeAudioDecoder:
    """torchcodec's AudioDecoder as far as the backend uses it, over a WAV read by soundfile."""

    def __init__(self, source: bytes) -> None:
        import soundfile as sf

        pcm, rate = sf.read(io.BytesIO(source), dtype="float32", always_2d=True)
        self._pcm, self._rate = torch.from_numpy(np.ascontiguousarray(pcm.T)), rate
        self.metadata = types.SimpleNamespace(
            sample_rate=rate, num_channels=pcm.shape[1], duration_seconds=len(pcm) / rate
        )

    def _samples(self, frames: int) -> Any:
        return types.SimpleNamespace(data=self._pcm[:, :frames], sample_rate=self._rate)

    def get_all_samples(self) -> Any:
        return self._samples(self._pcm.shape[1])

    def get_samples_played_in_range(self, start: float, stop: float) -> Any:
        return self._samples(int(stop * self._rate))


def test_torchcodec_backend_caps_and_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    decoders = types.ModuleType("torchcodec.decoders")
    decoders.AudioDecoder = _FakeAudioDecoder  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchcodec", types.ModuleType("torchcodec"))
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", decoders)
    stereo = encode_soundfile(sine(STEREO, 16000, 1.0), 16000, "WAV", "FLOAT")
    samples, rate = AudioMediaIO(audio_backend="torchcodec").load_bytes(stereo)
    assert rate == 16000 and samples.shape == (2, 16000)
    assert load_audio_torchcodec(io.BytesIO(stereo), sr=None)[0].shape == (16000,)
    with pytest.raises(MediaTooLargeError):
        AudioMediaIO(audio_backend="torchcodec", max_duration_s=0.5).load_bytes(stereo)


# --- AudioMediaIO: vLLM's options and encoder --------------------------------------------------


def test_audio_backend_option_is_checked_and_selects_the_backend() -> None:
    with pytest.raises(ValueError, match="Unknown audio backend 'ffmpeg'"):
        AudioMediaIO(audio_backend="ffmpeg")
    aac = encode_pyav(sine(MONO, 16000, 1.0), 16000, "adts", "aac")
    assert AudioMediaIO(audio_backend="pyav").load_bytes(aac)[1] == 16000
    with pytest.raises(ValueError, match="soundfile"):
        AudioMediaIO(audio_backend="soundfile").load_bytes(aac)
    specs = {AudioMediaIO(audio_backend=b).get_decode_spec() for b in (None, *AUDIO_BACKENDS)}
    assert len(specs) == 4  # None and "auto" are the same decoder, and one key


@pytest.mark.parametrize("tones", [MONO, STEREO], ids=["mono", "stereo"])
def test_encode_base64_round_trips(tones: Tones) -> None:
    media_io = AudioMediaIO()
    samples = sine(tones, 16000, 0.25)
    encoded = media_io.encode_base64((samples, 16000))
    decoded, rate = media_io.load_base64("audio/wav", encoded)
    assert rate == 16000 and decoded.shape == samples.shape
    np.testing.assert_allclose(decoded, samples, atol=1e-4)
    flac = media_io.encode_base64((samples, 16000), audio_format="FLAC")
    assert media_io.load_base64("audio/flac", flac)[0].shape == samples.shape


def test_size_cap_applies_to_load_bytes_and_to_base64_before_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", "0.001")  # 1048 bytes
    media_io = AudioMediaIO()
    with pytest.raises(MediaTooLargeError):
        media_io.load_bytes(b"\0" * 2000)

    def no_decoding(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("the oversized text was decoded")

    monkeypatch.setattr("mediaref.media.base.pybase64.b64decode", no_decoding)
    with pytest.raises(MediaTooLargeError, match="base64"):
        media_io.load_base64("audio/wav", "A" * 4000)


def test_module_names() -> None:
    assert mm_audio.RESAMPLE_METHODS == ("pyav", "scipy", "soxr", "torchaudio", "librosa")
    assert math.isclose(get_audio_duration(y=np.zeros(8000), sr=8000), 1.0)
