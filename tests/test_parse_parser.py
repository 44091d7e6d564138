"""MultiModalDataParser: refs prepared without decoding, vLLM's options and input shapes."""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pytest
import soundfile
import torch
from PIL import Image

from _counting import CountingDecoder
from mediaref.media.audio import AudioMediaIO
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.parse import (
    AudioEmbeddingItems,
    AudioProcessorItems,
    ImageEmbeddingItems,
    ImageProcessorItems,
    MultiModalDataParser,
    VideoEmbeddingItems,
)


def audio_ref(
    samples: np.ndarray, rate: float, tag: str = "a"
) -> tuple[MediaRef[Any], CountingDecoder]:
    decoder = CountingDecoder((samples, float(rate)))
    return MediaRef(tag.encode(), decoder, DecodeSpec(modality="audio", tag=tag)), decoder


def tone(seconds: float, rate: int, channels: int = 1, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    mono = np.sin(2 * np.pi * hz * t).astype(np.float32)
    return mono if channels == 1 else np.stack([mono * (c + 1) for c in range(channels)])


# --- audio refs: mapped, not decoded ------------------------------------------------------------


def test_audio_ref_is_mapped_without_decoding() -> None:
    ref, decoder = audio_ref(tone(0.1, 8000), 8000)
    items = MultiModalDataParser(target_sr=16000).parse_mm_data({"audio": ref})["audio"]
    raw = items.get_raw(0)
    assert isinstance(raw, MediaRef) and raw is not ref
    assert decoder.calls == 0 and not raw.is_decoded
    assert raw.spec.settings["audio_target_sr"] == 16000.0
    assert raw.spec.settings["audio_resample_method"] == "torchaudio"  # vLLM's default


def test_resampled_ref_decodes_to_the_target_length_at_decode_time() -> None:
    samples = tone(0.5, 44100)
    ref, decoder = audio_ref(samples, 44100)
    items = MultiModalDataParser(target_sr=16000).parse_mm_data({"audio": ref})["audio"]
    out = items.get(0)
    assert decoder.calls == 1
    assert out.dtype == np.float32 and out.ndim == 1
    assert out.shape[0] == math.ceil(samples.shape[0] * 16000 / 44100)
    assert items.get_audio_length(0) == 8000


@pytest.mark.parametrize("method", ["librosa", "scipy"])
def test_resampled_ref_keeps_the_signal(method: str) -> None:
    ref, _ = audio_ref(tone(0.5, 48000, hz=300.0), 48000)
    out = (
        MultiModalDataParser(target_sr=16000, audio_resample_method=method)
        .parse_mm_data({"audio": ref})["audio"]
        .get(0)
    )
    expected = tone(0.5, 16000, hz=300.0)
    n = min(len(out), len(expected))
    # Away from the edges, the resampled tone is the tone sampled at the new rate.
    assert np.abs(out[200 : n - 200] - expected[200 : n - 200]).max() < 0.02


def test_ref_at_the_target_rate_is_not_resampled() -> None:
    samples = tone(0.1, 16000)
    ref, _ = audio_ref(samples, 16000)
    out = MultiModalDataParser(target_sr=16000).parse_mm_data({"audio": ref})["audio"].get(0)
    assert out is samples


def test_audio_settings_change_the_key_and_equal_settings_keep_it() -> None:
    ref, decoder = audio_ref(tone(0.1, 8000), 8000)

    def key(**options: Any) -> bytes:
        return MultiModalDataParser(**options).parse_mm_data({"audio": ref})["audio"].get_raw(0).key

    base = key(target_sr=16000)
    assert key(target_sr=16000) == base
    assert key(target_sr=16000.0) == base
    assert key(target_sr=24000) != base
    assert key(target_sr=16000, audio_resample_method="scipy") != base
    assert key(target_sr=16000, target_channels=1) != base
    assert key(target_sr=16000, target_channels=1) == key(target_sr=16000, target_channels=1)
    assert key(target_sr=16000, target_channels=2) != key(target_sr=16000, target_channels=1)
    assert key(target_channels=1) != key()
    assert len({base, ref.key, key()}) == 2  # no settings: the key is the ref's own
    assert key() == ref.key
    assert decoder.calls == 0


def test_channel_normalization_of_a_ref_downmixes_decoded_channels_first_audio() -> None:
    stereo = tone(0.05, 8000, channels=2)  # (channels, time), as decoders produce it
    ref, _ = audio_ref(stereo, 8000)
    out = MultiModalDataParser(target_channels=1).parse_mm_data({"audio": ref})["audio"].get(0)
    np.testing.assert_allclose(out, stereo.mean(axis=0), rtol=1e-6)


def test_channel_expansion_fails_at_decode_time() -> None:
    ref, _ = audio_ref(tone(0.05, 8000), 8000)
    items = MultiModalDataParser(target_channels=2).parse_mm_data({"audio": ref})["audio"]
    with pytest.raises(ValueError, match="Cannot expand mono audio to 2 channels"):
        items.get(0)


def test_without_target_rate_a_ref_yields_its_native_samples() -> None:
    samples = tone(0.05, 22050)
    ref, _ = audio_ref(samples, 22050)
    assert MultiModalDataParser().parse_mm_data({"audio": ref})["audio"].get(0) is samples


def test_real_wav_ref_through_the_audio_decoder() -> None:
    buffer = io.BytesIO()
    soundfile.write(buffer, tone(0.25, 22050, channels=2).T, 22050, format="WAV", subtype="FLOAT")
    ref = AudioMediaIO().load_bytes_ref(buffer.getvalue())
    items = MultiModalDataParser(target_sr=16000, target_channels=1).parse_mm_data({"audio": ref})[
        "audio"
    ]
    assert not ref.is_decoded and items.get_raw(0).key != ref.key
    out = items.get(0)
    assert out.ndim == 1 and out.shape[0] == math.ceil(0.25 * 22050 * 16000 / 22050)


# --- audio given decoded ------------------------------------------------------------------------


def test_decoded_audio_with_rate_is_resampled_now() -> None:
    samples = tone(0.25, 8000)
    items = MultiModalDataParser(target_sr=16000).parse_mm_data({"audio": (samples, 8000)})["audio"]
    assert items.get_count() == 1 and items.get(0).shape == (4000,)


def test_decoded_time_major_audio_is_downmixed_and_resampled_along_time() -> None:
    stereo_time_major = tone(0.25, 8000, channels=2).T  # (time, channels), as soundfile reads
    items = MultiModalDataParser(target_sr=16000, target_channels=1).parse_mm_data(
        {"audio": [(stereo_time_major, 8000)]}
    )["audio"]
    assert items.get(0).shape == (4000,)


def test_decoded_audio_shapes() -> None:
    parser = MultiModalDataParser()
    assert parser.parse_mm_data({"audio": [0.0, 0.5, 1.0]})["audio"].get_count() == 1
    assert parser.parse_mm_data({"audio": np.zeros(10)})["audio"].get_count() == 1
    assert parser.parse_mm_data({"audio": torch.zeros(10)})["audio"].get(0).shape == (10,)
    assert parser.parse_mm_data({"audio": np.zeros((3, 10))})["audio"].get_count() == 3
    assert parser.parse_mm_data({"audio": [np.zeros(4), np.zeros(5)]})["audio"].get_count() == 2


def test_unknown_resample_method_is_rejected() -> None:
    with pytest.raises(ValueError, match="Invalid resampling method: 'sox'"):
        MultiModalDataParser(audio_resample_method="sox")  # type: ignore[arg-type]


# --- images, None items, embeddings, empties ----------------------------------------------------


def test_image_refs_are_left_alone() -> None:
    decoder = CountingDecoder(Image.new("RGB", (2, 2)))
    ref = MediaRef(b"img", decoder, DecodeSpec(modality="image"))
    items = MultiModalDataParser().parse_mm_data({"image": [ref, ref]})["image"]
    assert items.get_raw(0) is ref and items.get_raw(1) is ref and decoder.calls == 0


def test_image_shapes() -> None:
    parser = MultiModalDataParser()
    assert parser.parse_mm_data({"image": Image.new("RGB", (2, 2))})["image"].get_count() == 1
    assert parser.parse_mm_data({"image": np.zeros((4, 4, 3))})["image"].get_count() == 1
    assert parser.parse_mm_data({"image": np.zeros((4, 4))})["image"].get_count() == 1
    assert parser.parse_mm_data({"image": np.zeros((2, 4, 4, 3))})["image"].get_count() == 2


def test_none_items_are_kept_for_uuid_only_requests() -> None:
    parser = MultiModalDataParser(target_sr=16000, video_needs_metadata=True)
    parsed = parser.parse_mm_data(
        {"image": None, "audio": [None, (tone(0.01, 8000), 8000)], "video": [None]}
    )
    assert isinstance(parsed["image"], ImageProcessorItems) and parsed["image"].get(0) is None
    assert parsed["audio"].get_count() == 2 and parsed["audio"].get_raw(0) is None
    assert parsed["video"].get_raw(0) is None and parsed["video"].get(0) is None


def test_embeddings_become_embedding_items_and_hidden_size_is_checked() -> None:
    parser = MultiModalDataParser(expected_hidden_size=8)
    parsed = parser.parse_mm_data(
        {"image": torch.zeros(2, 3, 8), "video": [torch.zeros(3, 8)], "audio": [torch.zeros(1, 8)]}
    )
    assert isinstance(parsed["image"], ImageEmbeddingItems) and parsed["image"].get_count() == 2
    assert isinstance(parsed["video"], VideoEmbeddingItems)
    assert isinstance(parsed["audio"], AudioEmbeddingItems)
    with pytest.raises(ValueError, match="hidden dimension mismatch: got 4, but model expects 8"):
        parser.parse_mm_data({"image": torch.zeros(1, 3, 4)})


def test_empty_data_is_dropped_and_unknown_modalities_rejected() -> None:
    parser = MultiModalDataParser()
    parsed = parser.parse_mm_data({"image": [], "audio": np.zeros(0), "video": torch.zeros(0)})
    assert dict(parsed) == {}
    assert dict(parser.parse_mm_data({"audio": (np.zeros(0), 16000)})) == {}
    with pytest.raises(ValueError, match="Unsupported modality: smell"):
        parser.parse_mm_data({"smell": [1]})


def test_audio_items_class() -> None:
    parsed = MultiModalDataParser().parse_mm_data({"audio": np.zeros(3)})
    assert type(parsed["audio"]) is AudioProcessorItems
