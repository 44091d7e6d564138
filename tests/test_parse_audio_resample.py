"""Audio normalization: librosa parity without numba, exact rational scipy ratios, channel rules."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from mediaref.audio import AudioResampler
from mediaref.audio._normalize import AudioNormalizer, normalize_audio_channels


def noise(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_librosa_method_matches_librosa_resample() -> None:
    # One test, so librosa's numba JIT (seconds) is paid once.
    librosa = pytest.importorskip("librosa")
    for orig, target, shape in [
        (44100, 16000, (4410,)),
        (8000, 16000, (800,)),
        (22050, 16000, (2, 2205)),
    ]:
        audio = noise(shape, seed=orig)
        ours = AudioResampler(target, "librosa").resample(audio, orig_sr=float(orig))
        theirs = librosa.resample(audio, orig_sr=orig, target_sr=target)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_resampling_does_not_import_numba() -> None:
    code = (
        "import sys, numpy as np\n"
        "from mediaref.audio import AudioResampler\n"
        "x = np.zeros(4410, np.float32)\n"
        "for m in ('librosa', 'scipy'):\n"
        "    AudioResampler(16000, m).resample(x, orig_sr=44100.0)\n"
        "print('numba' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "False"


def test_scipy_method_uses_the_exact_rational_ratio() -> None:
    # vLLM's scipy path floors 44100/16000 to 2 and yields 22050 Hz; the exact ratio is 160/441.
    out = AudioResampler(16000, "scipy").resample(noise((44100,)), orig_sr=44100.0)
    assert out.shape == (16000,) and out.dtype == np.float32


def test_resampling_along_a_chosen_axis() -> None:
    out = AudioResampler(16000, "scipy").resample(noise((8000, 2)), orig_sr=8000.0, axis=0)
    assert out.shape == (16000, 2)


def test_integer_pcm_is_resampled_as_float() -> None:
    out = AudioResampler(16000, "librosa").resample(np.zeros(800, np.int16), orig_sr=8000.0)
    assert out.dtype == np.float32 and out.shape == (1600,)


def test_resampler_argument_checks() -> None:
    with pytest.raises(RuntimeError, match="target_sr"):
        AudioResampler(None).resample(noise((10,)), orig_sr=8000.0)
    with pytest.raises(ValueError, match="positive"):
        AudioResampler(16000).resample(noise((10,)), orig_sr=0.0)
    with pytest.raises(ValueError, match="positive"):
        AudioResampler(-1.0)


def test_channel_normalization_rules() -> None:
    stereo = noise((2, 100))
    np.testing.assert_allclose(
        normalize_audio_channels(stereo, 1, channels_first=True), stereo.mean(0)
    )
    np.testing.assert_allclose(
        normalize_audio_channels(stereo.T, 1, channels_first=False), stereo.mean(0)
    )
    assert normalize_audio_channels(noise((4, 100)), 2, channels_first=True).shape == (2, 100)
    mono = noise((100,))
    assert normalize_audio_channels(mono, 1, channels_first=True) is mono
    with pytest.raises(ValueError, match="Cannot expand 2 audio channels to 3"):
        normalize_audio_channels(stereo, 3, channels_first=True)
    with pytest.raises(ValueError, match="Unsupported audio shape"):
        normalize_audio_channels(noise((1, 2, 3)), 1, channels_first=True)
    # Decoded audio is (channels, time) even when a clip is shorter than its channel count.
    short = noise((6, 4))
    assert normalize_audio_channels(short, 1, channels_first=True).shape == (4,)


def test_normalizer_settings_name_every_output_affecting_parameter() -> None:
    assert AudioNormalizer(AudioResampler(None)).ref_settings() == {}
    assert AudioNormalizer(AudioResampler(16000, "scipy"), 1).ref_settings() == {
        "audio_target_channels": 1,
        "audio_channel_reduction": "mean",
        "audio_target_sr": 16000.0,
        "audio_resample_method": "scipy",
    }
    with pytest.raises(ValueError, match="at least 1"):
        AudioNormalizer(AudioResampler(None), 0)


def test_normalizer_passes_non_audio_decoder_output_through() -> None:
    normalizer = AudioNormalizer(AudioResampler(16000), 1)
    assert normalizer.normalize_decoded(b"raw") == b"raw"
    out = normalizer.normalize_decoded((noise((2, 800)), 8000.0))
    assert out.shape == (math.ceil(800 * 2),)


def test_the_torchaudio_filter_is_built_once_per_pair_of_rates() -> None:
    # As vLLM caches torchaudio's Resample: its kernel is the cost of a short clip's resample.
    from mediaref.audio import _get_torchaudio_resampler, resample_audio_torchaudio

    _get_torchaudio_resampler.cache_clear()
    audio = np.arange(441, dtype=float)
    first = resample_audio_torchaudio(audio, orig_sr=44100, target_sr=16000)
    again = resample_audio_torchaudio(audio, orig_sr=44100.2, target_sr=16000)  # whole hertz
    resample_audio_torchaudio(audio, orig_sr=48000, target_sr=16000)
    info = _get_torchaudio_resampler.cache_info()
    assert (info.misses, info.hits) == (2, 1)
    np.testing.assert_array_equal(first, again)
