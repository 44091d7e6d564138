"""``mm_payload: "none"`` renders from the items' headers: a full render's answer, nothing decoded.

A router asks only for token ids, hashes and placeholders; for Qwen2-VL's JPEG images those follow
from the header's size (EXIF orientation applied) through ``smart_resize``. Each request here is
rendered by a server answering from headers and by one rendering in full
(``--no-layout-from-headers``): the answers must be equal, and the first must have decoded no
JPEG. Items whose layout a header cannot give (PNGs, clips, untrusted settings) render in full
on both, with the same answer.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mediaref.media.image import read_jpeg_upright_size
from mediaref.serve.options import ServeOptions
from mediaref.serve.protocol import parse_chat_request
from mediaref.serve.service import RenderService

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _pixels(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _jpeg(width: int, height: int, orientation: int | None = None, seed: int = 0) -> bytes:
    out = io.BytesIO()
    image = _pixels(width, height, seed)
    if orientation is None:
        image.save(out, "JPEG")
    else:
        exif = Image.Exif()
        exif[0x0112] = orientation
        image.save(out, "JPEG", exif=exif.tobytes())
    return out.getvalue()


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    _pixels(width, height, 7).save(out, "PNG")
    return out.getvalue()


def _url(payload: bytes, mime: str = "image/jpeg") -> str:
    return f"data:{mime};base64," + base64.b64encode(payload).decode()


def _chat(*urls: str, text: str = "Describe these.", **fields: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    content.append({"type": "text", "text": text})
    return {"messages": [{"role": "user", "content": content}], "mm_payload": "none", **fields}


def _options(**changes: Any) -> ServeOptions:
    return ServeOptions(trust_request_mm_kwargs=True, **changes)


@pytest.fixture(scope="module")
def layout() -> Iterator[RenderService]:
    service = RenderService(_options())
    yield service
    service.close()


@pytest.fixture(scope="module")
def full() -> Iterator[RenderService]:
    service = RenderService(_options(layout_from_headers=False))
    yield service
    service.close()


def _decodes(service: RenderService) -> float:
    return sum(
        sample.value
        for metric in service.metrics.decodes.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


async def _render(service: RenderService, body: dict[str, Any]) -> dict[str, Any]:
    request = parse_chat_request(body, service.options, request_id="layout-test")
    return await service.render_chat(request)


HEADER_CASES = {
    "one 720p image": _chat(_url(_jpeg(1280, 720))),
    "every EXIF orientation": _chat(*(_url(_jpeg(96, 40, o, seed=o)) for o in range(1, 9))),
    "tiny and very wide": _chat(_url(_jpeg(9, 9)), _url(_jpeg(3000, 20, seed=2))),
    "over max_pixels": _chat(_url(_jpeg(4000, 3000, seed=3))),
    "min and max pixels asked": _chat(
        _url(_jpeg(800, 600, seed=4)),
        mm_processor_kwargs={"min_pixels": 200_000, "max_pixels": 400_000},
    ),
    "images between texts": {
        "messages": [
            {"role": "system", "content": "You look at pictures."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "First:"},
                    {"type": "image_url", "image_url": {"url": _url(_jpeg(300, 200, seed=5))}},
                    {"type": "text", "text": "then:"},
                    {"type": "image_url", "image_url": {"url": _url(_jpeg(200, 300, seed=6))}},
                ],
            },
        ],
        "mm_payload": "none",
    },
}


FULL_CASES = {
    "a PNG": _chat(_url(_png(64, 48), "image/png")),
    "a JPEG beside a PNG": _chat(_url(_jpeg(64, 48)), _url(_png(48, 64), "image/png")),
    "a setting headers cannot follow": _chat(
        _url(_jpeg(56, 84, seed=8)), mm_processor_kwargs={"do_resize": False}
    ),
}
"""Items a header cannot place: rendered in full by both servers."""


@pytest.mark.parametrize("name", [*HEADER_CASES, *FULL_CASES])
async def test_a_none_payload_render_answers_as_a_full_render(
    name: str, layout: RenderService, full: RenderService
) -> None:
    from_headers = name in HEADER_CASES
    body = HEADER_CASES[name] if from_headers else FULL_CASES[name]
    before = _decodes(layout)
    ours = await _render(layout, body)
    decoded = _decodes(layout) - before
    assert decoded == 0 if from_headers else decoded > 0
    assert ours == await _render(full, body)
    assert ours["features"]["mm_placeholders"]["image"]  # there was something to place


async def test_an_aspect_ratio_smart_resize_refuses_is_refused_alike(
    layout: RenderService, full: RenderService
) -> None:
    body = _chat(_url(_jpeg(5000, 10)))
    errors = []
    for service in (layout, full):
        with pytest.raises(Exception) as caught:
            await _render(service, body)
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1]


async def test_pixels_that_do_not_decode_are_not_looked_at(
    layout: RenderService, full: RenderService
) -> None:
    # The divergence docs/compat.md names: a header render never reads the pixels.
    payload = _jpeg(320, 240, seed=9)
    body = _chat(_url(payload[: len(payload) // 2]))  # the header whole, half the pixels
    assert (await _render(layout, body))["features"]["mm_placeholders"]["image"]
    with pytest.raises(ValueError):
        await _render(full, body)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_jpegs_upright_size_is_its_decoded_size(orientation: int) -> None:
    from mediaref.media.image import ImageMediaIO

    payload = _jpeg(64, 24, orientation)
    assert read_jpeg_upright_size(payload) == ImageMediaIO().load_bytes(payload).size


def test_only_jpegs_have_an_upright_size_from_their_header() -> None:
    assert read_jpeg_upright_size(_png(10, 20)) is None
    assert read_jpeg_upright_size(b"\xff\xd8 not a jpeg") is None
