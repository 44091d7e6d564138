"""The render server's payloads: base64 tensors written as JSON, a repeated item's encoding
kept, and the eager baseline answering what the lazy path answers."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from mediaref.serve.app import CHAT_ROUTE, build_app
from mediaref.serve.encoded_cache import EncodedItemCache
from mediaref.serve.json_body import (
    WRITE_SLICE_BYTES,
    JsonPiecesPayload,
    dump_json,
    dump_json_pieces,
)
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService
from test_serve import chat, data_url, jpeg_bytes, post


@pytest.fixture(scope="module")
def service() -> Iterator[RenderService]:
    service = RenderService(ServeOptions())
    yield service
    service.close()


def test_dump_json_writes_base64_bytes_as_strings_and_nothing_else_changes() -> None:
    payload = {
        "token_ids": [1, 2, 3],
        "blobs": {"image": [b"QUJD", None, b""]},
        "text": 'quotes " and mediaref-blob-0 and \u00e9',
        "nested": [{"x": b"RA=="}],
    }
    expected = {**payload, "blobs": {"image": ["QUJD", None, ""]}, "nested": [{"x": "RA=="}]}
    assert json.loads(dump_json(payload)) == expected
    assert json.loads(dump_json({"a": 1})) == {"a": 1}


def test_dump_json_writes_what_vllms_server_writes() -> None:
    # vLLM's JSONResponse: compact, and text other than ASCII as UTF-8, not as \u escapes.
    payload = {"text": "caf\u00e9 \u2028", "ids": [1, 2], "p": 0.5, "none": None, "ok": True}
    vllm = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    assert dump_json(payload) == vllm


def test_dump_json_writes_a_value_msgspec_refuses_as_json_does() -> None:
    class Text(str):  # a str subclass: msgspec refuses it, json writes it as a string
        pass

    assert json.loads(dump_json({"t": [Text("x"), b"QQ=="]})) == {"t": ["x", "QQ=="]}


async def test_a_response_is_written_in_pieces_that_keep_the_blobs_uncopied() -> None:
    blob = b"QUJD" * 1000
    pieces = dump_json_pieces({"kwargs_data": {"image": [blob]}, "token_ids": [1, 2]})
    assert any(piece is blob for piece in pieces)  # the encoded item itself, not a copy of it
    body = JsonPiecesPayload(pieces)
    assert body.size == len(b"".join(pieces)) and body.content_type == "application/json"

    written: list[bytes] = []

    class Writer:
        async def write(self, chunk: bytes) -> None:
            written.append(chunk)

    await body.write(Writer())  # type: ignore[arg-type]
    assert written == pieces
    assert json.loads(b"".join(written)) == {
        "kwargs_data": {"image": ["QUJD" * 1000]},
        "token_ids": [1, 2],
    }


async def test_a_blob_goes_to_the_socket_a_slice_at_a_time() -> None:
    # Handed over whole, what the socket cannot take at once would be copied into the
    # transport's buffer: a 17 MB blob goes out in awaited slices of the blob itself.
    blob = b"QUJD" * (WRITE_SLICE_BYTES // 2 + 7)  # two slices and a bit
    pieces = dump_json_pieces({"kwargs_data": {"image": [blob]}})
    written: list[bytes | memoryview] = []

    class Writer:
        async def write(self, chunk: bytes | memoryview) -> None:
            written.append(chunk)

    await JsonPiecesPayload(pieces).write(Writer())  # type: ignore[arg-type]
    assert max(len(chunk) for chunk in written) <= WRITE_SLICE_BYTES
    slices = [chunk for chunk in written if isinstance(chunk, memoryview)]
    assert len(slices) == 3 and all(chunk.obj is blob for chunk in slices)  # views, not copies
    assert b"".join(written) == b"".join(pieces)


async def test_the_eager_baseline_answers_what_the_lazy_server_answers(
    service: RenderService,
) -> None:
    eager_service = RenderService(ServeOptions(eager_media=True))
    try:
        async with TestClient(TestServer(build_app(eager_service))) as test_client:
            good = chat(data_url(jpeg_bytes(12)))
            status, eager = await post(test_client, CHAT_ROUTE, good)
            assert status == 200, eager
            corrupt = chat(data_url(jpeg_bytes(12)), data_url(b"\xff\xd8\xff\xe0" + bytes(300)))
            status, answer = await post(test_client, CHAT_ROUTE, corrupt)
    finally:
        eager_service.close()
    assert status == 422 and "image item at index 1" in answer["error"]["message"]
    # Same tokens and tensors as the lazy path; the hash differs (pixels vs bytes, by design).
    async with TestClient(TestServer(build_app(service))) as test_client:
        _, expected = await post(test_client, CHAT_ROUTE, good)
    assert eager["token_ids"] == expected["token_ids"]
    assert eager["features"]["kwargs_data"] == expected["features"]["kwargs_data"]


async def test_a_repeated_item_is_not_encoded_again(service: RenderService) -> None:
    async with TestClient(TestServer(build_app(service))) as test_client:
        body = chat(data_url(jpeg_bytes(13)))
        hits_before = service.encoded.hits
        first = await post(test_client, CHAT_ROUTE, body)
        second = await post(test_client, CHAT_ROUTE, body)
    assert first[0] == second[0] == 200
    features = first[1]["features"]
    assert features == second[1]["features"]
    # Every encoded part of the repeat came from the cache: the item and its mm_metadata
    # (the keep-on-CPU grid, as vLLM sends it).
    assert features["mm_metadata"]["image"][0] is not None
    assert service.encoded.hits == hits_before + 2


def test_the_encoded_cache_keeps_nothing_over_its_budget() -> None:
    cache = EncodedItemCache(10)
    assert cache.get_or_encode(("m", "h", "data"), lambda: b"x" * 11) == b"x" * 11
    assert cache.get_or_encode(("m", "h", "data"), lambda: b"y") == b"y"  # not kept: too big
    assert cache.get_or_encode(("m", "h", "data"), lambda: b"z") == b"y"
    assert (cache.hits, cache.misses) == (1, 2)
    off = EncodedItemCache(0)
    off.get_or_encode(("m", "h", "data"), lambda: b"a")
    assert off.get_or_encode(("m", "h", "data"), lambda: b"b") == b"b"
