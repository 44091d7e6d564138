"""A model with no multimodal processor still has its chats parsed (text, no media).

vLLM serving a text-only model calls the chat parser for every chat request; with mediaref in
place of vLLM's layer (``mediaref-vllm``) that parser is mediaref's. It used to resolve the
model's multimodal processing info first, which a text-only model does not have, so every chat
request failed (``no multimodal processor is registered for 'qwen2'``). A text-only model now
parses without one; a media item for it is a client error naming the modality.
"""

from __future__ import annotations

import json
import shutil

import pytest

from mediaref.exceptions import VLLMValidationError
from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import ModelConfig
from mediaref.renderers.chat_utils import parse_chat_messages, parse_chat_messages_async


@pytest.fixture(scope="module")
def text_only_model(tmp_path_factory: pytest.TempPathFactory) -> ModelConfig:
    """A Qwen2 language model directory: the built-in Qwen2-VL's tokenizer, a text config."""
    source = builtin_model_path("qwen2_vl")
    directory = tmp_path_factory.mktemp("qwen2_text")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(source / name, directory / name)
    config = json.loads((source / "config.json").read_text())
    text = config.get("text_config") or {k: v for k, v in config.items() if k != "vision_config"}
    text = {**text, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}
    (directory / "config.json").write_text(json.dumps(text))
    model = ModelConfig(model=str(directory))
    assert model.is_multimodal_model is False
    return model


def test_a_text_only_models_chat_parses(text_only_model: ModelConfig) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hello"}]},
    ]
    conversation, mm_data, mm_uuids = parse_chat_messages(messages, text_only_model, "string")
    assert conversation == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
    ]
    assert (mm_data, mm_uuids) == (None, None)


async def test_a_media_item_for_a_text_only_model_is_a_client_error(
    text_only_model: ModelConfig,
) -> None:
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    with pytest.raises(VLLMValidationError, match="takes no image input"):
        await parse_chat_messages_async(
            [{"role": "user", "content": [part]}], text_only_model, "openai"
        )
