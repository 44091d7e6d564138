"""InternVL 3 in transformers' format (``OpenGVLab/InternVL3-1B-hf``):
``InternVLForConditionalGeneration`` (vLLM 0.33.0 serves it with ``interns1.py``),
``InternVLProcessor`` = ``GotOcr2ImageProcessorFast`` + ``InternVLVideoProcessor``.

Real (the checkpoint's values, from transformers' ``convert_internvl_weights_to_hf.py``, which
wrote the checkpoint, and transformers' class defaults it saved):

- ``preprocessor_config.json``: 448x448, bicubic, ImageNet mean/std, ``crop_to_patches`` false
  with ``min_patches`` 1 and ``max_patches`` 12 (``InternVLProcessor`` turns tiling on per call:
  its ``images_kwargs`` default ``crop_to_patches`` is true);
- ``processor_config.json``: ``image_seq_length`` 256;
- the chat template, verbatim (the conversion script's; no system prompt, unlike the
  remote-code ``OpenGVLab/InternVL3-1B``);
- ``tokenizer_config.json``'s keys: ``Qwen2Tokenizer``, ``model_max_length`` 8192, the four
  named tokens (``start_image_token`` ``<img>``, ``end_image_token`` ``</img>``,
  ``context_image_token`` ``<IMG_CONTEXT>``, ``video_token`` ``<video>``), eos ``<|im_end|>``,
  pad ``<|endoftext|>``; the special tokens: Qwen2.5's 22, then ``<img>``, ``</img>``,
  ``<IMG_CONTEXT>``, ``<quad>``, ``</quad>``, ``<ref>``, ``</ref>``, ``<box>``, ``</box>``;
- ``config.json``'s multimodal values: ``image_seq_length`` 256, ``downsample_ratio`` 0.5,
  ``projector_hidden_act`` gelu, ``vision_feature_layer`` -1, ``vision_feature_select_strategy``
  default, the InternViT geometry (image 448, patch 14) and its flags.

Unsure: ``video_preprocessor_config.json`` (the conversion script loaded the video processor from
the image processor's file and saved it: 448x448 and ImageNet mean/std as here; the other keys
are ``InternVLVideoProcessor``'s defaults, reconstructed, not read from the checkpoint); where
``<video>`` sits in the checkpoint's vocabulary (it is one added special token here, last, as
vLLM's InternS1 processor requires it to encode to a single id); whether the checkpoint marks the
Qwen2.5 tool/FIM tokens special (here every added token is special).

Tiny (not the checkpoint's): the Qwen2 text model (hidden 64, 1 layer; the checkpoint's is
Qwen2.5-0.5B: 896, 24 layers), InternViT's widths and depth (1 layer), and the tokenizer: the
shared byte-level BPE (``tokenizer_files``) instead of Qwen2.5's 151k vocabulary, so every token
id (``image_token_id``: 151667 in the checkpoint) is this vocabulary's.
"""

from __future__ import annotations

from typing import Any

from make_builtin_models import QWEN2_VL_SPECIAL_TOKENS
from vllm_families import TINY_TEXT_DIMS, dump, image_requests, jpeg_part, tokenizer_files

NAME = "internvl"

QWEN2_5_SPECIALS = (
    *QWEN2_VL_SPECIAL_TOKENS,  # Qwen2.5's, then its tool and fill-in-the-middle tokens
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
INTERNVL_SPECIALS = (
    "<img>",
    "</img>",
    "<IMG_CONTEXT>",
    "<quad>",
    "</quad>",
    "<ref>",
    "</ref>",
    "<box>",
    "</box>",
)
SPECIALS = (*QWEN2_5_SPECIALS, *INTERNVL_SPECIALS, "<video>")

NAMED_TOKENS = {
    "context_image_token": "<IMG_CONTEXT>",
    "end_image_token": "</img>",
    "start_image_token": "<img>",
    "video_token": "<video>",
}

# OpenGVLab/InternVL3-1B-hf's chat template, verbatim.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}"
    "{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'video' %}"
    "{{ '<video>\n' }}"
    "{% elif content['type'] == 'text' %}"
    "{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "{{'<|im_end|>\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{'<|im_start|>assistant\n' }}"
    "{% endif %}"
)

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

IMAGE_PROCESSOR = {
    "crop_size": None,
    "crop_to_patches": False,
    "data_format": "channels_first",
    "default_to_square": True,
    "device": None,
    "do_center_crop": None,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": IMAGENET_MEAN,
    "image_processor_type": "GotOcr2ImageProcessorFast",
    "image_std": IMAGENET_STD,
    "input_data_format": None,
    "max_patches": 12,
    "min_patches": 1,
    "processor_class": "InternVLProcessor",
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "return_tensors": None,
    "size": {"height": 448, "width": 448},
}

VIDEO_PROCESSOR = {
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "do_sample_frames": False,
    "image_mean": IMAGENET_MEAN,
    "image_std": IMAGENET_STD,
    "initial_shift": True,
    "processor_class": "InternVLProcessor",
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 448, "width": 448},
    "video_processor_type": "InternVLVideoProcessor",
}

TOKENIZER_CONFIG = {
    "add_prefix_space": False,
    "bos_token": None,
    "clean_up_tokenization_spaces": False,
    "eos_token": "<|im_end|>",
    "errors": "replace",
    "extra_special_tokens": NAMED_TOKENS,
    **NAMED_TOKENS,
    "model_max_length": 8192,
    "pad_token": "<|endoftext|>",
    "processor_class": "InternVLProcessor",
    "return_token_type_ids": False,
    "split_special_tokens": False,
    "tokenizer_class": "Qwen2Tokenizer",
    "unk_token": None,
}


def files() -> dict[str, str]:
    tokenizer, ids = tokenizer_files(SPECIALS, TOKENIZER_CONFIG)
    text_config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": max(ids.values()) + 1,
        **TINY_TEXT_DIMS,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
    }
    config = {
        "architectures": ["InternVLForConditionalGeneration"],
        "model_type": "internvl",
        "downsample_ratio": 0.5,
        "image_seq_length": 256,
        "image_token_id": ids["<IMG_CONTEXT>"],
        "projector_hidden_act": "gelu",
        "vision_feature_layer": -1,
        "vision_feature_select_strategy": "default",
        "text_config": text_config,
        # InternViT-300M's geometry and flags as the checkpoint has them; widths and depth tiny.
        "vision_config": {
            "model_type": "internvl_vision",
            "architectures": ["InternVisionModel"],
            "attention_bias": True,
            "hidden_act": "gelu",
            "hidden_size": 32,
            "image_size": [448, 448],
            "intermediate_size": 64,
            "layer_norm_eps": 1e-06,
            "norm_type": "layer_norm",
            "num_attention_heads": 2,
            "num_channels": 3,
            "num_hidden_layers": 1,
            "patch_size": [14, 14],
            "use_absolute_position_embeddings": True,
            "use_mask_token": False,
            "use_mean_pooling": True,
            "use_qk_norm": False,
        },
    }
    return {
        "chat_template.jinja": CHAT_TEMPLATE,
        "config.json": dump(config),
        "preprocessor_config.json": dump(IMAGE_PROCESSOR),
        "processor_config.json": dump(
            {"image_seq_length": 256, "processor_class": "InternVLProcessor"}
        ),
        "video_preprocessor_config.json": dump(VIDEO_PROCESSOR),
        **tokenizer,
    }


def requests() -> list[tuple[str, dict[str, Any]]]:
    """The shared image requests, plus per-request tiling settings: tiling off (one 448 tile) and
    at most 2 tiles (a wide image: 2 tiles and the thumbnail, where the default makes 4 and the
    thumbnail)."""

    def chat(mm_processor_kwargs: dict[str, Any]) -> dict[str, Any]:
        text = {"type": "text", "text": "Describe the picture."}
        content = [jpeg_part(4, (1200, 300)), text]
        return {
            "messages": [{"role": "user", "content": content}],
            "mm_processor_kwargs": mm_processor_kwargs,
        }

    return [
        *image_requests(),
        ("untiled", chat({"crop_to_patches": False})),
        ("max-patches-2", chat({"max_patches": 2})),
    ]
