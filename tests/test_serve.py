"""The render server in process: its routes, response shapes, statuses, options and metrics.

Each test talks HTTP to the real aiohttp application (``aiohttp.test_utils``, loopback only); the
subprocess server under load is ``tests/security/test_serve_load.py``.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from aiohttp.test_utils import TestClient, TestServer
from PIL import Image

from _image_samples import encode, exif_block, gradient_rgb
from mediaref.renderers.base import MultiModalRequest
from mediaref.renderers.chat_utils import apply_chat_template, parse_chat_messages
from mediaref.serve.app import CHAT_ROUTE, COMPLETIONS_ROUTE, build_app
from mediaref.serve.features import decode_kwargs_item
from mediaref.serve.mm_serde import decode_mm_kwargs_item
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService

# vLLM 0.33's GenerateRequest fields, in its order.
GENERATE_REQUEST_FIELDS = [
    "request_id",
    "token_ids",
    "token_offsets",
    "features",
    "content_parts",
    "sampling_params",
    "model",
    "reasoning_ended",
    "reasoning_parser_kwargs",
    "return_token_ids",
    "output_mode",
    "parse_context",
    "stream",
    "stream_options",
    "cache_salt",
    "priority",
    "kv_transfer_params",
    "ec_transfer_params",
]


def jpeg_bytes(seed: int, size: tuple[int, int] = (64, 48)) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return encode(Image.fromarray(pixels), "JPEG", quality=90)


def data_url(payload: bytes, media_type: str = "image/jpeg") -> str:
    return f"data:{media_type};base64,{base64.b64encode(payload).decode()}"


def chat(*urls: str, **fields: Any) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    parts.append({"type": "text", "text": "What is this?"})
    return {"messages": [{"role": "user", "content": parts}], **fields}


@pytest.fixture(scope="module")
def service() -> Iterator[RenderService]:
    service = RenderService(ServeOptions(max_items_per_request=3, max_request_body_mb=1.0))
    service.warmup()
    yield service
    service.close()


@pytest.fixture
async def client(service: RenderService) -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(build_app(service))) as test_client:
        yield test_client


async def post(client: TestClient[Any, Any], route: str, body: Any) -> tuple[int, Any]:
    response = await client.post(route, json=body)
    return response.status, await response.json()


async def test_chat_render_answers_vllm_generate_request_with_the_renderers_output(
    client: TestClient[Any, Any], service: RenderService
) -> None:
    image = jpeg_bytes(1)
    status, body = await post(client, CHAT_ROUTE, chat(data_url(image), max_tokens=7))
    assert status == 200, body
    assert list(body) == GENERATE_REQUEST_FIELDS
    assert body["request_id"].startswith("chatcmpl-")
    assert body["sampling_params"]["max_tokens"] == 7
    assert body["output_mode"] == "tokens"

    # The same request through the library directly gives the same tokens, hashes and tensors.
    renderer = service.renderers["qwen2_vl"]
    model = renderer.mm_processor.info  # type: ignore[union-attr]
    messages = chat(data_url(image))["messages"]
    conversation, mm_data, uuids = parse_chat_messages(
        messages, model, media_io_kwargs={"image": {"trust_exif_image_id": False}}
    )
    prompt = apply_chat_template(model, conversation)
    expected = renderer.process_multimodal(MultiModalRequest(prompt, mm_data or {}, mm_uuids=uuids))
    assert body["token_ids"] == expected["prompt_token_ids"]
    features = body["features"]
    assert features["mm_hashes"] == {"image": expected["mm_hashes"]["image"]}
    (placeholder,) = expected["mm_placeholders"]["image"]
    assert features["mm_placeholders"] == {
        "image": [{"offset": placeholder.offset, "length": placeholder.length}]
    }
    # The tensors in vLLM's wire format (an engine decodes them as vLLM's own would).
    (encoded,) = features["kwargs_data"]["image"]
    item = decode_mm_kwargs_item(encoded)
    data = expected["mm_kwargs"].get_data()
    assert torch.equal(item["pixel_values"].data, data["pixel_values"])
    assert torch.equal(item["image_grid_thw"].data, data["image_grid_thw"][0])
    assert "kwargs_info" not in features  # vLLM's MultiModalFeatures, field for field
    # mm_metadata: the fields kept on the CPU or sizing the placeholders, as vLLM sends them.
    sizing = model.data_parser.placeholder_metadata_fields("image")
    kept = {
        name
        for name, elem in expected["mm_kwargs"]["image"][0].items()
        if elem.field.keep_on_cpu or name in sizing
    }
    if kept:
        (metadata,) = features["mm_metadata"]["image"]
        assert set(decode_mm_kwargs_item(metadata)) == kept
    else:
        assert features["mm_metadata"] is None


async def test_mm_payload_none_sends_no_tensors(client: TestClient[Any, Any]) -> None:
    status, body = await post(client, CHAT_ROUTE, chat(data_url(jpeg_bytes(2)), mm_payload="none"))
    assert status == 200, body
    assert body["features"]["kwargs_data"] is None and body["features"]["mm_metadata"] is None


async def test_the_safetensors_format_is_an_opt_in_with_shapes(service: RenderService) -> None:
    options = service.options
    service.options = dataclasses.replace(options, tensor_format="safetensors")
    try:
        async with TestClient(TestServer(build_app(service))) as client:
            status, body = await post(client, CHAT_ROUTE, chat(data_url(jpeg_bytes(9))))
    finally:
        service.options = options
    assert status == 200, body
    (encoded,) = body["features"]["kwargs_data"]["image"]
    fields = decode_kwargs_item(encoded)
    info = body["features"]["kwargs_info"]["image"][0]
    assert info["pixel_values"] == {
        "dtype": str(fields["pixel_values"].dtype).removeprefix("torch."),
        "shape": list(fields["pixel_values"].shape),
    }


async def test_x_request_id_names_the_request(client: TestClient[Any, Any]) -> None:
    response = await client.post(
        CHAT_ROUTE, json=chat(data_url(jpeg_bytes(3))), headers={"X-Request-Id": "abc"}
    )
    assert (await response.json())["request_id"] == "chatcmpl-abc"


async def test_completions_render_answers_one_generate_request_per_prompt(
    client: TestClient[Any, Any], service: RenderService
) -> None:
    status, body = await post(client, COMPLETIONS_ROUTE, {"prompt": "hello there"})
    assert status == 200, body
    (only,) = body
    tokenizer = service.renderers["qwen2_vl"].get_tokenizer()
    assert only["token_ids"] == tokenizer.encode("hello there")
    # completions' default max_tokens, 16, is SamplingParams' own: its dump leaves it out
    assert only["features"] is None and "max_tokens" not in only["sampling_params"]
    status, body = await post(
        client, COMPLETIONS_ROUTE, {"prompt": [[1, 2, 3], "hi"], "request_id": "r"}
    )
    assert status == 200, body
    assert [b["request_id"] for b in body] == ["cmpl-r-0", "cmpl-r-1"]
    assert body[0]["token_ids"] == [1, 2, 3]


@pytest.mark.parametrize(
    ("route", "body", "status", "needle"),
    [
        pytest.param(CHAT_ROUTE, {"messages": 3}, 400, "messages", id="wrong-type"),
        pytest.param(CHAT_ROUTE, [], 400, "JSON object", id="not-an-object"),
        pytest.param(CHAT_ROUTE, chat("data:image/jpeg;base64,!!"), 400, "base64", id="bad-b64"),
        pytest.param(
            CHAT_ROUTE, chat(data_url(b"\xff\xd8\xff\xe0" + bytes(500))), 422, "image", id="corrupt"
        ),
        pytest.param(
            CHAT_ROUTE, chat(*[data_url(jpeg_bytes(9))] * 4), 413, "max-items", id="items"
        ),
        pytest.param(CHAT_ROUTE, chat("file:///etc/hostname"), 403, "file", id="file-url"),
        pytest.param(CHAT_ROUTE, chat("http://127.0.0.1:9/x.jpg"), 403, "non-public", id="private"),
        pytest.param(
            CHAT_ROUTE, chat(data_url(jpeg_bytes(4)), model="nope"), 404, "nope", id="model"
        ),
        pytest.param(COMPLETIONS_ROUTE, {"prompt": [10**9]}, 400, "vocabulary", id="token-id"),
        pytest.param(COMPLETIONS_ROUTE, {}, 400, "prompt", id="no-prompt"),
    ],
)
async def test_each_failure_gets_its_documented_status_in_openais_error_shape(
    client: TestClient[Any, Any], route: str, body: Any, status: int, needle: str
) -> None:
    got, answer = await post(client, route, body)
    assert got == status, answer
    error = answer["error"]
    assert error["code"] == status and needle in error["message"]
    assert set(error) == {"message", "type", "param", "code"}


async def test_undecodable_media_names_its_modality_and_index(client: TestClient[Any, Any]) -> None:
    body = chat(data_url(jpeg_bytes(5)), data_url(b"\xff\xd8\xff\xe0" + bytes(300)))
    status, answer = await post(client, CHAT_ROUTE, body)
    assert status == 422
    assert "image" in answer["error"]["message"] and "1" in answer["error"]["message"]


async def test_malformed_json_and_an_oversized_body(client: TestClient[Any, Any]) -> None:
    response = await client.post(
        CHAT_ROUTE, data=b"{bad", headers={"Content-Type": "application/json"}
    )
    assert response.status == 400
    assert (await response.json())["error"]["type"] == "BadRequestError"
    big = chat(data_url(bytes(2 * 1024 * 1024)))  # over the 1 MB body cap of this server
    response = await client.post(CHAT_ROUTE, json=big)
    assert response.status == 413
    assert (await response.json())["error"]["code"] == 413


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("media_io_kwargs", {"image": {"trust_exif_image_id": True}}),
        ("mm_processor_kwargs", {"max_pixels": 10**9}),
        ("chat_template", "{{ messages }}"),
    ],
)
async def test_untrusted_request_overrides_are_refused(
    client: TestClient[Any, Any], field: str, value: Any
) -> None:
    status, answer = await post(client, CHAT_ROUTE, chat(data_url(jpeg_bytes(6)), **{field: value}))
    assert status == 400 and answer["error"]["param"] == field


async def test_client_chosen_uuids_are_refused(client: TestClient[Any, Any]) -> None:
    body = chat(data_url(jpeg_bytes(7)))
    body["messages"][0]["content"][0]["uuid"] = "mine"
    status, answer = await post(client, CHAT_ROUTE, body)
    assert status == 400 and answer["error"]["param"] == "uuid"


async def test_health_and_metrics(client: TestClient[Any, Any]) -> None:
    assert (await client.get("/health")).status == 200
    image = data_url(jpeg_bytes(8))
    for _ in range(2):
        assert (await post(client, CHAT_ROUTE, chat(image)))[0] == 200
    await post(client, CHAT_ROUTE, {"messages": 3})
    response = await client.get("/metrics")
    assert response.status == 200 and response.content_type == "text/plain"
    text = await response.text()
    for line in (
        f'mediaref_requests_total{{route="{CHAT_ROUTE}",status="200"}}',
        f'mediaref_requests_total{{route="{CHAT_ROUTE}",status="400"}}',
        'mediaref_mm_cache_hits_total{model="qwen2_vl"}',
        'mediaref_mm_cache_misses_total{model="qwen2_vl"}',
        'mediaref_mm_cache_evictions_total{model="qwen2_vl"}',
        'mediaref_mm_cache_bytes{model="qwen2_vl"}',
        'mediaref_decodes_total{modality="image"}',
        "mediaref_requests_in_flight 0.0",
        "mediaref_fetch_seconds_bucket",
        "mediaref_decode_seconds_bucket",
        "mediaref_hf_processing_seconds_bucket",
    ):
        assert line in text, line
    assert 'mediaref_mm_cache_hits_total{model="qwen2_vl"} 0.0' not in text


def metric(text: str, name: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[-1])


async def test_a_hit_decodes_nothing_and_evictions_are_counted() -> None:
    # A budget that holds one 64x48 item at a time: every new image evicts the previous one.
    service = RenderService(ServeOptions(mm_processor_cache_gb=0.00003))
    try:
        async with TestClient(TestServer(build_app(service))) as test_client:
            first, second = data_url(jpeg_bytes(10)), data_url(jpeg_bytes(11))
            for url in (first, first, second, first):
                assert (await post(test_client, CHAT_ROUTE, chat(url)))[0] == 200
            text = await (await test_client.get("/metrics")).text()
    finally:
        service.close()
    assert metric(text, 'mediaref_mm_cache_hits_total{model="qwen2_vl"}') == 1
    assert metric(text, 'mediaref_mm_cache_misses_total{model="qwen2_vl"}') == 3
    assert metric(text, 'mediaref_decodes_total{modality="image"}') == 3  # not the hit
    assert metric(text, 'mediaref_mm_cache_evictions_total{model="qwen2_vl"}') == 2
    # Each miss's stage timings reach the histograms (the request's own timing context).
    assert metric(text, "mediaref_decode_seconds_count") == 3
    assert metric(text, "mediaref_hf_processing_seconds_count") == 3
    assert metric(text, "mediaref_fetch_seconds_count") == 4


async def exif_hashes(service: RenderService) -> list[str]:
    exif = exif_block(image_id="8c3f0e52-7d41-4b9a-a1f6-0e3d2c5b9a71")
    victim = encode(gradient_rgb(24, 16), "JPEG", exif=exif, quality=90)
    attacker = encode(Image.new("RGB", (24, 16), (255, 0, 0)), "JPEG", exif=exif, quality=90)
    hashes = []
    async with TestClient(TestServer(build_app(service))) as test_client:
        for payload in (victim, attacker):
            status, body = await post(test_client, CHAT_ROUTE, chat(data_url(payload)))
            assert status == 200, body
            hashes.extend(body["features"]["mm_hashes"]["image"])
    return hashes


async def test_exif_image_ids_do_not_key_images_unless_the_server_trusts_them(
    service: RenderService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDIAREF_TRUST_EXIF_IMAGE_ID", "1")  # the library's default: on
    victim, attacker = await exif_hashes(service)
    assert victim != attacker
    trusting = RenderService(dataclasses.replace(service.options, trust_exif_image_id=True))
    try:
        victim, attacker = await exif_hashes(trusting)
    finally:
        trusting.close()
    assert victim == attacker


def test_serve_options_refuse_nonsense() -> None:
    for bad in ({"max_concurrency": 0}, {"max_items_per_request": 0}, {"models": ()}):
        with pytest.raises(ValueError):
            ServeOptions(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="neither a built-in model"):
        RenderService(ServeOptions(models=("/no/such/model",)))


async def test_unknown_routes_and_methods_answer_in_the_error_shape(
    client: TestClient[Any, Any],
) -> None:
    response = await client.get("/v1/nothing")
    assert response.status == 404 and (await response.json())["error"]["code"] == 404
    response = await client.get(CHAT_ROUTE)
    assert response.status == 405 and (await response.json())["error"]["code"] == 405


def test_the_cli_defaults_are_the_documented_multi_tenant_ones() -> None:
    from mediaref.serve.cli import build_parser, options_from

    options = options_from(build_parser().parse_args(["serve"]))
    assert options == ServeOptions()
    assert not options.trust_exif_image_id and not options.media_url_allow_private_ips
    assert options.allowed_local_media_path == "" and options.allowed_media_domains == ()
    assert (options.host, options.port, options.max_concurrency) == ("127.0.0.1", 8000, 64)


async def test_a_draining_server_says_so_on_health_and_closes_connections(
    client: TestClient[Any, Any],
) -> None:
    from mediaref.serve.app import STATE_KEY

    client.server.app[STATE_KEY].draining = True
    response = await client.get("/health")
    assert response.status == 503
    status, _ = await post(client, COMPLETIONS_ROUTE, {"prompt": "still served"})
    assert status == 200  # a request on an open connection is still answered
    response = await client.post(COMPLETIONS_ROUTE, json={"prompt": "x"})
    assert response.headers.get("Connection", "").lower() == "close"


async def test_the_info_routes_answer_as_vllms_render_server(client: TestClient[Any, Any]) -> None:
    from importlib import metadata

    version = await (await client.get("/version")).json()
    assert version == {"version": "0.33.0", "mediaref_version": metadata.version("mediaref")}
    models = await (await client.get("/v1/models")).json()
    assert models["object"] == "list"
    (model,) = models["data"]
    assert (model["id"], model["root"], model["owned_by"]) == ("qwen2_vl", "qwen2_vl", "vllm")
    assert model["max_model_len"] == 32768 and model["permission"][0]["allow_sampling"]
    assert await (await client.get("/load")).json() == {"server_load": 0}
    assert await (await client.get("/kv_event_sources")).json() == {}
    for method in ("GET", "POST"):
        assert (await client.request(method, "/ping")).status == 200
