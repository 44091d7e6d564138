"""Hostile image containers: only formats whose header is read without decoding are identified.

Pinned here: formats outside the allow-list are refused at fetch time (422) before any plugin of
theirs runs (an ICO holding a huge PNG, a TIFF whose tag arrays balloon while opening, EPS's
Ghostscript...); GIF frames larger than their screen count against the pixel cap at fetch;
only the first frame of an animation is decoded; and a JPEG with thousands of scans is refused
before libjpeg spends minutes on it. Memory is bounded with ``tracemalloc`` (Python objects) and
Pillow's own allocation counter (pixel buffers, which tracemalloc cannot see).
"""

from __future__ import annotations

import io
import struct
import warnings
from collections.abc import Iterator

import numpy as np
import pytest
from PIL import Image

from _gil import python_progress_during
from _image_samples import encode, gradient_rgb, png_bomb
from _memory import PixelWork, traced_peak
from mediaref.exceptions import MediaTooLargeError, VLLMUnprocessableEntityError
from mediaref.media.image import ImageMediaIO
from mediaref.media.image._containers import jpeg_scan_count
from mediaref.media.image._header import ACCEPTED_FORMATS, MAX_JPEG_SCANS

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def _default_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VLLM_MAX_IMAGE_PIXELS", "MEDIAREF_MAX_IMAGE_FILESIZE_MB"):
        monkeypatch.delenv(name, raising=False)
    # The first image work in a process imports Pillow's plugins: not the payload's allocations.
    ImageMediaIO().load_bytes(encode(gradient_rgb(2, 2), "PNG"))


# --- crafted containers ------------------------------------------------------------------------


def ico_holding(png: bytes, declared: int = 16) -> bytes:
    """An ICO whose one directory entry declares ``declared`` x ``declared`` and holds ``png``."""
    header = struct.pack("<HHH", 0, 1, 1)
    entry = struct.pack("<BBBBHHII", declared, declared, 0, 0, 1, 32, len(png), 6 + 16)
    return header + entry + png


def icns_holding(png: bytes) -> bytes:
    body = b"ic08" + struct.pack(">I", 8 + len(png)) + png
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def tiff_with_strip_offsets(count: int) -> bytes:
    """A 16x16 TIFF whose StripOffsets and StripByteCounts tags hold ``count`` values each."""

    def entry(tag: int, kind: int, n: int, value: int) -> bytes:
        return struct.pack("<HHII", tag, kind, n, value)

    data_at = 8 + 2 + 12 * 8 + 4
    counts_at = data_at + 4 * count
    entries = [
        entry(256, 4, 1, 16),
        entry(257, 4, 1, 16),
        entry(258, 3, 1, 8),
        entry(259, 3, 1, 1),
        entry(262, 3, 1, 1),
        entry(273, 4, count, data_at),
        entry(278, 4, 1, 1),
        entry(279, 4, count, counts_at),
    ]
    offsets = np.arange(count, dtype="<u4").tobytes()
    counts = np.ones(count, dtype="<u4").tobytes()
    return (
        b"II*\x00"
        + struct.pack("<IH", 8, len(entries))
        + b"".join(entries)
        + b"\x00" * 4
        + offsets
        + counts
    )


def gif_with_frame(screen: tuple[int, int], frame: tuple[int, int]) -> bytes:
    """A GIF whose logical screen is ``screen`` and whose first frame is ``frame`` (a few pixels)."""
    header = b"GIF89a" + struct.pack("<HHBBB", *screen, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    descriptor = b"," + struct.pack("<HHHHB", 0, 0, *frame, 0)
    # LZW, minimum code size 2: clear code, one pixel of index 0, end of information.
    pixels = b"\x02\x02\x44\x01\x00"
    return header + descriptor + pixels + b";"


def progressive_jpeg_with_repeated_scan(repeats: int) -> bytes:
    """A valid progressive JPEG with its smallest scan repeated ``repeats`` more times.

    libjpeg warns about the bogus progression and keeps decoding: one more pass per scan.
    """
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).resize((256, 256))
    data = encode(image, "JPEG", progressive=True, quality=60)
    starts = [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] == 0xDA]
    bounds = [*starts, len(data) - 2]  # the last scan ends at EOI
    _, k = min((bounds[j + 1] - bounds[j], j) for j in range(len(starts)))
    scan = data[bounds[k] : bounds[k + 1]]
    return data[: bounds[k + 1]] + scan * repeats + data[bounds[k + 1] :]


def _refused_format_samples() -> Iterator[object]:
    small_png = encode(gradient_rgb(16, 16), "PNG")
    yield pytest.param(ico_holding(small_png), "ICO", id="ICO")
    yield pytest.param(icns_holding(small_png), "ICNS", id="ICNS")
    yield pytest.param(encode(gradient_rgb(16, 16), "TIFF"), "TIFF", id="TIFF")
    yield pytest.param(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n", "EPS", id="EPS")
    yield pytest.param(b"\xd7\xcd\xc6\x9a" + b"\x00" * 40, "WMF", id="WMF-placeable")
    yield pytest.param(encode(gradient_rgb(16, 16), "PCX"), "PCX", id="PCX")
    yield pytest.param(encode(gradient_rgb(16, 16), "SGI"), "SGI", id="SGI")
    yield pytest.param(encode(gradient_rgb(16, 16), "DDS"), "DDS", id="DDS")
    yield pytest.param(encode(gradient_rgb(16, 16), "PPM"), "PPM", id="PPM")
    yield pytest.param(encode(gradient_rgb(16, 16), "QOI"), "QOI", id="QOI")
    yield pytest.param(
        encode(gradient_rgb(16, 16).convert("RGBA"), "ICO"), "ICO", id="ICO-by-Pillow"
    )
    yield pytest.param(encode(gradient_rgb(16, 16), "JPEG2000"), "JPEG2000", id="JPEG2000")
    yield pytest.param(encode(gradient_rgb(16, 16), "AVIF"), "AVIF", id="AVIF")


# --- the allow-list ----------------------------------------------------------------------------


def test_the_accepted_formats_are_the_audited_ones() -> None:
    assert ACCEPTED_FORMATS == ("JPEG", "PNG", "GIF", "WEBP", "BMP")


@pytest.mark.parametrize(("data", "format_id"), list(_refused_format_samples()))
def test_a_refused_format_fails_at_fetch_as_422_without_running_its_plugin(
    data: bytes, format_id: str, pixel_work: PixelWork
) -> None:
    media_io = ImageMediaIO()
    with pytest.raises(VLLMUnprocessableEntityError) as caught:
        media_io.load_bytes_ref(data)
    error = caught.value
    assert error.status_code == 422 and error.modality == "image"
    assert f"image format {format_id} is not accepted" in str(error)
    assert "JPEG, PNG, GIF, WEBP, BMP" in str(error)
    assert (pixel_work.loads, pixel_work.cores_allocated) == (0, 0)
    # The eager path refuses the same way (and through decode() it would be a 422 naming the item).
    with pytest.raises(VLLMUnprocessableEntityError, match=f"image format {format_id} "):
        media_io.load_bytes(data)


def test_an_ico_holding_a_huge_png_allocates_nothing_at_fetch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 16x16 declared, 4000x4000 inside: Pillow's ICO plugin decodes the PNG while opening.
    bomb = ico_holding(png_bomb(4000, 4000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Image was not the expected size"
        with Image.open(io.BytesIO(bomb)) as opened:  # the hazard: 16 megapixels on open
            assert opened.size == (4000, 4000)
    pixel_work = PixelWork(monkeypatch)  # count from here
    peak, outcome = traced_peak(lambda: ImageMediaIO().load_bytes_ref(bomb))
    assert isinstance(outcome, VLLMUnprocessableEntityError), outcome
    assert pixel_work.cores_allocated == 0
    assert peak < 256 * 1024


def test_a_tiff_with_huge_tag_arrays_is_refused_before_pillow_unpacks_them() -> None:
    # 200k-entry strip tables: Pillow's TIFF open unpacks them into tuples of Python ints
    # (a 64 MB file took 2 GB and six minutes), before any pixel cap could apply.
    data = tiff_with_strip_offsets(200_000)
    peak, outcome = traced_peak(lambda: ImageMediaIO().load_bytes_ref(data))
    assert isinstance(outcome, VLLMUnprocessableEntityError), outcome
    assert "TIFF" in str(outcome)
    assert peak < 256 * 1024


def test_unrecognised_bytes_are_still_left_for_decode_time() -> None:
    ref = ImageMediaIO().load_bytes_ref(b"\x00\x01garbage that no plugin claims")
    with pytest.raises(ValueError, match=r"^Failed to load image: cannot identify"):
        ref.decode()


# --- GIF frames and animation ------------------------------------------------------------------


def test_a_gif_frame_larger_than_its_screen_counts_against_the_pixel_cap_at_fetch(
    monkeypatch: pytest.MonkeyPatch, pixel_work: PixelWork
) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000000")
    data = gif_with_frame(screen=(16, 16), frame=(3000, 3000))
    with pytest.raises(MediaTooLargeError, match=r"3000x3000 = 9000000 pixels"):
        ImageMediaIO().load_bytes_ref(data)
    assert pixel_work.cores_allocated == 0


def test_a_gif_frame_larger_than_pillows_own_limit_is_too_large_even_without_our_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "0")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(MediaTooLargeError, match="MAX_IMAGE_PIXELS"):
        ImageMediaIO().load_bytes_ref(gif_with_frame(screen=(16, 16), frame=(100, 100)))


# Found by test_image_fuzz: a first frame whose graphic control extension asks for disposal makes
# Pillow's open allocate the frame's disposal canvas, so a GIF's key must not come from Pillow.
GIF_WITH_DISPOSAL = (
    b"GIF89a\x08\x00\x08\x00\x81\x00\x00\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    b"!\xf9\x04\x08\n\x00\x00\x00,\x00\x00\x00\x00\x08\x00\x08\x00\x00\x08\x0f\x00\x01\x08"
    b"\x1cH\xb0\xa0\xc1\x83\x08\x13*L\x18\x10\x00;"
)


def test_a_gifs_key_allocates_no_raster(pixel_work: PixelWork) -> None:
    ref = ImageMediaIO().load_bytes_ref(GIF_WITH_DISPOSAL)
    assert (pixel_work.loads, pixel_work.cores_allocated) == (0, 0)
    assert ref.decode().size == (8, 8)


def test_a_gif_first_frame_declaring_a_huge_canvas_is_refused_unallocated(
    pixel_work: PixelWork,
) -> None:
    data = bytearray(GIF_WITH_DISPOSAL)
    descriptor = data.index(b",")
    data[descriptor + 5 : descriptor + 9] = struct.pack("<HH", 65535, 65535)
    pixel_work.restart()
    with pytest.raises(MediaTooLargeError, match="65535x65535"):
        ImageMediaIO().load_bytes_ref(bytes(data))
    assert (pixel_work.loads, pixel_work.cores_allocated) == (0, 0)


def test_only_the_first_frame_of_a_gif_is_decoded_however_large_the_later_ones(
    pixel_work: PixelWork,
) -> None:
    frames = [Image.new("RGB", (8, 8), (255, 0, 0)), Image.new("RGB", (8, 8), (0, 0, 255))]
    data = bytearray(encode(frames[0], "GIF", save_all=True, append_images=frames[1:]))
    # Grow the second frame's descriptor to 4000x4000: decoding it would allocate a large canvas.
    second = data.index(b",", data.index(b",") + 1)
    data[second + 5 : second + 9] = struct.pack("<HH", 4000, 4000)
    ref = ImageMediaIO().load_bytes_ref(bytes(data))
    decoded = ref.decode()
    assert decoded.size == (8, 8)
    assert np.asarray(decoded)[4, 4].tolist() == [255, 0, 0]


def test_an_apng_frame_outside_its_canvas_is_a_decode_failure() -> None:
    frames = [Image.new("RGB", (8, 8), (255, 0, 0)), Image.new("RGB", (8, 8), (0, 0, 255))]
    data = bytearray(encode(frames[0], "PNG", save_all=True, append_images=frames[1:]))
    fctl = data.index(b"fcTL")
    data[fctl + 8 : fctl + 16] = struct.pack(">II", 5000, 5000)  # first frame's width, height
    ref = ImageMediaIO().load_bytes_ref(bytes(data))  # the IHDR canvas is 8x8: fine at fetch
    with pytest.raises(ValueError, match=r"^Failed to load image: "):
        ref.decode()


# --- JPEG scans --------------------------------------------------------------------------------


def test_a_jpeg_with_too_many_scans_is_refused_before_a_pixel_is_decoded(
    pixel_work: PixelWork,
) -> None:
    data = progressive_jpeg_with_repeated_scan(MAX_JPEG_SCANS + 10)
    assert len(data) < 200_000  # a few hundred kB that would cost libjpeg a pass per scan
    pixel_work.restart()  # building the payload rasterized; from here nothing may
    # The key comes from the container bytes: counting scans (a walk of the whole payload)
    # waits for the decode, so a cache hit never pays for it.
    ref = ImageMediaIO().load_bytes_ref(data)
    with pytest.raises(VLLMUnprocessableEntityError, match=r"JPEG with \d+ scans is refused"):
        ref.decode()
    with pytest.raises(VLLMUnprocessableEntityError, match="scans"):
        ImageMediaIO().load_bytes(data)
    assert (pixel_work.loads, pixel_work.cores_allocated) == (0, 0)


def test_an_ordinary_progressive_jpeg_decodes() -> None:
    data = encode(gradient_rgb(64, 48), "JPEG", progressive=True)
    assert ImageMediaIO().load_bytes_ref(data).decode().size == (64, 48)
    repeated = progressive_jpeg_with_repeated_scan(20)  # a bogus but bounded progression
    assert ImageMediaIO().load_bytes_ref(repeated).decode().size == (256, 256)


def test_the_scan_count_holds_the_gil_throughout() -> None:
    # It runs on the decoding thread, where letting go of the GIL costs a switch interval.
    payload = b"\xff\xda\x00" * (1 << 20)
    count, python_steps = python_progress_during(lambda: jpeg_scan_count(payload, 0))
    assert count == 1 << 20
    assert python_steps == 0


@pytest.mark.parametrize("pairs", [0, 1, 10, 64, 65, 66, 5000])
def test_the_scan_count_counts_every_pair_however_many(pairs: int) -> None:
    # Below and past the point where the count goes from the regular expression to bytes.count.
    rng = np.random.default_rng(pairs)
    chunks = [rng.integers(0, 256, 300, dtype=np.uint8).tobytes() for _ in range(pairs + 1)]
    payload = b"\xff\xda".join(chunk.replace(b"\xff", b"\xff\x00") for chunk in chunks)
    assert jpeg_scan_count(payload, 0) == payload.count(b"\xff\xda") == pairs
    assert jpeg_scan_count(b"\xff\xda" + payload, 1) == pairs  # the pair at 0 is before the SOF


def test_the_scan_limit_also_applies_when_pillow_parses_the_markers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # When the byte-level marker reader gives up, Pillow's JPEG parser reads the header; the
    # scan count is checked on that path too.
    data = progressive_jpeg_with_repeated_scan(MAX_JPEG_SCANS + 10)
    monkeypatch.setattr("mediaref.media.image.jpeg_header", lambda data, want_exif: None)
    with pytest.raises(VLLMUnprocessableEntityError, match="scans"):
        ImageMediaIO().load_bytes_ref(data)  # Pillow's open is a decode-grade header read


# --- MPO: a JPEG with pictures appended ----------------------------------------------------------


def test_an_mpo_decodes_its_first_picture() -> None:
    # Phones write MPO (a JPEG with an MP index and more pictures after it); Pillow's JPEG plugin
    # opens it as MPO. Only the first picture, a plain JPEG of the declared size, is decoded.
    first, second = gradient_rgb(40, 30), Image.new("RGB", (400, 300), (0, 0, 255))
    data = encode(first, "MPO", save_all=True, append_images=[second])
    with Image.open(io.BytesIO(data)) as opened:
        assert opened.format == "MPO" and getattr(opened, "n_frames", 1) == 2
        expected = np.asarray(opened.convert("RGB"))  # frame 0, as Pillow decodes it
    decoded = ImageMediaIO().load_bytes_ref(data).decode()
    assert decoded.size == (40, 30)
    assert np.array_equal(np.asarray(decoded), expected)
