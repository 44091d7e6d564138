"""LLaVA-1.5 as the HF checkpoint ``llava-hf/llava-1.5-7b-hf`` has it.

Architecture ``LlavaForConditionalGeneration`` (``model_type`` ``llava``): ``LlavaProcessor`` =
``CLIPImageProcessor`` + tokenizer; vLLM's ``vllm/model_executor/models/llava.py`` places
``(336 // 14) ** 2 = 576`` ``<image>`` tokens per image (CLIP ViT-L/14-336, strategy ``default``
drops the CLS token).

Real (the checkpoint's values):

- ``preprocessor_config.json``: every value of the checkpoint's ``CLIPImageProcessor`` (resize the
  shortest edge to 336, center crop 336x336, CLIP mean/std, bicubic, 1/255).
- ``processor_config.json``: ``image_token`` ``<image>``, ``patch_size`` 14,
  ``vision_feature_select_strategy`` ``default``, ``num_additional_image_tokens`` 1 (the revision
  of the repository that carries these keys; older revisions had no processor config and took
  the values from the model config).
- ``chat_template.json``: the checkpoint's template, verbatim (``USER: <image>\\n... ASSISTANT:``).
- ``config.json``: ``vision_feature_layer`` -2, ``vision_feature_select_strategy`` ``default``,
  ``projector_hidden_act`` ``gelu``, ``ignore_index`` -100, ``tie_word_embeddings`` false, the
  vision tower's ``image_size`` 336 and ``patch_size`` 14, the text model's
  ``max_position_embeddings`` 4096 and ``rms_norm_eps`` 1e-05.

Tiny (not the checkpoint's): the Llama text model (hidden 64, 1 layer) and the CLIP vision tower's
widths (hidden 32, 2 layers so that ``vision_feature_layer`` -2 still names a layer); the tokenizer
is this package's byte-level BPE (:func:`tokenizer_files`) instead of Vicuna's 32000-piece
SentencePiece, carrying LLaVA's special tokens ``<unk> <s> </s> <image> <pad>`` in the checkpoint's
order, so ``image_token_index`` and the bos/eos/pad ids are this tokenizer's, not 32000/1/2/32001.
Its ``tokenizer_class`` is ``PreTrainedTokenizerFast`` (the checkpoint says ``LlamaTokenizer``,
whose transformers 5 class rebuilds a SentencePiece-style pipeline that does not fit a byte-level
vocabulary). Unsure: the checkpoint's ``tokenizer_config.json`` keys beyond the special tokens,
``padding_side`` and ``processor_class`` are left out.
"""

from __future__ import annotations

from typing import Any

from vllm_families import dump, image_requests, tokenizer_files

NAME = "llava"

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<image>", "<pad>")

# llava-hf/llava-1.5-7b-hf's chat_template.json, verbatim.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "{{ message['role'].upper() + ': '}}{% endif %}{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\\n' }}{% endfor %}{# Render all text next #}"
    "{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def files() -> dict[str, str]:
    tokenizer, ids = tokenizer_files(
        SPECIAL_TOKENS,
        {
            "bos_token": "<s>",
            "clean_up_tokenization_spaces": False,
            "eos_token": "</s>",
            "padding_side": "left",
            "pad_token": "<pad>",
            "processor_class": "LlavaProcessor",
            "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": "<unk>",
        },
    )
    vocab_size = min(ids.values()) + len(SPECIAL_TOKENS)
    config: dict[str, Any] = {
        "architectures": ["LlavaForConditionalGeneration"],
        "ignore_index": -100,
        "image_token_index": ids["<image>"],
        "model_type": "llava",
        "pad_token_id": ids["<pad>"],
        "projector_hidden_act": "gelu",
        "text_config": {
            "architectures": ["LlamaForCausalLM"],
            "bos_token_id": ids["<s>"],
            "eos_token_id": ids["</s>"],
            "hidden_size": 64,
            "intermediate_size": 128,
            "max_position_embeddings": 4096,
            "model_type": "llama",
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "num_key_value_heads": 2,
            "pad_token_id": ids["<pad>"],
            "rms_norm_eps": 1e-05,
            "vocab_size": vocab_size,
        },
        "tie_word_embeddings": False,
        "vision_config": {
            "hidden_size": 32,
            "image_size": 336,
            "intermediate_size": 64,
            "model_type": "clip_vision_model",
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "patch_size": 14,
            "projection_dim": 32,
        },
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
    }
    preprocessor = {
        "crop_size": {"height": 336, "width": 336},
        "do_center_crop": True,
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": CLIP_MEAN,
        "image_processor_type": "CLIPImageProcessor",
        "image_std": CLIP_STD,
        "processor_class": "LlavaProcessor",
        "resample": 3,
        "rescale_factor": 0.00392156862745098,
        "size": {"shortest_edge": 336},
    }
    processor = {
        "image_token": "<image>",
        "num_additional_image_tokens": 1,
        "patch_size": 14,
        "processor_class": "LlavaProcessor",
        "vision_feature_select_strategy": "default",
    }
    return {
        **tokenizer,
        "chat_template.json": dump({"chat_template": CHAT_TEMPLATE}),
        "config.json": dump(config),
        "preprocessor_config.json": dump(preprocessor),
        "processor_config.json": dump(processor),
    }


def requests() -> list[tuple[str, dict[str, Any]]]:
    return image_requests()
