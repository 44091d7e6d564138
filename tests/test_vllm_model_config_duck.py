"""Code vLLM calls with its own ``ModelConfig`` reads it as well as mediaref's.

Under vLLM (issue 29's import hook), vLLM hands mediaref's registry, caches and processing info
its own ``ModelConfig``: no ``family``, no ``derived_max_model_len`` (its ``max_model_len`` is
already resolved), and the multimodal settings behind ``get_multimodal_config()`` with the
top-level constructor fields left None. A stand-in with just those traits checks each reader;
with vLLM's own config, ``vllm launch render`` ran to ``/health`` 200 on mediaref with them.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from PIL import Image

from mediaref.cache._settings import cache_type_of
from mediaref.models.builtin import builtin_model_path
from mediaref.processing._model_config import max_model_len_of
from mediaref.processing.context import ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY
from mediaref.renderers.chat_utils import ChatCompletionMessageParam


def _vllm_like(**multimodal: Any) -> SimpleNamespace:
    """What of vLLM 0.33's ModelConfig these readers touch."""
    settings = SimpleNamespace(mm_processor_cache_type="shm", mm_processor_cache_gb=4, **multimodal)
    return SimpleNamespace(
        model=str(builtin_model_path("qwen2_vl")),
        max_model_len=4096,
        mm_processor_cache_type=None,  # a constructor field vLLM moved into its mm config
        get_multimodal_config=lambda: settings,
    )


def test_the_registry_finds_a_model_by_its_directory_without_a_family() -> None:
    config = _vllm_like()
    assert MULTIMODAL_REGISTRY.get_family(config) == "qwen2_vl"  # type: ignore[arg-type]
    assert MULTIMODAL_REGISTRY._is_multimodal_model(config)  # type: ignore[arg-type]


def test_a_setting_left_none_is_read_from_the_multimodal_config() -> None:
    assert cache_type_of(_vllm_like()) == "shm"


def test_mediarefs_own_config_keeps_its_none_for_the_environment() -> None:
    config = ModelConfig(model=str(builtin_model_path("qwen2_vl")))
    assert cache_type_of(config) == "lru"


def test_the_context_length_of_either_config() -> None:
    assert max_model_len_of(_vllm_like()) == 4096
    config = ModelConfig(model=str(builtin_model_path("qwen2_vl")))
    assert max_model_len_of(config) == config.derived_max_model_len


def test_chat_message_types_can_be_pydantic_fields() -> None:
    # vLLM's ChatCompletionRequest (pydantic) types its messages with these; pydantic refuses
    # typing.TypedDict on Python < 3.12, so they are typing_extensions' (as vLLM's are).
    pydantic = pytest.importorskip("pydantic")

    class Request(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        messages: list[ChatCompletionMessageParam]  # PIL image parts: their own config

    message = {"role": "user", "content": [{"type": "text", "text": "Hi"}]}
    assert Request(messages=[message]).messages == [message]
    image = Image.new("RGB", (4, 4))
    pil = {"role": "user", "content": [{"image_pil": image}]}
    parsed: Any = Request(messages=[pil]).messages[0]
    assert parsed["content"][0]["image_pil"] is image


def test_the_chat_parser_reads_vllms_media_io_kwargs() -> None:
    from mediaref.renderers.chat_utils._model import config_media_io_kwargs

    config = _vllm_like(media_io_kwargs={"video": {"num_frames": 4}})
    config.media_io_kwargs = None  # vLLM's constructor field, moved into its mm config
    assert config_media_io_kwargs(config) == {"video": {"num_frames": 4}}


def test_processing_info_over_vllms_config() -> None:
    from mediaref.processing.context import BaseProcessingInfo

    class Info(BaseProcessingInfo):
        def get_supported_mm_limits(self) -> dict[str, int | None]:
            return {"image": None}

    info = Info(SimpleNamespace(model_config=_vllm_like()))  # type: ignore[arg-type]
    assert info.model_id == str(builtin_model_path("qwen2_vl"))  # vLLM's: the model argument
    assert info.mm_device_do_normalize is False  # vLLM 0.33 normalizes on the CPU
