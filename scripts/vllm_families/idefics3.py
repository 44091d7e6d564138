"""Idefics3 as SmolVLM, ``HuggingFaceTB/SmolVLM-256M-Instruct`` (``Idefics3ForConditionalGeneration``).

Real (the checkpoint's):

- ``preprocessor_config.json``: the checkpoint's file, key for key (``Idefics3ImageProcessor``:
  ``size`` longest edge 2048, ``max_image_size`` longest edge 512, ``do_image_splitting``,
  ``do_pad``, LANCZOS ``resample`` 1, mean/std 0.5). Its sorted, 2-space-indented text is 486
  bytes with the final newline, the size a published inventory of the checkpoint's files gives.
- ``processor_config.json``: ``image_seq_len`` 64 (``(512 / 16)^2 / 4^2``), ``Idefics3Processor``
  (68 bytes, as published).
- ``chat_template.jinja``: the checkpoint's ``chat_template.json`` template, verbatim (403
  characters, as published; it is transformers' Idefics3 test template too).
- ``config.json``: ``scale_factor`` 4 and the vision geometry vLLM reads (``image_size`` 512,
  ``patch_size`` 16), so ``image_seq_len`` derives to the processor's 64.
- ``tokenizer_config.json``: the checkpoint's token roles (bos ``<|im_start|>``, eos
  ``<end_of_utterance>``, pad ``<|im_end|>``, unk ``<|endoftext|>``; the processor's three extra
  special tokens), ``model_max_length`` 8192, ``GPT2Tokenizer``, ``truncation_side`` left:
  from memory of the checkpoint's file, which this directory could not be checked against.

The special tokens are the checkpoint's Idefics3 ones in its id order (``<|endoftext|>``,
``<|im_start|>``, ``<|im_end|>`` = 0, 1, 2; then ``<global-img>``, the 36 ``<row_r_col_c>``
(r, c in 1..6), ``<fake_token_around_image>``, ``<image>`` = 49152..49190; ``<end_of_utterance>``
= 49279), renumbered after the small BPE's vocabulary; SmolLM2's other added tokens (code and
reserved ones) are left out. Here all are special tokens; whether the checkpoint marks
``<global-img>`` and the row/col tokens special is not known to this module.

Tiny: the Llama text model (hidden 64, 1 layer, 2 heads of 32 instead of 576 wide, 30 layers) and
the vision tower (width 64, 1 layer instead of SigLIP-base's 768 wide, 12 layers); the BPE is the
shared small one. There are no weights.
"""

from __future__ import annotations

from typing import Any

from vllm_families import TINY_TEXT_DIMS, dump, image_requests, tokenizer_files

NAME = "idefics3"

ROW_COL_TOKENS = tuple(f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7))
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<global-img>",
    *ROW_COL_TOKENS,
    "<fake_token_around_image>",
    "<image>",
    "<end_of_utterance>",
)

# SmolVLM-256M-Instruct's chat_template.json, verbatim.
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

# SmolVLM-256M-Instruct's preprocessor_config.json, key for key.
PREPROCESSOR_CONFIG = {
    "do_convert_rgb": True,
    "do_image_splitting": True,
    "do_normalize": True,
    "do_pad": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "Idefics3ImageProcessor",
    "image_std": [0.5, 0.5, 0.5],
    "max_image_size": {"longest_edge": 512},
    "processor_class": "Idefics3Processor",
    "resample": 1,
    "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": 2048},
}

# SmolVLM-256M-Instruct's processor_config.json.
PROCESSOR_CONFIG = {"image_seq_len": 64, "processor_class": "Idefics3Processor"}


def files() -> dict[str, str]:
    tokenizer_config = {
        "add_prefix_space": False,
        "bos_token": "<|im_start|>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "<end_of_utterance>",
        "extra_special_tokens": ["<fake_token_around_image>", "<image>", "<end_of_utterance>"],
        "model_max_length": 8192,
        "pad_token": "<|im_end|>",
        "processor_class": "Idefics3Processor",
        "tokenizer_class": "GPT2Tokenizer",
        "truncation_side": "left",
        "unk_token": "<|endoftext|>",
    }
    tokenizer, ids = tokenizer_files(SPECIAL_TOKENS, tokenizer_config)
    vocab_size = max(ids.values()) + 1
    config = {
        "architectures": ["Idefics3ForConditionalGeneration"],
        "model_type": "idefics3",
        "image_token_id": ids["<image>"],
        "scale_factor": 4,
        "tie_word_embeddings": False,
        "vocab_size": vocab_size,
        "text_config": {
            "model_type": "llama",
            "vocab_size": vocab_size,
            **TINY_TEXT_DIMS,
            "head_dim": 32,
            "hidden_act": "silu",
            "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-05,
            "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0},
            "tie_word_embeddings": False,
            "bos_token_id": ids["<|im_start|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|im_end|>"],
        },
        "vision_config": {
            "model_type": "idefics3_vision",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_channels": 3,
            "image_size": 512,
            "patch_size": 16,
            "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": 1e-06,
        },
    }
    return {
        "chat_template.jinja": CHAT_TEMPLATE,
        "config.json": dump(config),
        "preprocessor_config.json": dump(PREPROCESSOR_CONFIG),
        "processor_config.json": dump(PROCESSOR_CONFIG),
        **tokenizer,
    }


def requests() -> list[tuple[str, dict[str, Any]]]:
    return image_requests()
