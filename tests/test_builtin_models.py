"""The shipped model directories load offline into the real HF processors and match their script."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import socket
import unicodedata
import zipfile
from types import ModuleType
from typing import Any

# huggingface_hub reads this when first imported; set before anything imports transformers.
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest
import skimage.data
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoProcessor

from mediaref.models import builtin
from mediaref.models.builtin import BUILTIN_MODEL_NAMES, builtin_model_path

GENERATOR_PATH = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "make_builtin_models.py"
EXPECTED_FILES = {
    "qwen2_vl": {
        "chat_template.jinja",
        "config.json",
        "preprocessor_config.json",
        "processor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "video_preprocessor_config.json",
    },
    "qwen2_audio": {
        "chat_template.jinja",
        "config.json",
        "preprocessor_config.json",
        "processor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    },
}
QWEN2_VL_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
QWEN2_AUDIO_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
]
PATCH_DIM = 3 * 2 * 14 * 14  # channels * temporal_patch_size * patch_size**2
MERGE_LENGTH = 2 * 2  # merge_size**2 patches become one placeholder token


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_builtin_models", GENERATOR_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _refuse_network(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("a built-in model tried to reach the network")


def _load_offline(loader: Any, name: str) -> Any:
    # HF_HUB_OFFLINE already forbids the hub; refusing sockets as well proves the loaders never try.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", _refuse_network)
        return loader.from_pretrained(builtin_model_path(name))


@pytest.fixture(scope="module")
def vl_processor() -> Any:
    return _load_offline(AutoProcessor, "qwen2_vl")


@pytest.fixture(scope="module")
def audio_processor() -> Any:
    return _load_offline(AutoProcessor, "qwen2_audio")


def _files_under(directory: pathlib.Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


# --- the directories and their generator -------------------------------------------------------


def test_builtin_names_are_exactly_the_shipped_directories() -> None:
    data_dir = builtin_model_path(BUILTIN_MODEL_NAMES[0]).parent
    assert {path.name for path in data_dir.iterdir() if path.is_dir()} == set(BUILTIN_MODEL_NAMES)


def test_unknown_builtin_name_is_refused_with_the_known_names() -> None:
    with pytest.raises(ValueError, match="qwen2_vl, qwen2_audio"):
        builtin_model_path("llava")


def test_builtin_path_is_a_real_directory_holding_a_config() -> None:
    path = builtin_model_path("qwen2_vl")
    assert isinstance(path, pathlib.Path) and path.is_absolute()
    assert (path / "config.json").is_file()


def test_zipped_install_is_refused_because_hf_loaders_need_a_folder(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "mediaref.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("models/data/qwen2_vl/config.json", "{}")
    zipped_package = zipfile.Path(archive, "models/")
    monkeypatch.setattr(builtin.resources, "files", lambda package: zipped_package)
    with pytest.raises(FileNotFoundError, match="installed unzipped"):
        builtin_model_path("qwen2_vl")


@pytest.mark.parametrize("name", BUILTIN_MODEL_NAMES)
def test_directories_hold_configs_only_and_no_weights(name: str) -> None:
    files = _files_under(builtin_model_path(name))
    assert set(files) == EXPECTED_FILES[name]
    assert sum(len(content) for content in files.values()) < 100_000


def test_generator_reproduces_the_shipped_files_byte_for_byte(tmp_path: pathlib.Path) -> None:
    generator = _load_generator()
    # A file the generator does not make (a stray weight file) must not survive a regeneration.
    (tmp_path / "qwen2_vl").mkdir()
    (tmp_path / "qwen2_vl" / "model.safetensors").write_bytes(b"stale")

    generator.write_builtin_models(tmp_path)

    assert {path.name for path in tmp_path.iterdir()} == set(BUILTIN_MODEL_NAMES)
    for name in BUILTIN_MODEL_NAMES:
        generated = _files_under(tmp_path / name)
        shipped = _files_under(builtin_model_path(name))
        assert generated.keys() == shipped.keys(), name
        for file_name, content in shipped.items():
            assert generated[file_name] == content, f"{name}/{file_name} differs: rerun the script"


def test_learned_bpe_is_deterministic_and_depends_on_its_corpus() -> None:
    generator = _load_generator()
    first = generator.learn_bpe(generator.TRAINING_CORPUS)
    assert generator.learn_bpe(generator.TRAINING_CORPUS) == first
    vocab, merges = first
    assert len(vocab) == 256 + len({left + right for left, right in merges})
    assert merges and merges[0] == ("Ġ", "t")  # " t" is the corpus's most frequent pair
    assert generator.learn_bpe("abab abab abab")[1] != merges


# --- loading --------------------------------------------------------------------------------------


def test_qwen2_vl_loads_the_real_processors_with_the_checkpoint_values(vl_processor: Any) -> None:
    from transformers.image_processing_backends import TorchvisionBackend

    assert type(vl_processor).__name__ == "Qwen2VLProcessor"
    assert type(vl_processor.tokenizer).__name__ == "Qwen2Tokenizer"
    image_processor = vl_processor.image_processor
    video_processor = vl_processor.video_processor
    assert type(image_processor).__name__ == "Qwen2VLImageProcessor"
    assert isinstance(image_processor, TorchvisionBackend)
    assert type(video_processor).__name__ == "Qwen2VLVideoProcessor"
    for processor in (image_processor, video_processor):
        assert (processor.size.shortest_edge, processor.size.longest_edge) == (3136, 12845056)
        assert processor.patch_size == 14
        assert processor.temporal_patch_size == processor.merge_size == 2
        assert list(processor.image_mean) == [0.48145466, 0.4578275, 0.40821073]
        assert list(processor.image_std) == [0.26862954, 0.26130258, 0.27577711]
        assert processor.rescale_factor == 1 / 255
        assert processor.resample == 3
        assert processor.do_rescale and processor.do_normalize and processor.do_convert_rgb
    assert video_processor.do_sample_frames is False
    assert video_processor.cap_pixels_per_frame is False


def test_qwen2_vl_config_ids_match_the_tokenizer(vl_processor: Any) -> None:
    config = _load_offline(AutoConfig, "qwen2_vl")
    tokenizer = vl_processor.tokenizer
    assert config.model_type == "qwen2_vl"
    assert config.image_token_id == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert config.image_token_id == vl_processor.image_token_id
    assert config.video_token_id == tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert config.video_token_id == vl_processor.video_token_id
    assert config.vision_start_token_id == tokenizer.convert_tokens_to_ids("<|vision_start|>")
    assert config.vision_end_token_id == tokenizer.convert_tokens_to_ids("<|vision_end|>")
    vision = config.vision_config
    assert (vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size) == (14, 2, 2)
    assert vision.in_channels == 3
    assert config.text_config.vocab_size == len(tokenizer)


def test_qwen2_audio_loads_the_real_processor_with_checkpoint_values(audio_processor: Any) -> None:
    assert type(audio_processor).__name__ == "Qwen2AudioProcessor"
    extractor = audio_processor.feature_extractor
    assert type(extractor).__name__ == "WhisperFeatureExtractor"
    assert (extractor.feature_size, extractor.sampling_rate) == (128, 16000)
    assert extractor.hop_length == 160
    assert (extractor.chunk_length, extractor.n_fft, extractor.padding_value) == (30, 400, 0.0)
    assert extractor.return_attention_mask is True
    config = _load_offline(AutoConfig, "qwen2_audio")
    assert config.model_type == "qwen2_audio"
    assert config.audio_token_index == audio_processor.tokenizer.convert_tokens_to_ids("<|AUDIO|>")
    assert config.audio_token_index == audio_processor.audio_token_id
    assert config.audio_config.num_mel_bins == 128
    assert config.text_config.vocab_size == len(audio_processor.tokenizer)


@pytest.mark.parametrize(
    ("fixture_name", "special_tokens"),
    [("vl_processor", QWEN2_VL_SPECIAL_TOKENS), ("audio_processor", QWEN2_AUDIO_SPECIAL_TOKENS)],
)
def test_special_tokens_follow_the_vocabulary_in_qwen_order(
    fixture_name: str, special_tokens: list[str], request: pytest.FixtureRequest
) -> None:
    tokenizer = request.getfixturevalue(fixture_name).tokenizer
    first_id = len(tokenizer) - len(special_tokens)
    assert tokenizer.convert_tokens_to_ids(special_tokens) == list(range(first_id, len(tokenizer)))
    assert set(special_tokens) <= set(tokenizer.all_special_tokens)
    for offset, token in enumerate(special_tokens):
        ids = tokenizer(f"a{token}b", add_special_tokens=False)["input_ids"]
        assert ids[1] == first_id + offset
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert tokenizer.bos_token is None


# --- the tokenizer --------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=60))
@example(text="Ünïcödé 日本語 😀 e\u0301 \r\n\t\x00 'll ok")
@example(text="  leading and trailing spaces  ")
def test_tokenizer_round_trips_any_text(vl_processor: Any, text: str) -> None:
    tokenizer = vl_processor.tokenizer
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    # Qwen2's NFC normalizer is part of the contract: text comes back NFC-normalized.
    assert tokenizer.decode(ids) == unicodedata.normalize("NFC", text)


def test_tokenizer_file_alone_encodes_like_the_hf_tokenizer(vl_processor: Any) -> None:
    # transformers rebuilds Qwen2's pipeline from its own code; the file must describe the same one.
    bare = Tokenizer.from_file(str(builtin_model_path("qwen2_vl") / "tokenizer.json"))
    text = "You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat's in 3 pics? Ça va 😀"
    assert bare.encode(text).ids == vl_processor.tokenizer(text)["input_ids"]
    # The merges do compress: fewer tokens than half the characters of corpus-like text.
    common_words = "the picture shows the video"
    assert len(bare.encode(common_words).ids) < len(common_words) // 2


# --- Qwen2-VL processing --------------------------------------------------------------------------


def _astronaut(width: int, height: int) -> Image.Image:
    return Image.fromarray(skimage.data.astronaut()).resize((width, height))


def test_images_expand_image_pad_by_grid_size(vl_processor: Any) -> None:
    image = "<|vision_start|><|image_pad|><|vision_end|>"
    prompt = f"A {image} and {image}."
    images = [_astronaut(224, 224), _astronaut(140, 84)]
    out = vl_processor(text=[prompt], images=images, return_tensors="pt")

    assert out["image_grid_thw"].tolist() == [[1, 16, 16], [1, 6, 10]]
    counts = [int(grid.prod()) // MERGE_LENGTH for grid in out["image_grid_thw"]]
    assert counts == [64, 15]
    assert out["pixel_values"].shape == (16 * 16 + 6 * 10, PATCH_DIM)
    assert out["pixel_values"].dtype == torch.float32
    before, between, after = prompt.split("<|image_pad|>")
    expanded = before + "<|image_pad|>" * 64 + between + "<|image_pad|>" * 15 + after
    assert out["input_ids"][0].tolist() == vl_processor.tokenizer(expanded)["input_ids"]


def test_video_expands_video_pad_by_grid_size(vl_processor: Any) -> None:
    frames = np.random.default_rng(0).integers(0, 256, size=(4, 112, 112, 3), dtype=np.uint8)
    prompt = "<|vision_start|><|video_pad|><|vision_end|>What happens?"
    out = vl_processor(text=[prompt], videos=[frames], return_tensors="pt")

    assert out["video_grid_thw"].tolist() == [[2, 8, 8]]
    assert out["pixel_values_videos"].shape == (2 * 8 * 8, PATCH_DIM)
    video_pad_id = vl_processor.video_token_id
    assert out["input_ids"][0].tolist().count(video_pad_id) == 2 * 8 * 8 // MERGE_LENGTH
    assert "pixel_values" not in out and "image_grid_thw" not in out


def test_chat_template_places_vision_placeholders(vl_processor: Any) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image"},
                {"type": "video"},
                {"type": "text", "text": "Describe."},
            ],
        }
    ]
    prompt = vl_processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|video_pad|><|vision_end|>"
        "Describe.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert vl_processor.tokenizer.chat_template == vl_processor.chat_template


# --- Qwen2-Audio processing -----------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "audio_tokens"), [(2.0, 50), (1.0, 25)])
def test_audio_gives_whisper_features_and_expands_audio_token(
    audio_processor: Any, seconds: float, audio_tokens: int
) -> None:
    samples = np.arange(int(16000 * seconds), dtype=np.float32)
    waveform = 0.3 * np.sin(2 * np.pi * 440 * samples / 16000).astype(np.float32)
    prompt = "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\nWhat is this?"
    out = audio_processor(text=[prompt], audio=[waveform], sampling_rate=16000, return_tensors="pt")

    # Features are always padded to the 30 s window; the mask says how much of it is audio.
    assert out["input_features"].shape == (1, 128, 3000)
    assert int(out["feature_attention_mask"].sum()) == int(100 * seconds)
    assert out["input_ids"][0].tolist().count(audio_processor.audio_token_id) == audio_tokens


def test_audio_keyword_is_audio_and_audios_is_ignored(audio_processor: Any) -> None:
    # transformers 5 drops `audios=` with a warning, so the placeholder then has no audio: callers
    # written against vLLM's `audios` must rename it before calling the HF processor.
    silence = np.zeros(16000, dtype=np.float32)
    with pytest.raises(ValueError, match="no audio inputs were passed"):
        audio_processor(text=["<|AUDIO|>"], audios=[silence], sampling_rate=16000)


def test_audio_chat_template_places_audio_placeholders(audio_processor: Any) -> None:
    content = [{"type": "audio", "url": "a.wav"}, {"type": "text", "text": "Hi"}]
    messages = [{"role": "user", "content": content}]
    prompt = audio_processor.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert prompt == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
