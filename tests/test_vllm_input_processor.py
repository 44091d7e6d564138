"""vLLM 0.33.0's input processor builds the same engine request with mediaref in place.

``vllm/v1/engine/input_processor.py`` is what turns a prompt into the ``EngineCoreRequest`` an
engine core runs: it renders raw prompts through vLLM's renderer, which takes the model's
tokenization defaults from the processing info and calls vLLM's API on them
(``with_kwargs``, ``_get_text_truncation_offset``, ...). Before mediaref's ``TokenizeParams``
answered that API, every raw prompt failed there with mediaref in place (an ``AttributeError``),
and with it vLLM's offline ``LLM`` entrypoints, which take the same defaults.

Each case (raw prompts, and a chat rendered as ``LLM.chat`` renders it, its image a ``data:``
URL) runs once on stock vLLM and once with mediaref's hook, in a vLLM 0.33.0 interpreter on the
CPU (``MEDIAREF_VLLM_PYTHON``; skipped otherwise), and the two requests must agree: token ids,
each item's hash, identifier and placement, and its tensors' bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

VLLM_PYTHON = os.environ.get("MEDIAREF_VLLM_PYTHON")
pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON, reason="set MEDIAREF_VLLM_PYTHON to a vLLM 0.33.0 interpreter"
)

BUILD_REQUESTS = """
import base64, hashlib, io, json, sys
if sys.argv[1] == "hooked":
    import mediaref.vllm_hook as hook
    hook.install()
import numpy as np, torch
from PIL import Image
from mediaref.models.builtin import builtin_model_path
from vllm.config import DeviceConfig, ModelConfig, VllmConfig
from vllm.renderers.params import ChatParams, merge_kwargs
from vllm.sampling_params import SamplingParams
from vllm.v1.engine.input_processor import InputProcessor

config = VllmConfig(
    model_config=ModelConfig(model=str(builtin_model_path("qwen2_vl")), max_model_len=8192),
    device_config=DeviceConfig("cpu"),
)
processor = InputProcessor(config)
image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (300, 400, 3), dtype=np.uint8))
user = "<|im_start|>user\\n{}<|im_end|>\\n<|im_start|>assistant\\n"
cases = {
    "image": ({"prompt": user.format("<|vision_start|><|image_pad|><|vision_end|>What is it?"),
               "multi_modal_data": {"image": image}}, None),
    "two images": ({"prompt": user.format("<|vision_start|><|image_pad|><|vision_end|>" * 2),
                    "multi_modal_data": {"image": [image, image.rotate(90, expand=True)]}}, None),
    "text truncated": ({"prompt": "hello there " * 60}, {"truncation": True, "max_length": 20}),
    "text padded": ({"prompt": "hello"}, {"padding": "max_length", "max_length": 12}),
}


def chat_input(conversation):
    # What LLM.chat does before the engine (vllm/entrypoints/common/offline.py): the chat
    # parsed (media fetched through the connector), templated and rendered by vLLM's renderer.
    params = ChatParams(
        chat_template=None,
        chat_template_content_format="auto",
        chat_template_kwargs=merge_kwargs(None, dict(add_generation_prompt=True, tools=None,
                                                     continue_final_message=False, tokenize=False)),
        mm_processor_kwargs=None,
    )
    tok_params = processor.renderer.default_chat_tok_params.with_kwargs(add_special_tokens=False)
    _, inputs = processor.renderer.render_chat([conversation], params, tok_params)
    return inputs[0]


jpeg = io.BytesIO()
image.resize((320, 240)).save(jpeg, "JPEG")
url = "data:image/jpeg;base64," + base64.b64encode(jpeg.getvalue()).decode()
cases["chat"] = (chat_input([{"role": "user", "content": [
    {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is it?"},
]}]), None)


def digest(value):
    if isinstance(value, torch.Tensor):
        raw = value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return [str(value.dtype), list(value.shape), hashlib.sha256(raw).hexdigest()]
    return repr(value)


out = {}
for name, (prompt, kwargs) in cases.items():
    request = processor.process_inputs(
        name, prompt, SamplingParams(max_tokens=4), ("generate",), tokenization_kwargs=kwargs
    )
    out[name] = {
        "prompt_token_ids": list(request.prompt_token_ids),
        "features": [
            {
                "identifier": f.identifier,
                "mm_hash": f.mm_hash,
                "modality": f.modality,
                "placement": [f.mm_position.offset, f.mm_position.length],
                # None: an item the engine already holds (the sender cache's hit, by hash)
                "data": None if f.data is None else {
                    k: digest(e.data) for k, e in sorted(f.data.items())
                },
                "item_class": None if f.data is None else type(f.data).__module__,
            }
            for f in request.mm_features or ()
        ],
    }
print("REQUESTS " + json.dumps(out))
"""


def engine_requests(mode: str) -> dict[str, dict[str, object]]:
    assert VLLM_PYTHON is not None
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    env.pop("MEDIAREF_IMPORT_HOOK_INHERITED", None)
    result = subprocess.run(
        [VLLM_PYTHON, "-c", BUILD_REQUESTS, mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("REQUESTS ")]
    assert result.returncode == 0 and lines, result.stderr[-4000:]
    found: dict[str, dict[str, object]] = json.loads(lines[-1].removeprefix("REQUESTS "))
    return found


def test_the_engine_requests_are_stock_vllms() -> None:
    stock, hooked = engine_requests("stock"), engine_requests("hooked")
    for requests, package in ((stock, "vllm.multimodal.inputs"), (hooked, "mediaref.inputs")):
        classes = {f["item_class"] for r in requests.values() for f in r["features"]}  # type: ignore[attr-defined]
        # The hook was (or was not) in place: whose item class the request carries.
        assert {str(c).split("._")[0] for c in classes - {None}} == {package}, classes
        for request in requests.values():
            for feature in request["features"]:  # type: ignore[attr-defined]
                del feature["item_class"]
    assert hooked == stock
    assert len(stock["text truncated"]["prompt_token_ids"]) == 20  # type: ignore[arg-type]
    assert len(stock["text padded"]["prompt_token_ids"]) == 12  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
