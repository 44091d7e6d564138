"""Gemma 3 (``google/gemma-3-4b-it``): ``Gemma3ForConditionalGeneration``, ``Gemma3Processor``.

Real (the checkpoint's values, as its files have them):

- ``preprocessor_config.json``: ``Gemma3ImageProcessor``, 896x896, bilinear (``resample`` 2),
  mean/std 0.5, ``image_seq_length`` 256, and the four pan-and-scan keys (and
  ``do_convert_rgb``) ``null`` as the checkpoint ships them: the processor's own defaults apply
  (pan and scan off; min crop 256, at most 4 crops, ratio 1.2 when a request turns it on);
- ``processor_config.json``: ``image_seq_length`` 256;
- the chat template, verbatim (the checkpoint's ``chat_template`` string);
- ``config.json``'s multimodal values: ``mm_tokens_per_image`` 256, SigLIP geometry (image 896,
  patch 14), the text model's ``sliding_window`` 1024 and RoPE (linear, factor 8, on global
  layers; theta 1e6 global, 1e4 local), ``max_position_embeddings`` 131072;
- ``tokenizer_config.json``'s Gemma 3 keys (``boi_token``, ``eoi_token``, ``image_token``, their
  ``extra_special_tokens`` entries, bos/eos/pad/unk/mask names).

Unsure: the checkpoint's files could not be read here (no network); the values are those of its
published ``preprocessor_config.json``, ``processor_config.json``, ``config.json`` and
``tokenizer_config.json`` as recalled and cross-checked against transformers' Gemma 3 classes
(whose comment confirms the pan-and-scan keys are ``null`` in the checkpoint) and copies of the
chat template found in public code; keys that do not affect processing (``sp_model_kwargs``,
``use_default_system_prompt``, ``torch_dtype``) are left out.

Tiny (not the checkpoint's): the text model (hidden 64, 1 layer, 2 heads of 32, one KV head), the
SigLIP tower's widths and depth (1 layer), and the tokenizer: the shared byte-level BPE
(``tokenizer_files``) instead of Gemma's 262k SentencePiece vocabulary, so every token id (and
``boi/eoi/image_token_index``, ``eos_token_id``) is this vocabulary's, not the checkpoint's
(255999, 256000, 262144, [1, 106]). ``tokenizer_class`` is ``PreTrainedTokenizerFast``:
transformers' ``GemmaTokenizer`` would rebuild a SentencePiece-style pipeline over this
byte-level vocabulary. Gemma's vocabulary has ``"\\n"``, ``"\\n\\n"``, ``"\\n\\n\\n"`` and
``"\\n\\n\\n\\n"`` as single tokens and vLLM's Gemma 3 processor looks them up by those strings
(``vocab["\\n\\n"]``); a byte-level vocabulary spells them ``Ċ``..., so they are added here as
(non-special) added tokens. The real tokenizer adds ``<bos>`` when encoding (``add_bos_token``);
this one does not (chat prompts carry ``<bos>`` from the template either way).
"""

from __future__ import annotations

import json
from typing import Any

from vllm_families import TINY_TEXT_DIMS, dump, image_requests, jpeg_part, tokenizer_files

NAME = "gemma3"

SPECIALS = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
)
# Single tokens in Gemma's vocabulary that vLLM's Gemma 3 processor looks up by their text.
NEWLINES = ("\n", "\n\n", "\n\n\n", "\n\n\n\n")

# google/gemma-3-4b-it's chat template, verbatim.
CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    '    {%- set first_user_prefix = "" -%}\n'
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    '        {{ raise_exception("Conversation roles must alternate'
    ' user/assistant/user/assistant/...") }}\n'
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    '        {%- set role = "model" -%}\n'
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    '        {{ raise_exception("Invalid content type") }}\n'
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n"
)

IMAGE_PROCESSOR = {
    "do_convert_rgb": None,
    "do_normalize": True,
    "do_pan_and_scan": None,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "Gemma3ImageProcessor",
    "image_seq_length": 256,
    "image_std": [0.5, 0.5, 0.5],
    "pan_and_scan_max_num_crops": None,
    "pan_and_scan_min_crop_size": None,
    "pan_and_scan_min_ratio_to_activate": None,
    "processor_class": "Gemma3Processor",
    "resample": 2,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 896, "width": 896},
}

TOKENIZER_CONFIG = {
    "add_bos_token": True,
    "add_eos_token": False,
    "boi_token": "<start_of_image>",
    "bos_token": "<bos>",
    "clean_up_tokenization_spaces": False,
    "eoi_token": "<end_of_image>",
    "eos_token": "<eos>",
    "extra_special_tokens": {
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
    },
    "image_token": "<image_soft_token>",
    "mask_token": "<mask>",
    "model_max_length": 1000000000000000019884624838656,
    "pad_token": "<pad>",
    "processor_class": "Gemma3Processor",
    "spaces_between_special_tokens": False,
    "tokenizer_class": "PreTrainedTokenizerFast",
    "unk_token": "<unk>",
}


def _with_newline_tokens(tokenizer_json: str) -> tuple[str, dict[str, int]]:
    """``tokenizer.json`` with :data:`NEWLINES` appended as non-special added tokens."""
    document = json.loads(tokenizer_json)
    next_id = max(token["id"] for token in document["added_tokens"]) + 1
    ids = {}
    for offset, text in enumerate(NEWLINES):
        ids[text] = next_id + offset
        document["added_tokens"].append(
            {
                "id": next_id + offset,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": False,
            }
        )
    return dump(document), ids


def files() -> dict[str, str]:
    tokenizer, ids = tokenizer_files(SPECIALS, TOKENIZER_CONFIG)
    tokenizer["tokenizer.json"], newline_ids = _with_newline_tokens(tokenizer["tokenizer.json"])
    vocab_size = max(newline_ids.values()) + 1
    text_config: dict[str, Any] = {
        "model_type": "gemma3_text",
        "vocab_size": vocab_size,
        **TINY_TEXT_DIMS,
        "head_dim": 32,
        "query_pre_attn_scalar": 32,
        "max_position_embeddings": 131072,
        "sliding_window": 1024,
        "rope_parameters": {
            "full_attention": {"factor": 8.0, "rope_theta": 1000000.0, "rope_type": "linear"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
        },
        "bos_token_id": ids["<bos>"],
        "eos_token_id": ids["<eos>"],
        "pad_token_id": ids["<pad>"],
    }
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "boi_token_index": ids["<start_of_image>"],
        "eoi_token_index": ids["<end_of_image>"],
        "image_token_index": ids["<image_soft_token>"],
        "eos_token_id": [ids["<eos>"], ids["<end_of_turn>"]],
        "mm_tokens_per_image": 256,
        "initializer_range": 0.02,
        "text_config": text_config,
        # SigLIP's geometry as the checkpoint has it (896 / 14 = 64 patches a side, pooled to 16);
        # widths and depth tiny.
        "vision_config": {
            "model_type": "siglip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "image_size": 896,
            "patch_size": 14,
            "vision_use_head": False,
        },
    }
    return {
        "chat_template.jinja": CHAT_TEMPLATE,
        "config.json": dump(config),
        "preprocessor_config.json": dump(IMAGE_PROCESSOR),
        "processor_config.json": dump(
            {"image_seq_length": 256, "processor_class": "Gemma3Processor"}
        ),
        **tokenizer,
    }


def requests() -> list[tuple[str, dict[str, Any]]]:
    """The shared image requests, plus two images with text between them (adjacent images make
    vLLM 0.33.0's own Gemma 3 processor answer 400 on the render route: it fuses the "\\n\\n"
    closing one image and the "\\n\\n" opening the next into one "\\n\\n\\n\\n" token both
    placeholders claim, "mm_placeholders must be globally non-overlapping") and pan and scan
    turned on per request for a wide and a tall image (crops: 4 and 2)."""

    def user(*parts: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "user", "content": list(parts)}]

    def text(words: str) -> dict[str, Any]:
        return {"type": "text", "text": words}

    pan_and_scan = {"do_pan_and_scan": True}
    return [
        *image_requests(),
        (
            "two-images-apart",
            {
                "messages": user(
                    jpeg_part(2, (320, 512)),
                    text("The first picture."),
                    jpeg_part(3, (1024, 200)),
                    text("Compare the two images."),
                )
            },
        ),
        (
            "pan-and-scan-wide",
            {
                "messages": user(jpeg_part(4, (1200, 300)), text("Describe the picture.")),
                "mm_processor_kwargs": pan_and_scan,
            },
        ),
        (
            "pan-and-scan-tall",
            {
                "messages": user(jpeg_part(5, (400, 900)), text("Describe the picture.")),
                "mm_processor_kwargs": pan_and_scan,
            },
        ),
    ]
