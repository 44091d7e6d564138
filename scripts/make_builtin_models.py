#!/usr/bin/env python
"""Write the built-in model directories that mediaref ships under ``src/mediaref/models/data/``.

Each directory holds what ``transformers.AutoProcessor.from_pretrained(path)`` needs to build
the real HF processor of one model family fully offline, and nothing else: no weights.

- ``qwen2_vl``: ``Qwen2VLProcessor`` = ``Qwen2VLImageProcessor`` + ``Qwen2VLVideoProcessor``
  with the values of Qwen2-VL-2B-Instruct, a small byte-level BPE tokenizer carrying Qwen2-VL's
  special tokens, and Qwen2-VL's chat template.
- ``qwen2_audio``: ``Qwen2AudioProcessor`` = ``WhisperFeatureExtractor`` with the values of
  Qwen2-Audio-7B-Instruct, the same BPE with Qwen2-Audio's special tokens, and its chat template.

``config.json`` describes a tiny text model that is never instantiated: it exists so ``AutoConfig``
loads and processing code can read the placeholder token ids and the vision/audio geometry.

The JSON is written by hand instead of through ``save_pretrained`` so that the files change only
when this script changes, not when transformers or tokenizers change how they serialize; the same
goes for the BPE merges, learned here by a deterministic trainer (ties broken by the pair itself).
``tests/test_builtin_models.py`` regenerates into a temporary directory and compares byte for byte.

Usage: ``python scripts/make_builtin_models.py [--out DIR]`` (default: the package's data folder).
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import unicodedata
from collections import Counter
from typing import Any

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_OUT_DIR = REPO_ROOT / "src" / "mediaref" / "models" / "data"

# Qwen2's pre-tokenizer split, as transformers' Qwen2Tokenizer rebuilds it; the file carries it too
# so that a bare `tokenizers.Tokenizer.from_file` encodes exactly like the HF tokenizer.
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
MAX_MERGES = 400
# A pair seen once teaches nothing: stopping there keeps the vocabulary to what the corpus repeats.
MIN_PAIR_COUNT = 2

# What the merges are learned from: words that prompts of a multimodal assistant repeat.
TRAINING_CORPUS = """\
You are a helpful assistant. Describe the image in detail. What is shown in this picture?
The picture shows an astronaut standing in front of a flag, holding a helmet and smiling.
Describe the video. What happens in this video? The video shows a person walking along the road,
then the camera turns to the left and follows a red car that is driving through the city.
Listen to the audio. What can you hear in this recording? The audio contains a person speaking,
followed by music and the sound of rain. Transcribe the speech in the audio into text.
Compare the two images and tell me what is different. Count the objects in the picture.
Where is the cat sitting? The cat is sitting on the table next to a cup of coffee.
Please answer the question using only the information in the image, the video and the audio.
The assistant reads the text in the image and answers the user with a short description.
There are three people in the picture: two of them are standing and one of them is sitting.
The weather in the video is sunny, and the sky is blue with a few white clouds over the mountains.
This is a test of the tokenizer: it should handle numbers like 1024 and 3.14, code such as
def process(image): return image.resize((224, 224)), and text in other languages.
"""

QWEN2_VL_SPECIAL_TOKENS = (
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
)
QWEN2_AUDIO_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
)

# Qwen2-VL-2B-Instruct's chat template, verbatim.
QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Qwen2-Audio-7B-Instruct's chat template, with transformers' extra `content['type'] == 'audio'`
# test so that content parts naming their media by `url` or `path` are recognised too.
QWEN2_AUDIO_CHAT_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if 'audio' in content or 'audio_url' in content or message['type'] == 'audio'"
    " or content['type'] == 'audio' %}{% set audio_count.value = audio_count.value + 1 %}"
    "Audio {{ audio_count.value }}: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def byte_level_alphabet() -> list[str]:
    """The 256 printable stand-ins byte-level BPE uses for bytes, in GPT-2/Qwen vocabulary order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    stand_ins = {byte: chr(byte) for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in stand_ins:
            stand_ins[byte] = chr(256 + shifted)
            shifted += 1
    unprintable = [byte for byte in range(256) if byte not in printable]
    return [stand_ins[byte] for byte in printable + unprintable]


def _pipeline() -> dict[str, Any]:
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": False,
    }
    return {
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": QWEN2_PRETOKENIZE_REGEX},
                    "behavior": "Isolated",
                    "invert": False,
                },
                byte_level,
            ],
        },
        "post_processor": dict(byte_level),
        "decoder": dict(byte_level),
    }


def _tokenizer_json(
    vocab: dict[str, int], merges: list[tuple[str, str]], specials: tuple[str, ...]
) -> dict[str, Any]:
    added_tokens = [
        {
            "id": len(vocab) + offset,
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for offset, token in enumerate(specials)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        **_pipeline(),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [list(pair) for pair in merges],
        },
    }


def _pre_tokenized_words(text: str) -> list[str]:
    # The pre-tokenizer itself splits the corpus, so merges are learned on exactly the pieces the
    # encoder will see (byte-level strings, split by Qwen2's regex).
    from tokenizers import Tokenizer

    splitter = Tokenizer.from_str(json.dumps(_tokenizer_json({}, [], ()))).pre_tokenizer
    return [piece for piece, _ in splitter.pre_tokenize_str(unicodedata.normalize("NFC", text))]


def _merge_pair(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    merged: list[str] = []
    index = 0
    while index < len(symbols):
        if index + 1 < len(symbols) and (symbols[index], symbols[index + 1]) == pair:
            merged.append(pair[0] + pair[1])
            index += 2
        else:
            merged.append(symbols[index])
            index += 1
    return tuple(merged)


def learn_bpe(
    corpus: str, max_merges: int = MAX_MERGES
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte-level BPE vocabulary and merges learned from ``corpus``; same input, same output."""
    words: Counter[tuple[str, ...]] = Counter(tuple(word) for word in _pre_tokenized_words(corpus))
    merges: list[tuple[str, str]] = []
    while len(merges) < max_merges:
        pair_counts: Counter[tuple[str, str]] = Counter()
        for symbols, count in words.items():
            for pair in itertools.pairwise(symbols):
                pair_counts[pair] += count
        if not pair_counts:
            break
        best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))
        if pair_counts[best] < MIN_PAIR_COUNT:
            break
        merges.append(best)
        merged_words: Counter[tuple[str, ...]] = Counter()
        for symbols, count in words.items():
            merged_words[_merge_pair(symbols, best)] += count
        words = merged_words
    vocab = {symbol: index for index, symbol in enumerate(byte_level_alphabet())}
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    return vocab, merges


def qwen2_tokenizer_config(
    specials: tuple[str, ...], processor_class: str, model_max_length: int = 32768
) -> dict[str, Any]:
    """The ``tokenizer_config.json`` of a Qwen2 tokenizer as the Qwen2-based checkpoints ship it
    (the built-in models here, and Qwen2-based families in ``scripts/vllm_families/``)."""
    return {
        "add_prefix_space": False,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        # Every special token but <|endoftext|>, which is already the pad token.
        "extra_special_tokens": list(specials[1:]),
        "model_max_length": model_max_length,
        "pad_token": "<|endoftext|>",
        "processor_class": processor_class,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def _tiny_qwen2_text_config(
    model_type: str, vocab_size: int, token_ids: dict[str, int]
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "model_type": model_type,
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 32768,
        "bos_token_id": token_ids["<|endoftext|>"],
        "eos_token_id": token_ids["<|im_end|>"],
        "pad_token_id": token_ids["<|endoftext|>"],
    }
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
    if model_type == "qwen2_vl_text":
        # Multimodal RoPE splits the 32-wide head (16 frequencies) into time, height and width.
        config["rope_parameters"]["mrope_section"] = [4, 6, 6]
    return config


def _dump(document: dict[str, Any], *, sort_keys: bool = True) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False, sort_keys=sort_keys) + "\n"


def qwen2_vl_files(vocab: dict[str, int], merges: list[tuple[str, str]]) -> dict[str, str]:
    """File name -> text of the ``qwen2_vl`` directory."""
    specials = QWEN2_VL_SPECIAL_TOKENS
    token_ids = {token: len(vocab) + offset for offset, token in enumerate(specials)}
    vocab_size = len(vocab) + len(specials)
    vision_values = {
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "merge_size": 2,
        "patch_size": 14,
        "processor_class": "Qwen2VLProcessor",
        "resample": 3,
        "rescale_factor": 1 / 255,
        # transformers 5 names min_pixels / max_pixels `size.shortest_edge` / `size.longest_edge`.
        "size": {"shortest_edge": 3136, "longest_edge": 12845056},
        "temporal_patch_size": 2,
    }
    video_values = {
        **vision_values,
        # Pinned to what transformers 5.24 does when the key is absent (Qwen2-VL-2B-Instruct ships
        # no video config), so a video's token count cannot change under a future default flip.
        "cap_pixels_per_frame": False,
        "do_sample_frames": False,
        "max_frames": 768,
        "min_frames": 4,
        "video_processor_type": "Qwen2VLVideoProcessor",
    }
    config = {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "model_type": "qwen2_vl",
        "image_token_id": token_ids["<|image_pad|>"],
        "video_token_id": token_ids["<|video_pad|>"],
        "vision_start_token_id": token_ids["<|vision_start|>"],
        "vision_end_token_id": token_ids["<|vision_end|>"],
        "tie_word_embeddings": False,
        "text_config": _tiny_qwen2_text_config("qwen2_vl_text", vocab_size, token_ids),
        # Qwen2-VL-2B's patch geometry (what processing reads); depth and widths are tiny.
        "vision_config": {
            "model_type": "qwen2_vl_vision",
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 64,
            "mlp_ratio": 4,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
    }
    return {
        "chat_template.jinja": QWEN2_VL_CHAT_TEMPLATE,
        "config.json": _dump(config),
        "preprocessor_config.json": _dump(
            {**vision_values, "image_processor_type": "Qwen2VLImageProcessor"}
        ),
        "processor_config.json": _dump({"processor_class": "Qwen2VLProcessor"}),
        "tokenizer.json": _dump(_tokenizer_json(vocab, merges, specials), sort_keys=False),
        "tokenizer_config.json": _dump(qwen2_tokenizer_config(specials, "Qwen2VLProcessor")),
        "video_preprocessor_config.json": _dump(video_values),
    }


def qwen2_audio_files(vocab: dict[str, int], merges: list[tuple[str, str]]) -> dict[str, str]:
    """File name -> text of the ``qwen2_audio`` directory."""
    specials = QWEN2_AUDIO_SPECIAL_TOKENS
    token_ids = {token: len(vocab) + offset for offset, token in enumerate(specials)}
    feature_extractor = {
        "chunk_length": 30,
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": 128,
        "hop_length": 160,
        "n_fft": 400,
        "padding_side": "right",
        "padding_value": 0.0,
        "processor_class": "Qwen2AudioProcessor",
        "return_attention_mask": True,
        "sampling_rate": 16000,
    }
    processor = {
        "audio_bos_token": "<|audio_bos|>",
        "audio_eos_token": "<|audio_eos|>",
        "audio_token": "<|AUDIO|>",
        "processor_class": "Qwen2AudioProcessor",
    }
    config = {
        "architectures": ["Qwen2AudioForConditionalGeneration"],
        "model_type": "qwen2_audio",
        "audio_token_index": token_ids["<|AUDIO|>"],
        # Qwen2-Audio's mel geometry (128 bins, 1500 positions for 30 s); depth and widths are tiny.
        "audio_config": {
            "model_type": "qwen2_audio_encoder",
            "num_mel_bins": 128,
            "max_source_positions": 1500,
            "encoder_layers": 1,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 64,
            "d_model": 32,
        },
        "text_config": _tiny_qwen2_text_config("qwen2", len(vocab) + len(specials), token_ids),
    }
    return {
        "chat_template.jinja": QWEN2_AUDIO_CHAT_TEMPLATE,
        "config.json": _dump(config),
        "preprocessor_config.json": _dump(feature_extractor),
        "processor_config.json": _dump(processor),
        "tokenizer.json": _dump(_tokenizer_json(vocab, merges, specials), sort_keys=False),
        "tokenizer_config.json": _dump(qwen2_tokenizer_config(specials, "Qwen2AudioProcessor")),
    }


def builtin_model_files() -> dict[str, dict[str, str]]:
    """Directory name -> (file name -> text) for every built-in model."""
    vocab, merges = learn_bpe(TRAINING_CORPUS)
    return {
        "qwen2_vl": qwen2_vl_files(vocab, merges),
        "qwen2_audio": qwen2_audio_files(vocab, merges),
    }


def write_builtin_models(out_dir: pathlib.Path) -> None:
    """Write each built-in model directory under ``out_dir``, dropping files it no longer makes."""
    for name, files in builtin_model_files().items():
        model_dir = out_dir / name
        model_dir.mkdir(parents=True, exist_ok=True)
        for stale in sorted(model_dir.iterdir()):
            if stale.is_file() and stale.name not in files:
                stale.unlink()
        for file_name, text in files.items():
            (model_dir / file_name).write_bytes(text.encode("utf-8"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=pathlib.Path, default=DEFAULT_OUT_DIR, help="folder to write into"
    )
    write_builtin_models(parser.parse_args().out)


if __name__ == "__main__":
    main()
