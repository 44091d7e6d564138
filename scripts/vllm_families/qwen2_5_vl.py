"""Qwen2.5-VL as ``Qwen/Qwen2.5-VL-3B-Instruct`` (``Qwen2_5_VLForConditionalGeneration``).

Real (the checkpoint's):

- ``preprocessor_config.json``: the checkpoint's file, key for key (``min_pixels`` 3136,
  ``max_pixels`` 12845056, patch 14, temporal patch 2, merge 2, CLIP mean/std,
  ``Qwen2VLImageProcessor``, ``Qwen2_5_VLProcessor``). The checkpoint ships no
  ``video_preprocessor_config.json`` and neither does this directory: transformers (5.20 in vLLM's
  venv, 5.25 here, checked to agree) builds the ``Qwen2VLVideoProcessor`` from this file, as it
  does for the checkpoint.
- ``chat_template.jinja``: the checkpoint's ``chat_template.json`` template, verbatim. It is the
  same text as Qwen2-VL's (checked against a published copy of Qwen2.5-VL-7B-Instruct's; the 3B's
  is taken to be the same, as far as known).
- ``config.json``: the token ids are this tokenizer's (the checkpoint's are 151643 + n in the same
  order); the vision geometry vLLM reads for processing is the checkpoint's: ``patch_size`` 14,
  ``temporal_patch_size`` 2, ``spatial_merge_size`` 2, ``window_size`` 112,
  ``tokens_per_second`` 2 (video M-RoPE positions), ``hidden_act`` silu.
- ``tokenizer_config.json``: the checkpoint's special tokens and their roles (pad
  ``<|endoftext|>``, eos ``<|im_end|>``), ``model_max_length`` 131072, ``Qwen2Tokenizer``.

Tiny: the text model (hidden 64, 1 layer, 2 heads of 32, M-RoPE sections [4, 6, 6] for the 16
frequencies instead of the checkpoint's [16, 24, 24] for 64) and the vision tower (depth 1, width
64, ``fullatt_block_indexes`` [0] instead of [7, 15, 23, 31] for depth 32, ``out_hidden_size`` =
the tiny text width instead of 2048); the BPE is the shared small one. There are no weights.
"""

from __future__ import annotations

from typing import Any

from make_builtin_models import (
    QWEN2_VL_CHAT_TEMPLATE,
    QWEN2_VL_SPECIAL_TOKENS,
    qwen2_tokenizer_config,
)
from vllm_families import clip_part, dump, image_requests, tokenizer_files

NAME = "qwen2_5_vl"

# Qwen2.5-VL-3B-Instruct's special tokens and chat template are Qwen2-VL's, verbatim.
SPECIAL_TOKENS = QWEN2_VL_SPECIAL_TOKENS
CHAT_TEMPLATE = QWEN2_VL_CHAT_TEMPLATE

# Qwen2.5-VL-3B-Instruct's preprocessor_config.json, key for key.
PREPROCESSOR_CONFIG = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}

TEXT_HIDDEN_SIZE = 64


def files() -> dict[str, str]:
    tokenizer_config = qwen2_tokenizer_config(SPECIAL_TOKENS, "Qwen2_5_VLProcessor", 131072)
    tokenizer, ids = tokenizer_files(SPECIAL_TOKENS, tokenizer_config)
    vocab_size = max(ids.values()) + 1
    config = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "vision_token_id": ids["<|vision_pad|>"],
        "tie_word_embeddings": True,
        "text_config": {
            "model_type": "qwen2_5_vl_text",
            "vocab_size": vocab_size,
            "hidden_size": TEXT_HIDDEN_SIZE,
            "intermediate_size": 128,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "hidden_act": "silu",
            "max_position_embeddings": 128000,
            "rms_norm_eps": 1e-06,
            "use_sliding_window": False,
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
            # Multimodal RoPE splits the 32-wide head (16 frequencies) into time, height, width.
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": [4, 6, 6],
            },
        },
        "vision_config": {
            "model_type": "qwen2_5_vl_vision",
            "depth": 1,
            "hidden_act": "silu",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 2,
            "in_channels": 3,
            "out_hidden_size": TEXT_HIDDEN_SIZE,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 112,
            "fullatt_block_indexes": [0],
            "tokens_per_second": 2,
        },
    }
    return {
        "chat_template.jinja": CHAT_TEMPLATE,
        "config.json": dump(config),
        "preprocessor_config.json": dump(PREPROCESSOR_CONFIG),
        **tokenizer,
    }


def requests() -> list[tuple[str, dict[str, Any]]]:
    video = clip_part(30, 8, 4, (96, 64))
    ask = {"type": "text", "text": "Describe the video."}
    return [
        *image_requests(),
        ("one-video", {"messages": [{"role": "user", "content": [video, ask]}]}),
    ]
