"""``mediaref serve --cache-redis-url``: replicas of a fleet share processed items through Redis.

Two services in one process stand for two replicas behind a load balancer; they talk to the
Redis server at 127.0.0.1:6379 over real connections. Every run sends images of its own (random
pixels), so entries a previous run left in Redis are never this run's hits.
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from aiohttp.test_utils import TestClient, TestServer
from PIL import Image

from _redis import SHARED_URL, require_redis
from mediaref.processing.context import ModelConfig
from mediaref.serve.app import CHAT_ROUTE, build_app
from mediaref.serve.cli import main as cli_main
from mediaref.serve.fleet_cache import model_namespace
from mediaref.serve.options import ServeOptions, resolve_model_dir
from mediaref.serve.service import RenderService

REDIS_URL = SHARED_URL
SECRET = "a-fleet-secret-for-the-serve-tests"


@pytest.fixture(autouse=True)
def _fleet_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAREF_CACHE_REDIS_SECRET", SECRET)
    require_redis(REDIS_URL)


@pytest.fixture
def replicas() -> Iterator[tuple[RenderService, RenderService]]:
    options = ServeOptions(cache_redis_url=REDIS_URL)
    pair = (RenderService(options), RenderService(options))
    yield pair
    for service in pair:
        service.close()


def fresh_jpeg() -> bytes:
    pixels = np.random.default_rng(int.from_bytes(os.urandom(8), "little")).integers(
        0, 256, (48, 64, 3), dtype=np.uint8
    )
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG")
    return buffer.getvalue()


def chat_body(jpeg: bytes) -> dict[str, Any]:
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Hi"}]
    return {"messages": [{"role": "user", "content": content}]}


async def render(service: RenderService, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    async with TestClient(TestServer(build_app(service))) as client:
        response = await client.post(CHAT_ROUTE, json=body)
        assert response.status == 200, await response.text()
        answer = await response.json()
        metrics = await (await client.get("/metrics")).text()
    return answer, metrics


async def test_a_replica_serves_what_another_processed_without_decoding(
    replicas: tuple[RenderService, RenderService],
) -> None:
    first, second = replicas
    body = chat_body(fresh_jpeg())
    expected, first_metrics = await render(first, body)
    assert 'mediaref_decodes_total{modality="image"} 1.0' in first_metrics
    first.fleet_caches["qwen2_vl"].stores[-1].flush()  # type: ignore[attr-defined]

    answer, metrics = await render(second, body)
    assert answer["token_ids"] == expected["token_ids"]
    assert answer["features"] == expected["features"]  # the same bytes on the wire
    store = second.fleet_caches["qwen2_vl"].stores[-1]
    assert store.stats["hits"] == 1
    assert 'mediaref_l2_cache_hits_total{model="qwen2_vl"} 1.0' in metrics
    assert 'mediaref_decodes_total{modality="image"}' not in metrics  # nothing decoded here


def test_the_namespace_follows_the_model_and_its_settings() -> None:
    directory = resolve_model_dir("qwen2_vl")
    base = model_namespace("qwen2_vl", ModelConfig(model=directory))
    assert base == model_namespace("qwen2_vl", ModelConfig(model=directory))
    assert base != model_namespace("qwen2_vl_other", ModelConfig(model=directory))
    assert base != model_namespace("qwen2_vl", ModelConfig(model=directory, dtype=torch.float16))
    resized = ModelConfig(model=directory, mm_processor_kwargs={"max_pixels": 50176})
    assert base != model_namespace("qwen2_vl", resized)


def test_bad_redis_settings_stop_the_server_at_startup(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="redis://"):
        ServeOptions(cache_redis_url="http://127.0.0.1:6379")
    monkeypatch.delenv("MEDIAREF_CACHE_REDIS_SECRET")
    with pytest.raises(ValueError, match="fleet secret"):
        ServeOptions(cache_redis_url=REDIS_URL)
    assert cli_main(["serve", "--cache-redis-url", REDIS_URL]) == 2
    assert "fleet secret" in capsys.readouterr().err
