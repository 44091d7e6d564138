"""A PNG's image data reaches Pillow's decoder as one chunk: one feed, one GIL take-back.

Pillow's PNG reader stops its decoder's feed at every IDAT chunk's end, and each feed takes the GIL
back (up to a switch interval beside a busy Python thread). ``png_with_one_idat`` joins the first
run of IDAT chunks before a decode; these tests pin that the result is a valid PNG with the same
pixels, that only a decode pays for the copy, and that damaged files fail as they did.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from _gil import python_progress_during
from _image_samples import encode
from mediaref.media.image import ImageMediaIO, read_image_size
from mediaref.media.image import _header as image_header
from mediaref.media.image._containers import png_with_one_idat


def chunks(data: bytes) -> list[tuple[bytes, bytes, int]]:
    """Every whole chunk of a PNG as (type, body, stored CRC)."""
    found, offset = [], 8
    while offset + 12 <= len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        if len(body) < length or offset + 12 + length > len(data):
            break
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        found.append((kind, body, crc))
        offset += 12 + length
    return found


def noisy_png(**save_options: object) -> bytes:
    """About 0.6 MB of noise, which Pillow writes as ~9 IDAT chunks of 64 KiB."""
    noise = np.random.default_rng(1).integers(0, 256, (384, 512, 3), dtype=np.uint8)
    return encode(Image.fromarray(noise, "RGB"), "PNG", **save_options)


def rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def kinds(data: bytes) -> list[bytes]:
    return [kind for kind, _, _ in chunks(data)]


def test_the_image_data_becomes_one_chunk_with_a_valid_crc() -> None:
    data = noisy_png()
    original = chunks(data)
    assert kinds(data).count(b"IDAT") > 4

    merged = png_with_one_idat(data)

    assert kinds(merged) == [kind for kind in dict.fromkeys(kinds(data))]  # one IDAT, in place
    assert all(zlib.crc32(kind + body) == crc for kind, body, crc in chunks(merged))
    idat = next(body for kind, body, _ in chunks(merged) if kind == b"IDAT")
    assert idat == b"".join(body for kind, body, _ in original if kind == b"IDAT")
    assert np.array_equal(rgb(merged), rgb(data))


@pytest.mark.parametrize(
    "data",
    [
        encode(Image.new("RGB", (32, 32), (10, 20, 30)), "PNG"),  # one IDAT chunk
        b"\x89PNG\r\n\x1a\n",  # no chunk at all
        b"GIF89a" + bytes(64),  # not a PNG
        encode(Image.new("RGB", (32, 32)), "JPEG"),
    ],
    ids=["one-idat", "signature-only", "gif", "jpeg"],
)
def test_anything_else_is_returned_uncopied(data: bytes) -> None:
    assert png_with_one_idat(data) is data


def test_a_truncated_tail_stays_truncated_after_the_merged_chunks() -> None:
    data = noisy_png()
    idat_ends = [data.index(b"IDAT", 40)]  # the first IDAT's type field
    for _ in range(3):
        idat_ends.append(data.index(b"IDAT", idat_ends[-1] + 4))
    cut = data[: idat_ends[3] + 100]  # in the middle of the fourth chunk's body

    merged = png_with_one_idat(cut)

    assert kinds(merged).count(b"IDAT") == 1  # the three whole chunks; the cut one is left over
    assert merged.endswith(cut[idat_ends[3] - 4 :])


def test_a_cut_run_with_one_whole_chunk_is_returned_uncopied() -> None:
    data = noisy_png()
    second = data.index(b"IDAT", data.index(b"IDAT") + 4)
    cut = data[: second + 100]
    assert png_with_one_idat(cut) is cut


def test_a_truncated_png_fails_as_it_did_before(monkeypatch: pytest.MonkeyPatch) -> None:
    data = noisy_png()
    cut = data[: len(data) // 2]
    with pytest.raises(ValueError, match="truncated") as merged_failure:
        ImageMediaIO().load_bytes(cut)
    monkeypatch.setattr(image_header, "png_with_one_idat", lambda data: data)
    with pytest.raises(ValueError, match="truncated"):
        ImageMediaIO().load_bytes(cut)
    assert str(merged_failure.value).startswith("Failed to load image: image file is truncated")


def test_a_decode_feeds_the_whole_image_data_at_once(decoder_feeds: dict[str, list[int]]) -> None:
    data = noisy_png()
    idat_bytes = sum(len(body) for kind, body, _ in chunks(data) if kind == b"IDAT")

    image = ImageMediaIO().load_bytes_ref(data).decode()

    assert decoder_feeds["zip"] == [idat_bytes]
    assert np.array_equal(np.asarray(image), rgb(data))


def test_compressed_text_is_dropped_and_the_data_merged_in_one_decode(
    decoder_feeds: dict[str, list[int]],
) -> None:
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "x" * 5000, zip=True)
    data = noisy_png(pnginfo=info)
    assert b"zTXt" in data

    image = ImageMediaIO().load_bytes(data)

    assert len(decoder_feeds["zip"]) == 1
    assert "Comment" not in image.info
    assert np.array_equal(np.asarray(image), rgb(data))


def test_an_apng_decodes_its_default_image_from_the_merged_data() -> None:
    rng = np.random.default_rng(2)
    frames = [
        Image.fromarray(rng.integers(0, 256, (256, 384, 3), dtype=np.uint8), "RGB")
        for _ in range(2)
    ]
    data = encode(frames[0], "PNG", save_all=True, append_images=frames[1:], duration=100)
    assert kinds(data).count(b"IDAT") > 1 and b"fdAT" in kinds(data)

    merged = png_with_one_idat(data)

    assert kinds(merged).count(b"fdAT") == kinds(data).count(b"fdAT")
    assert np.array_equal(np.asarray(ImageMediaIO().load_bytes(data)), np.asarray(frames[0]))


def test_header_reads_do_not_copy_the_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(data: bytes) -> bytes:
        raise AssertionError("a header read merged the image data")

    monkeypatch.setattr(image_header, "png_with_one_idat", refuse)
    data = noisy_png()
    assert read_image_size(data) == (512, 384)
    ImageMediaIO().load_bytes_ref(data)


def test_the_merge_holds_the_gil_throughout() -> None:
    # It runs on the decoding thread, where letting go of the GIL costs a switch interval; zlib's
    # CRC lets go of it over 5 KiB.
    body = bytes(range(256)) * 256  # 64 KiB
    idat = struct.pack(">I", len(body)) + b"IDAT" + body + b"\0\0\0\0"
    data = b"\x89PNG\r\n\x1a\n" + idat * 64  # 4 MiB of image data in 64 chunks
    merged, python_steps = python_progress_during(lambda: png_with_one_idat(data))
    assert kinds(merged) == [b"IDAT"]
    assert python_steps == 0
