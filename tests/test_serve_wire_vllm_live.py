"""Live responses of ``mediaref serve`` read by vLLM 0.33.0 itself: its ``GenerateRequest`` model
validates them and its ``decode_mm_kwargs_item`` decodes every item to mediaref's tensors.

Needs a vLLM 0.33.0 interpreter: set ``MEDIAREF_VLLM_PYTHON`` to it (a scratch venv,
``docs/performance.md`` says how to make one); skipped otherwise, so the default run needs no
vLLM. The responses are rendered here, written to a file, and read there.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf  # type: ignore[import-untyped]
import torch
from aiohttp.test_utils import TestClient, TestServer

from mediaref.serve.app import CHAT_ROUTE, build_app
from mediaref.serve.mm_serde import decode_mm_kwargs_item
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService
from test_serve import data_url, jpeg_bytes

VLLM_PYTHON = os.environ.get("MEDIAREF_VLLM_PYTHON")
pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON, reason="set MEDIAREF_VLLM_PYTHON to a vLLM 0.33.0 interpreter"
)

READER = """
import base64, hashlib, json, sys
from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import decode_mm_kwargs_item
from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateRequest

import torch

def digest(value):
    if isinstance(value, torch.Tensor):
        raw = value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return [str(value.dtype), list(value.shape), hashlib.sha256(raw).hexdigest()]
    if isinstance(value, list):
        return [digest(v) for v in value]
    return value

out = []
for response in json.load(open(sys.argv[1])):
    GenerateRequest.model_validate(response)
    features = response["features"]
    items = {}
    for part in ("kwargs_data", "mm_metadata"):
        for modality, encoded in (features.get(part) or {}).items():
            for index, item in enumerate(encoded):
                if item is None:
                    continue
                decoded = decode_mm_kwargs_item(item)
                items[f"{part}/{modality}/{index}"] = {
                    key: {"data": digest(elem.data), "field": type(elem.field).__name__}
                    for key, elem in decoded.items()
                }
    out.append(items)
print(json.dumps(out))
"""


def digest(value: Any) -> Any:
    import hashlib

    if isinstance(value, torch.Tensor):
        raw = value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return [str(value.dtype), list(value.shape), hashlib.sha256(raw).hexdigest()]
    if isinstance(value, list):
        return [digest(v) for v in value]
    return value


def wav_url() -> str:
    t = np.arange(8000, dtype=np.float32) / 16000
    out = io.BytesIO()
    sf.write(out, 0.3 * np.sin(2 * np.pi * 440 * t), 16000, format="WAV")
    return "data:audio/wav;base64," + base64.b64encode(out.getvalue()).decode()


def requests() -> list[dict[str, Any]]:
    def image(seed: int, size: tuple[int, int] = (96, 72)) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": data_url(jpeg_bytes(seed, size))}}

    text = {"type": "text", "text": "What is this?"}
    audio = {"type": "audio_url", "audio_url": {"url": wav_url()}}
    return [
        {"messages": [{"role": "user", "content": [image(1), text]}]},
        {"messages": [{"role": "user", "content": [image(1), image(2, (64, 48)), text]}]},
        {"model": "qwen2_audio", "messages": [{"role": "user", "content": [audio, text]}]},
    ]


@pytest.fixture(scope="module")
def service() -> Iterator[RenderService]:
    service = RenderService(ServeOptions(models=("qwen2_vl", "qwen2_audio")))
    yield service
    service.close()


async def test_vllm_validates_and_decodes_live_responses(
    service: RenderService, tmp_path: Path
) -> None:
    responses = []
    async with TestClient(TestServer(build_app(service))) as client:
        for body in requests():
            response = await client.post(CHAT_ROUTE, json=body)
            assert response.status == 200, await response.text()
            responses.append(await response.json())
    path = tmp_path / "responses.json"
    path.write_text(json.dumps(responses))
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    assert VLLM_PYTHON is not None
    out = await asyncio.to_thread(
        subprocess.run,
        [VLLM_PYTHON, "-c", READER, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    for response, read in zip(responses, theirs, strict=True):
        ours = {}
        for part in ("kwargs_data", "mm_metadata"):
            for modality, encoded in (response["features"].get(part) or {}).items():
                for index, item in enumerate(encoded):
                    if item is not None:
                        ours[f"{part}/{modality}/{index}"] = {
                            key: {"data": digest(elem.data), "field": type(elem.field).__name__}
                            for key, elem in decode_mm_kwargs_item(item).items()
                        }
        assert read == ours
