"""LLaVA-OneVision as the HF checkpoint ``llava-hf/llava-onevision-qwen2-0.5b-ov-hf`` has it.

Architecture ``LlavaOnevisionForConditionalGeneration`` (``model_type`` ``llava_onevision``):
``LlavaOnevisionProcessor`` = ``LlavaOnevisionImageProcessor`` (AnyRes tiles of 384x384 over
``image_grid_pinpoints``) + ``LlavaOnevisionVideoProcessor`` (every frame 384x384) + tokenizer,
placeholders ``<image>`` and ``<video>``; vLLM's ``vllm/model_executor/models/llava_onevision.py``
sizes them from the SigLIP geometry (384 / 14 = 27 patches a side), ``image_grid_pinpoints``,
``vision_aspect_ratio`` ``anyres_max_9`` and ``vision_feature_select_strategy`` ``full``.

Real (the checkpoint's values):

- ``preprocessor_config.json``: the checkpoint's ``LlavaOnevisionImageProcessor`` values (384x384,
  mean/std 0.5, bicubic, 1/255, ``do_pad``, the 36 pinpoints from 384x384 to 2304x2304).
- ``processor_config.json``: ``image_token`` ``<image>``, ``video_token`` ``<video>``,
  ``num_image_tokens`` 729, ``vision_feature_select_strategy`` ``full``,
  ``vision_aspect_ratio`` ``anyres_max_9``.
- ``chat_template.json``: the checkpoint's template (``<|im_start|>user <image>\\n...<|im_end|>``,
  the prompt vLLM's own tests write for this checkpoint).
- ``config.json``: ``image_grid_pinpoints``, ``vision_aspect_ratio``, ``vision_feature_layer`` -1,
  ``vision_feature_select_strategy`` ``full``, ``projector_hidden_act`` ``gelu``,
  ``use_image_newline_parameter``, the SigLIP tower's ``image_size`` 384 and ``patch_size`` 14
  (``vision_use_head`` false), Qwen2-0.5B's ``max_position_embeddings`` 32768 and ``rope_theta``
  1e6.

Unsure: which chat template revision the hub repository serves (transformers' tests and vLLM's
test prompt have ``role + ' '`` as here; transformers' conversion script writes a variant with
``role + '\\n'`` and ``<image>\\n``); whether ``processor_config.json`` carries
``vision_aspect_ratio`` (its value is the processor's default either way); and
``video_preprocessor_config.json``, written out with the image processor's values (which is what
transformers falls back to when a repository has only ``preprocessor_config.json``) and
``do_sample_frames`` false (the class default), rather than copied from the checkpoint.

Tiny (not the checkpoint's): the Qwen2 text model (hidden 64, 1 layer) and the SigLIP tower's widths
(hidden 32, 1 layer); the tokenizer is this package's byte-level BPE (:func:`tokenizer_files`)
instead of Qwen2's 151k vocabulary, carrying the checkpoint's special tokens ``<|endoftext|>
<|im_start|> <|im_end|> <image> <video>`` in its order, so ``image_token_index``,
``video_token_index`` and the bos/eos ids are this tokenizer's, not 151646/151647/151643/151645.

Requests: the image requests, one video, and an image with a video. Stock vLLM 0.33.0's render
server answers the last 400 ("mm_metadata must use the same modalities as mm_hashes"): its
``_encode_mm_kwargs_with_metadata`` (``token_in_token_out/mm_features.py``) leaves out the video
modality, whose items have no ``keep_on_cpu`` field, and its ``MultiModalFeatures`` validator then
refuses the mix; kept as a case both servers must refuse alike.
"""

from __future__ import annotations

from typing import Any

from make_builtin_models import qwen2_tokenizer_config
from vllm_families import clip_part, dump, image_requests, jpeg_part, tokenizer_files

NAME = "llava_onevision"

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>")

# llava-hf/llava-onevision-qwen2-0.5b-ov-hf's chat_template.json (see the docstring).
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + ' '}}"
    "{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>' }}{% endfor %}{# Render all video then #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
    "{{ '<video>' }}{% endfor %}{# Render all text next #}"
    "{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ '\\n' + content['text'] }}{% endfor %}{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ '\\n' + content['text'] }}{% endgeneration %}{% endfor %}{% endif %}"
    "{{'<|im_end|>'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

GRID_PINPOINTS = [[384 * rows, 384 * cols] for rows in range(1, 7) for cols in range(1, 7)]

IMAGE_VALUES: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "LlavaOnevisionProcessor",
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 384, "width": 384},
}


def files() -> dict[str, str]:
    tokenizer, ids = tokenizer_files(
        SPECIAL_TOKENS,
        qwen2_tokenizer_config(SPECIAL_TOKENS, "LlavaOnevisionProcessor", 32768),
    )
    vocab_size = max(ids.values()) + 1
    config: dict[str, Any] = {
        "architectures": ["LlavaOnevisionForConditionalGeneration"],
        "ignore_index": -100,
        "image_grid_pinpoints": GRID_PINPOINTS,
        "image_token_index": ids["<image>"],
        "model_type": "llava_onevision",
        "projector_hidden_act": "gelu",
        "text_config": {
            "architectures": ["Qwen2ForCausalLM"],
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "hidden_size": 64,
            "intermediate_size": 128,
            "max_position_embeddings": 32768,
            "model_type": "qwen2",
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "num_key_value_heads": 1,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "tie_word_embeddings": True,
            "vocab_size": vocab_size,
        },
        "use_image_newline_parameter": True,
        "video_token_index": ids["<video>"],
        "vision_aspect_ratio": "anyres_max_9",
        "vision_config": {
            "hidden_size": 32,
            "image_size": 384,
            "intermediate_size": 64,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "patch_size": 14,
            "vision_use_head": False,
        },
        "vision_feature_layer": -1,
        "vision_feature_select_strategy": "full",
    }
    preprocessor = {
        **IMAGE_VALUES,
        "do_pad": True,
        "image_grid_pinpoints": GRID_PINPOINTS,
        "image_processor_type": "LlavaOnevisionImageProcessor",
    }
    video_preprocessor = {
        **IMAGE_VALUES,
        "do_sample_frames": False,
        "video_processor_type": "LlavaOnevisionVideoProcessor",
    }
    processor = {
        "image_token": "<image>",
        "num_image_tokens": 729,
        "processor_class": "LlavaOnevisionProcessor",
        "video_token": "<video>",
        "vision_aspect_ratio": "anyres_max_9",
        "vision_feature_select_strategy": "full",
    }
    return {
        **tokenizer,
        "chat_template.json": dump({"chat_template": CHAT_TEMPLATE}),
        "config.json": dump(config),
        "preprocessor_config.json": dump(preprocessor),
        "processor_config.json": dump(processor),
        "video_preprocessor_config.json": dump(video_preprocessor),
    }


def requests() -> list[tuple[str, dict[str, Any]]]:
    def chat(*parts: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": list(parts)}]}

    what = {"type": "text", "text": "What happens in this video?"}
    return [
        *image_requests(),
        ("one-video", chat(clip_part(4, 8, 4, (96, 64)), what)),
        ("image-and-video", chat(jpeg_part(5, (320, 240)), clip_part(6, 4, 2, (64, 96)), what)),
    ]
