"""vLLM's ``ModelConfig`` fields mediaref mirrors for processing: ``tokenizer`` (a directory the
tokenizer loads from instead of the model's), ``served_model_name`` and ``is_multimodal_model``,
and ``create_processor`` refusing a model no multimodal processor is registered for, as vLLM does.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

# huggingface_hub reads this when first imported; set before anything imports transformers.
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
from transformers import AutoTokenizer

import mediaref.processing._model_config as model_config_module
from mediaref.exceptions import VLLMValidationError
from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import InputProcessingContext, ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
PROBE = "<mediaref_tokenizer_probe>"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Qwen2-VL tokenizer with one extra token, saved on its own."""
    tokenizer = AutoTokenizer.from_pretrained(QWEN2_VL, local_files_only=True)
    tokenizer.add_tokens([PROBE])
    directory = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(directory)
    return str(directory)


def text_model_dir(tmp_path: Path) -> str:
    directory = tmp_path / "llama"
    directory.mkdir()
    (directory / "config.json").write_text(
        json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    )
    return str(directory)


# --- tokenizer ------------------------------------------------------------------------------------


def test_the_new_fields_default_to_none() -> None:
    config = ModelConfig(model=QWEN2_VL)
    assert config.tokenizer is None
    assert config.served_model_name is None


def test_without_tokenizer_the_model_directorys_own_is_used() -> None:
    ctx = InputProcessingContext(ModelConfig(model=QWEN2_VL))
    assert PROBE not in ctx.get_tokenizer().get_vocab()


def test_tokenizer_loads_from_its_own_directory(tokenizer_dir: str) -> None:
    ctx = InputProcessingContext(ModelConfig(model=QWEN2_VL, tokenizer=tokenizer_dir))
    tokenizer = ctx.get_tokenizer()
    assert PROBE in tokenizer.get_vocab()
    # The HF processor is built with that very tokenizer, as vLLM builds it.
    assert ctx.get_hf_processor().tokenizer is tokenizer
    assert ctx.get_tokenizer() is tokenizer  # loaded once


def test_a_processor_from_the_registry_encodes_with_the_configured_tokenizer(
    tokenizer_dir: str,
) -> None:
    processor = MULTIMODAL_REGISTRY.create_processor(
        ModelConfig(model=QWEN2_VL, tokenizer=tokenizer_dir)
    )
    probe_id = processor.info.get_tokenizer().convert_tokens_to_ids(PROBE)
    assert processor.info.get_tokenizer().encode(PROBE, add_special_tokens=False) == [probe_id]


# --- is_multimodal_model and create_processor's refusal -------------------------------------------


def test_is_multimodal_model_for_a_registered_family() -> None:
    assert ModelConfig(model=QWEN2_VL).is_multimodal_model is True


def test_is_multimodal_model_is_false_for_a_text_only_model(tmp_path: Path) -> None:
    assert ModelConfig(model=text_model_dir(tmp_path)).is_multimodal_model is False


def test_create_processor_refuses_a_text_only_model_as_vllm_does(tmp_path: Path) -> None:
    model = text_model_dir(tmp_path)
    with pytest.raises(ValueError, match=f"^{re.escape(model)} is not a multimodal model") as info:
        MULTIMODAL_REGISTRY.create_processor(ModelConfig(model=model))
    # mediaref's error class (a ValueError, HTTP 400), naming what is registered.
    assert isinstance(info.value, VLLMValidationError)
    assert info.value.parameter == "model"
    assert "'llama'" in str(info.value) and "qwen2_vl" in str(info.value)


def test_the_refusal_names_the_served_model_name(tmp_path: Path) -> None:
    config = ModelConfig(model=text_model_dir(tmp_path), served_model_name="my-llm")
    with pytest.raises(ValueError, match=r"^my-llm is not a multimodal model"):
        MULTIMODAL_REGISTRY.create_processor(config)


def test_an_unreadable_model_directory_is_not_called_text_only(tmp_path: Path) -> None:
    config = ModelConfig(model=str(tmp_path / "missing"))
    with pytest.raises(VLLMValidationError, match=r"config\.json") as info:
        _ = config.is_multimodal_model
    assert "is not a multimodal model" not in str(info.value)


def test_before_the_registry_installs_its_answer_no_family_is_known(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(model_config_module, "_multimodal_model_support", None)
    with caplog.at_level(logging.WARNING, logger=model_config_module.__name__):
        assert ModelConfig(model=QWEN2_VL).is_multimodal_model is False
    assert "Import mediaref.registry first" in caplog.text
