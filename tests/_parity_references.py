"""Media and reference computations for the processor parity tests.

The references here are computed without the mediaref processor: images are opened with plain
Pillow, audio is read with soundfile, mixed to mono and resampled with torchaudio's filter, and the
expected placeholders are read off the token ids the HF processor itself expanded. Only video
frames come from mediaref's PyAV loader, because "the frames our loader sampled" is what the
parity claim is about for video, and the resampling filter (torchaudio's, vLLM's default), held
to torchaudio's own vectors elsewhere.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt
import soundfile as sf  # type: ignore[import-untyped]
import torch
from PIL import Image

from _audio_samples import Tones, encode_soundfile, sine
from _image_samples import encode, sample_path
from _video_samples import make_clip
from mediaref.audio import resample_audio_torchaudio
from mediaref.inputs import MultiModalInputs, PlaceholderRange

IMAGE_PROMPT = "<|vision_start|><|image_pad|><|vision_end|>"
VIDEO_PROMPT = "<|vision_start|><|video_pad|><|vision_end|>"
AUDIO_PROMPT = "<|audio_bos|><|AUDIO|><|audio_eos|>"

AUDIO_SAMPLE_RATE = 16000

# name -> (skimage sample, target size, encoding): small, non-square, in both lossless and lossy
# encodings, so HF's resize runs on shapes that are not already multiples of its patch grid.
_IMAGE_SPECS: dict[str, tuple[str, tuple[int, int], str]] = {
    "astronaut": ("astronaut.png", (160, 128), "PNG"),
    "coffee": ("coffee.png", (200, 136), "JPEG"),
    "chelsea": ("chelsea.png", (224, 150), "PNG"),
}


@functools.cache
def image_bytes(name: str) -> bytes:
    """The encoded bytes of a sample image: a resized skimage sample, or ``"sample.jpg"``."""
    if name == "sample.jpg":
        return (resources.files("mediaref") / "assets" / "sample.jpg").read_bytes()
    source, size, image_format = _IMAGE_SPECS[name]
    image = Image.open(sample_path(source)).convert("RGB").resize(size, Image.Resampling.BICUBIC)
    options: dict[str, object] = {"quality": 90} if image_format == "JPEG" else {}
    return encode(image, image_format, **options)


IMAGE_NAMES: tuple[str, ...] = (*_IMAGE_SPECS, "sample.jpg")


def reference_image(data: bytes) -> Image.Image:
    """The image as plain Pillow decodes it (no sample carries an EXIF orientation)."""
    with Image.open(io.BytesIO(data)) as opened:
        return opened.convert("RGB")


def video_bytes(variant: str) -> bytes:
    """Small h264 clips; two shapes so that two videos in one prompt differ."""
    if variant == "a":
        return make_clip("h264", num_frames=12, width=64, height=64)
    return make_clip("h264", num_frames=9, width=80, height=48, fps=24)


# name -> (tones, sample rate, seconds, soundfile format, subtype)
_AUDIO_SPECS: dict[str, tuple[Tones, int, float, str, str]] = {
    # 44.1 kHz stereo: the parse layer must both mix to mono and resample.
    "wav_stereo_44k": (Tones((440.0, 1000.0), (0.5, 0.3)), 44100, 1.0, "WAV", "PCM_16"),
    "flac_mono_48k": (Tones((660.0,), (0.6,)), 48000, 0.8, "FLAC", "PCM_16"),
    "mp3_mono_22k": (Tones((300.0,), (0.4,)), 22050, 1.5, "MP3", "MPEG_LAYER_III"),
}
AUDIO_NAMES: tuple[str, ...] = tuple(_AUDIO_SPECS)


@functools.cache
def audio_bytes(name: str) -> bytes:
    tones, rate, seconds, fmt, subtype = _AUDIO_SPECS[name]
    return encode_soundfile(sine(tones, rate, seconds), rate, fmt, subtype)


def reference_audio(data: bytes, *, mix: str = "mean") -> npt.NDArray[np.float32]:
    """``data`` as 16 kHz mono float32, computed apart from mediaref.

    soundfile reads (frames, channels); ``mix="mean"`` averages the channels (what the parse
    layer does), ``mix="first"`` keeps the first one (a deliberately wrong reference, used to show
    the comparison notices the mix). Resampling is vLLM's default, torchaudio's sinc filter:
    mediaref's ``resample_audio_torchaudio``, the one piece taken from mediaref, held to vectors
    torchaudio itself computed (``tests/test_api_audio.py``; torchaudio is not installed here).
    """
    samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    mono = samples.mean(axis=1, dtype=np.float32) if mix == "mean" else samples[:, 0]
    if rate == AUDIO_SAMPLE_RATE:
        return np.ascontiguousarray(mono)
    return resample_audio_torchaudio(mono, orig_sr=rate, target_sr=AUDIO_SAMPLE_RATE)


def placeholders_from_ids(
    input_ids: Sequence[int], token_ids: Mapping[str, int]
) -> dict[str, list[PlaceholderRange]]:
    """Each modality's runs of its placeholder token in ``input_ids`` (as HF expanded them)."""
    found: dict[str, list[PlaceholderRange]] = {}
    for modality, token_id in token_ids.items():
        ranges: list[PlaceholderRange] = []
        start = None
        for position, token in enumerate([*input_ids, None]):
            if token == token_id and start is None:
                start = position
            elif token != token_id and start is not None:
                ranges.append(PlaceholderRange(offset=start, length=position - start))
                start = None
        if ranges:
            found[modality] = ranges
    return found


def assert_matches_hf(
    out: MultiModalInputs,
    hf_out: Mapping[str, Any],
    fields: Sequence[str],
    placeholder_token_ids: Mapping[str, int],
    *,
    atol: Mapping[str, float] | None = None,
) -> None:
    """Our output equals the direct HF call: ids, placeholders and every field, dtype included.

    ``atol`` names the fields compared with a tolerance; every other field must be equal.
    """
    expected_ids = hf_out["input_ids"][0].tolist()
    assert out["prompt_token_ids"] == expected_ids
    expected_placeholders = placeholders_from_ids(expected_ids, placeholder_token_ids)
    assert dict(out["mm_placeholders"]) == expected_placeholders
    data = out["mm_kwargs"].get_data()
    assert set(data) == set(fields)
    for name in fields:
        actual, expected = data[name], hf_out[name]
        assert actual.dtype == expected.dtype, name
        assert actual.shape == expected.shape, name
        tolerance = (atol or {}).get(name)
        if tolerance is None:
            assert torch.equal(actual, expected), f"{name} differs from the HF processor's"
        else:
            torch.testing.assert_close(actual, expected, rtol=0.0, atol=tolerance, msg=name)


def assert_same_outputs(actual: MultiModalInputs, expected: MultiModalInputs) -> None:
    """Two processor outputs are identical: ids, hashes, placeholders, every item's every field."""
    assert actual["prompt_token_ids"] == expected["prompt_token_ids"]
    assert actual["mm_hashes"] == expected["mm_hashes"]
    assert dict(actual["mm_placeholders"]) == dict(expected["mm_placeholders"])
    actual_kwargs, expected_kwargs = actual["mm_kwargs"], expected["mm_kwargs"]
    assert list(actual_kwargs) == list(expected_kwargs)
    for modality, expected_items in expected_kwargs.items():
        actual_items = actual_kwargs[modality]
        assert len(actual_items) == len(expected_items)
        for actual_item, expected_item in zip(actual_items, expected_items, strict=True):
            assert_same_item(actual_item.get_data(), expected_item.get_data())


def assert_same_item(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    assert set(actual) == set(expected)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        assert torch.equal(actual[name], value), name
