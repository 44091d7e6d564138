"""What else a hostile but well-formed image can do, and what stops it.

Pinned here: metadata amplification (a PNG's compressed text chunks, a huge EXIF block behind an
orientation tag) is bounded at fetch and at decode; a tall, thin raster is charged for its row
pointers; unusual but legal modes (16-bit, CMYK, palettes with short tables, 1-bit) decode; and
the decoder never relies on Pillow's process-wide ``LOAD_TRUNCATED_IMAGES``. Python allocations
are bounded with ``tracemalloc``.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageFile, PngImagePlugin

from _image_samples import encode, gradient_rgb
from _memory import traced_peak
from mediaref.exceptions import MediaTooLargeError, VLLMUnprocessableEntityError
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.image import ImageMediaIO

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def _default_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "VLLM_MAX_IMAGE_PIXELS",
        "MEDIAREF_MAX_IMAGE_FILESIZE_MB",
        "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True, scope="module")
def _pillow_plugins_loaded() -> None:
    # The first decode in a process imports Pillow's plugins, which is not the payload's doing.
    ImageMediaIO().load_bytes(encode(gradient_rgb(2, 2), "PNG"))


def png_with_compressed_text(chunks: int, megabytes_each: int = 1) -> bytes:
    info = PngImagePlugin.PngInfo()
    for i in range(chunks):
        info.add_text(f"comment{i}", "x" * (megabytes_each * 1_000_000), zip=True)
    return encode(gradient_rgb(8, 6), "PNG", pnginfo=info)


# --- metadata amplification --------------------------------------------------------------------


def test_compressed_png_text_is_not_inflated_at_fetch_or_decode() -> None:
    # 16 zTXt chunks of 1 MB each compress to 15 kB; Pillow inflates all of them while opening,
    # and the decoded image used to keep them in its info.
    data = png_with_compressed_text(16)
    assert len(data) < 32 * 1024
    fetch_peak, ref = traced_peak(lambda: ImageMediaIO().load_bytes_ref(data))
    assert fetch_peak < 256 * 1024
    decode_peak, decoded = traced_peak(ref.decode)  # type: ignore[attr-defined]
    assert decode_peak < 1 * MiB
    assert decoded.size == (8, 6)
    assert not any(key.startswith("comment") for key in decoded.info)


def test_plain_png_text_survives() -> None:
    info = PngImagePlugin.PngInfo()
    info.add_text("Title", "kept")
    decoded = (
        ImageMediaIO().load_bytes_ref(encode(gradient_rgb(8, 6), "PNG", pnginfo=info)).decode()
    )
    assert decoded.info.get("Title") == "kept"


def _raw_profile_exif(orientation: int) -> str:
    exif = Image.Exif()
    exif[0x0112] = orientation
    block = exif.tobytes()[6:]  # without "Exif\0\0", as ImageMagick writes it
    return f"\nexif\n{len(block):8}\n{block.hex()}\n"


def test_an_orientation_in_a_compressed_raw_exif_profile_is_still_honoured() -> None:
    info = PngImagePlugin.PngInfo()
    info.add_text("Raw profile type exif", _raw_profile_exif(6), zip=True)
    original = gradient_rgb(6, 4)
    decoded = ImageMediaIO().load_bytes_ref(encode(original, "PNG", pnginfo=info)).decode()
    assert np.array_equal(np.asarray(decoded), np.rot90(np.asarray(original), k=-1))


def _png_exif_orientation_and_array(values: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0xA500] = tuple(range(70_000, 70_000 + values))  # > 16 bits: one LONG array in IFD0
    return encode(gradient_rgb(8, 6), "PNG", exif=exif.tobytes())


def test_turning_an_image_does_not_unpack_its_whole_exif_block() -> None:
    # Pillow's exif_transpose re-serializes every tag to drop the orientation: a 1 MB eXIf chunk
    # took 47 MB of Python objects. The decoder drops the metadata instead.
    data = _png_exif_orientation_and_array(250_000)
    ref = ImageMediaIO().load_bytes_ref(data)
    peak, decoded = traced_peak(ref.decode)
    assert decoded.size == (6, 8)  # type: ignore[attr-defined]
    assert peak < 6 * len(data)
    assert decoded.getexif().get(0x0112) is None  # type: ignore[attr-defined]


def test_a_huge_exif_block_costs_a_small_multiple_of_its_size_at_fetch() -> None:
    data = _png_exif_orientation_and_array(250_000)
    peak, _ = traced_peak(lambda: ImageMediaIO(trust_exif_image_id=True).load_bytes_ref(data))
    assert peak < 3 * len(data)


# --- tall, thin rasters ------------------------------------------------------------------------


def tall_png(height: int, *, orientation: int | None = None) -> bytes:
    """A 1-pixel-wide all-black grayscale PNG, with an EXIF orientation if asked."""
    ihdr = struct.pack(">IIBBBBB", 1, height, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x00" * height, 9)
    extra = b""
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        extra = _png_chunk(b"eXIf", exif.tobytes()[6:])
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + extra
        + _png_chunk(b"IDAT", pixels)
        + _png_chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("orientation", [None, 6], ids=["upright", "turned"])
def test_a_tall_thin_image_is_charged_for_its_row_pointers(orientation: int | None) -> None:
    # 1 x 200000: 800 kB of pixels at 4 bytes a pixel, but 2.4 MB as Pillow stores it. A budget
    # that only counted pixels would let 1 x 90000000 (under the pixel cap) take a gigabyte.
    ref = ImageMediaIO().load_bytes_ref(tall_png(200_000, orientation=orientation))
    with (
        decode_budget_scope(MediaDecodedBudget(limit_bytes=2_000_000)),
        pytest.raises(MediaTooLargeError, match="2400000 bytes"),
    ):
        ref.decode()
    with decode_budget_scope(MediaDecodedBudget(limit_bytes=2_400_000)):
        assert ref.decode().size in ((1, 200_000), (200_000, 1))


# --- unusual but legal pixels ------------------------------------------------------------------


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def rgb48_png(width: int, height: int) -> bytes:
    """A 16-bit-per-channel RGB PNG (Pillow reads it, but cannot write one)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    row = b"\x00" + np.full(width * 3, 40000, dtype=">u2").tobytes()
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(row * height))
        + _png_chunk(b"IEND", b"")
    )


def _palette_with_short_table() -> bytes:
    image = Image.new("P", (4, 4), 0)
    image.putdata([0, 1, 2, 3] * 4)
    image.putpalette([255, 0, 0, 0, 255, 0])  # two entries for four indices
    return encode(image, "PNG")


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            encode(Image.fromarray(np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000), "PNG"),
            id="16-bit-gray-PNG",
        ),
        pytest.param(rgb48_png(8, 8), id="16-bit-RGB-PNG"),
        pytest.param(encode(gradient_rgb(8, 8).convert("CMYK"), "JPEG"), id="CMYK-JPEG"),
        pytest.param(encode(gradient_rgb(8, 8), "JPEG", progressive=True), id="progressive-JPEG"),
        pytest.param(encode(gradient_rgb(8, 8).convert("1"), "BMP"), id="1-bit-BMP"),
        pytest.param(encode(gradient_rgb(8, 8).convert("RGBA"), "BMP"), id="32-bit-BMP"),
        pytest.param(_palette_with_short_table(), id="palette-shorter-than-indices"),
        pytest.param(encode(gradient_rgb(8, 8).convert("LA"), "PNG"), id="LA-PNG"),
    ],
)
def test_unusual_modes_decode_to_the_target_mode(data: bytes) -> None:
    decoded = ImageMediaIO().load_bytes_ref(data).decode()
    assert decoded.mode == "RGB" and decoded.size[0] in (4, 8)


def test_truncated_images_fail_and_the_global_switch_is_left_alone() -> None:
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    data = encode(gradient_rgb(64, 64), "PNG")
    ref = ImageMediaIO().load_bytes_ref(data[: len(data) * 2 // 3])
    with pytest.raises(ValueError, match=r"^Failed to load image: .*truncated"):
        ref.decode()
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


# --- files packed with empty header units ------------------------------------------------------


def _packed(image_format: str, units: int) -> bytes:
    """A valid 16x16 image with ``units`` empty header units (segments, chunks, blocks) added."""
    data = encode(gradient_rgb(16, 16), image_format)
    if image_format == "JPEG":
        return data[:2] + b"\xff\xfe\x00\x02" * units + data[2:]  # empty comment segments
    if image_format == "PNG":
        return data[:33] + _png_chunk(b"abCd", b"") * units + data[33:]  # empty private chunks
    palette = 3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0
    cut = 13 + palette
    return data[:cut] + b"!\xfe\x01x\x00" * units + data[cut:]  # one-byte comments


@pytest.mark.parametrize(
    ("image_format", "limit"), [("JPEG", 4096), ("PNG", 65536), ("GIF", 65536)]
)
def test_a_file_packed_with_empty_header_units_is_refused_before_pillow_walks_it(
    image_format: str, limit: int
) -> None:
    # Pillow's parsers spend about a microsecond of Python on each unit: a 64 MB file of them
    # took 10-30 s of CPU to open. A few hundred thousand are refused at once, at fetch and
    # on the eager path.
    packed = _packed(image_format, 300_000)
    with pytest.raises(VLLMUnprocessableEntityError, match=f"more than {limit} header segments"):
        ImageMediaIO().load_bytes_ref(packed)
    with pytest.raises(VLLMUnprocessableEntityError, match="header segments"):
        ImageMediaIO().load_bytes(packed)
    # Well under the limit, the same trick is only a valid file.
    assert ImageMediaIO().load_bytes_ref(_packed(image_format, 1000)).decode().size == (16, 16)
