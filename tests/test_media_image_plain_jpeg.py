"""A plain JPEG's size from its markers alone (``plain_jpeg_size``), as Pillow's open gives it.

A routing render sizes every JPEG from its header; Pillow's JPEG open parses every table in
Python and cost more than the rest of that render's work on the image. ``plain_jpeg_size``
answers only for files whose every segment Pillow reads without fail and none of which can carry
an orientation; the property checked here is that whenever it answers, Pillow's open and
``getexif`` give the same upright size, on encoder output and on corrupted headers alike.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mediaref.media.image import _upright_size as upright_module
from mediaref.media.image import read_jpeg_upright_size
from mediaref.media.image._header import MAX_HEADER_SEGMENTS
from mediaref.media.image._upright_size import _pillow_jpeg_upright_size, plain_jpeg_size

SEGMENTS = MAX_HEADER_SEGMENTS["JPEG"]


def _jpeg(mode: str = "RGB", size: tuple[int, int] = (48, 32), **save: Any) -> bytes:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(out, "JPEG", **save)
    return out.getvalue()


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


PLAIN = {
    "baseline": _jpeg(),
    "progressive": _jpeg(progressive=True),
    "optimized": _jpeg(optimize=True, quality=95, subsampling=0),
    "grey": _jpeg("L"),
    "cmyk (Adobe APP14)": _jpeg("CMYK"),
    "comment": _jpeg(comment=b"made by a test"),
    "restart markers": _jpeg(restart_marker_blocks=2),
}
NOT_PLAIN = {
    "EXIF orientation": _jpeg(exif=_exif(6)),
    "EXIF without orientation": _jpeg(exif=_exif(1)),
    "ICC profile": _jpeg(icc_profile=b"\0" * 200),
    "XMP": _jpeg(xmp=b"<x:xmpmeta/>"),
}


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_an_encoders_plain_jpeg_is_sized_as_pillow_sizes_it(name: str) -> None:
    data = PLAIN[name]
    assert plain_jpeg_size(data, SEGMENTS) == _pillow_jpeg_upright_size(data) == (48, 32)


@pytest.mark.parametrize("name", sorted(NOT_PLAIN))
def test_a_jpeg_that_may_carry_an_orientation_is_left_to_pillow(name: str) -> None:
    data = NOT_PLAIN[name]
    assert plain_jpeg_size(data, SEGMENTS) is None
    assert read_jpeg_upright_size(data) == _pillow_jpeg_upright_size(data) is not None


def test_a_plain_jpeg_is_sized_without_opening_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pillow(*args: object, **kwargs: object) -> object:
        raise AssertionError("Pillow opened a plain JPEG")

    monkeypatch.setattr(upright_module, "open_image_header", no_pillow)
    assert read_jpeg_upright_size(PLAIN["baseline"]) == (48, 32)
    with pytest.raises(AssertionError):
        read_jpeg_upright_size(NOT_PLAIN["EXIF orientation"])


def test_the_caps_still_apply_to_a_plain_jpeg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", str(48 * 32 - 1))
    assert read_jpeg_upright_size(PLAIN["baseline"]) is None  # the decode raises the cap
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", str(48 * 32))
    assert read_jpeg_upright_size(PLAIN["baseline"]) == (48, 32)


def _segments(data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """A JPEG's segments before its first scan, and the rest from that scan's marker on."""
    offset, segments = 2, []
    while data[offset + 1] != 0xDA:
        length = int.from_bytes(data[offset + 2 : offset + 4], "big")
        segments.append((data[offset + 1], data[offset + 4 : offset + 2 + length]))
        offset += 2 + length
    return segments, data[offset:]


def _rebuilt(
    data: bytes, change: dict[int, bytes], before: tuple[int, bytes] | None = None
) -> bytes:
    """``data`` with each segment of a marker in ``change`` given that body, and ``before`` (a
    marker and body) put first."""
    segments, rest = _segments(data)
    if before is not None:
        segments.insert(0, before)
    out = bytearray(b"\xff\xd8")
    for marker, body in segments:
        body = change.get(marker, body)
        out += bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body
    return bytes(out + rest)


def _sof_body() -> bytes:
    return dict(_segments(PLAIN["baseline"])[0])[0xC0]


CRAFTED = {
    "a JFIF APP0 too short for its version": _rebuilt(PLAIN["baseline"], {0xE0: b"JFIF\0"}),
    "an Adobe APP14 too short for its version": _rebuilt(
        PLAIN["baseline"], {}, before=(0xEE, b"Adobe\0")
    ),
    "a frame with a stray byte after its components": _rebuilt(
        PLAIN["baseline"], {0xC0: _sof_body() + b"\x01"}
    ),
    "a frame of 12-bit samples": _rebuilt(PLAIN["baseline"], {0xC0: b"\x0c" + _sof_body()[1:]}),
    "a quantization table cut short": _rebuilt(PLAIN["baseline"], {0xDB: b"\0" * 40}),
    "two frames": _rebuilt(PLAIN["baseline"], {}, before=(0xC0, _sof_body())),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_a_header_pillow_would_trip_on_is_left_to_pillow(name: str) -> None:
    data = CRAFTED[name]
    assert plain_jpeg_size(data, SEGMENTS) is None
    assert read_jpeg_upright_size(data) == _pillow_jpeg_upright_size(data)


def _header_end(data: bytes) -> int:
    return data.index(b"\xff\xda") + 12


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_whenever_the_walk_answers_pillow_agrees(name: str) -> None:
    # Every header byte of each file set to values that change its meaning (a marker, a length,
    # a depth, a component count, a table's precision), and the file cut at every header byte:
    # the walk may refuse, but any answer it gives is Pillow's answer for the same bytes.
    original = PLAIN[name]
    end = _header_end(original)
    variants = [original[:cut] for cut in range(end)]
    for where in range(end):
        for value in {0x00, 0x01, 0x02, 0x03, 0x05, 0x0C, 0x10, 0x11, 0xC4, 0xDA, 0xE1, 0xFF,
                      original[where] ^ 0x01, original[where] ^ 0x80}:  # fmt: skip
            data = bytearray(original)
            data[where] = value
            variants.append(bytes(data))
    answered = 0
    for data in variants:
        size = plain_jpeg_size(data, SEGMENTS)
        if size is not None:
            answered += 1
            assert _pillow_jpeg_upright_size(data) == size, data[:end].hex()
    assert answered > len(variants) // 4  # and it does answer for most harmless changes
