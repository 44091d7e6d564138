"""Hostile chat requests are refused as the client's errors (400/413), never as a server crash.

- embedding metadata nested deeper than any grid: refused before anything recurses over it;
- a ``prompt_embeds`` tensor declaring a dense size over ``VLLM_MAX_EMBED_DECODE_BYTES``:
  refused before it is densified, naming ``prompt_embeds``, as a chat part and as a completion
  prompt given to the renderer as bytes (which once loaded it with no cap, no sparse check and
  no width check);
- decoded images handed in by the caller count against the request's decoded-bytes budget.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any, ClassVar

import pybase64
import pytest
import torch
from PIL import Image

from mediaref.exceptions import MediaTooLargeError, VLLMValidationError
from mediaref.media.image import ImageEmbeddingMediaIO
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import Qwen2VLDataParser, Qwen2VLProcessingInfo
from mediaref.processing.context import ModelConfig
from mediaref.renderers.chat_utils import parse_chat_messages, resolve_processing_info


@dataclasses.dataclass(frozen=True)
class _EmbedsConfig(ModelConfig):
    enable_prompt_embeds: bool = True


class _GridParser(Qwen2VLDataParser):
    embedding_fields: ClassVar[dict[str, dict[str, Any]]] = {
        "image": {"image_embeds": "values", "image_grid_thw": "metadata"}
    }


class _GridInfo(Qwen2VLProcessingInfo):
    def get_data_parser(self) -> Any:
        return _GridParser(self.get_merge_size())


def _config() -> _EmbedsConfig:
    return _EmbedsConfig(model=str(builtin_model_path("qwen2_vl")), enable_mm_embeds=True)


def _user(*parts: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(parts)}]


def test_metadata_nested_past_any_grid_is_a_400_not_a_recursion_error() -> None:
    info = _GridInfo(resolve_processing_info(_config()).ctx)
    deep: list[Any] = [1]
    for _ in range(100_000):
        deep = [deep]
    part = {
        "type": "image_embeds",
        "image_embeds": {
            "image_embeds": ImageEmbeddingMediaIO().encode_base64(torch.zeros(4, 64)),
            "image_grid_thw": deep,
        },
    }
    with pytest.raises(VLLMValidationError, match="finite numeric array"):
        parse_chat_messages(_user(part), info, "openai")


def test_a_sparse_prompt_embeds_bomb_is_refused_before_densifying(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_MAX_EMBED_DECODE_BYTES", str(1 << 20))
    bomb = torch.sparse_coo_tensor([[0], [0]], [1.0], (1 << 20, 64))  # 256 MiB once dense
    buffer = io.BytesIO()
    torch.save(bomb, buffer)
    part = {"type": "prompt_embeds", "data": pybase64.b64encode(buffer.getvalue()).decode()}
    with pytest.raises(VLLMValidationError, match="VLLM_MAX_EMBED_DECODE_BYTES") as info:
        parse_chat_messages(_user(part), resolve_processing_info(_config()), "openai")
    assert info.value.parameter == "prompt_embeds"


def _saved(tensor: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    return pybase64.b64encode(buffer.getvalue())


def test_a_completion_prompts_embeddings_pass_the_same_guards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mediaref.renderers.base import BaseRenderer

    monkeypatch.setenv("VLLM_MAX_EMBED_DECODE_BYTES", str(1 << 20))
    renderer = BaseRenderer(_config())
    try:
        bomb = torch.sparse_coo_tensor([[0], [0]], [1.0], (1 << 20, 64))  # 256 MiB once dense
        with pytest.raises(VLLMValidationError, match="VLLM_MAX_EMBED_DECODE_BYTES") as info:
            renderer.render_prompt(_saved(bomb))
        assert info.value.parameter == "prompt_embeds"
        outside = torch.sparse_coo_tensor([[5], [0]], [1.0], (2, 64), check_invariants=False)
        with pytest.raises(VLLMValidationError, match="could not be deserialized"):
            renderer.render_prompt(_saved(outside))  # an index past its shape: never densified
        with pytest.raises(VLLMValidationError, match="hidden_size 8 does not match"):
            renderer.render_prompt(_saved(torch.zeros(3, 8)))
        loaded = renderer.render_prompt(_saved(torch.ones(3, 64)))["prompt_embeds"]
        assert torch.equal(loaded, torch.ones(3, 64))
    finally:
        renderer.shutdown()


def test_every_embedding_loader_takes_one_sparse_guard() -> None:
    # torch's sparse check is a process-wide flag: two guards with two locks would let one
    # loader switch it off under another. vLLM's modules name the function; so do mediaref's.
    import mediaref.media.audio as audio
    import mediaref.media.image as image
    import mediaref.media.video as video
    from mediaref.media.sparse_utils import check_sparse_tensor_invariants_threadsafe
    from mediaref.vllm_hook import ALIASES

    for module in (audio, image, video):
        assert module.check_sparse_tensor_invariants_threadsafe is (
            check_sparse_tensor_invariants_threadsafe
        )
    assert ALIASES["vllm.utils.sparse_utils"] == "mediaref.media.sparse_utils"


def test_callers_decoded_images_are_charged_to_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", str(64 * 64 * 4))
    image = Image.new("RGB", (64, 64))
    info = resolve_processing_info(_config())
    parse_chat_messages(_user({"image_pil": image}), info, "openai")
    with pytest.raises(MediaTooLargeError):
        parse_chat_messages(_user({"image_pil": image}, {"image_pil": image}), info, "openai")
