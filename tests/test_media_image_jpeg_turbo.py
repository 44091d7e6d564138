"""An RGB JPEG's one-call decode (``media/image/_jpeg_turbo.py``): Pillow's own pixels on every
kind of JPEG it takes, Pillow's decoder (and its verdicts) for every kind it declines, the
image's metadata carried over, and the GIL released while it decodes."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from PIL import Image, ImageOps

from _gil import python_progress_in_some_call
from _image_samples import (
    EXIF_ORIENTATION,
    RGB_SAMPLES,
    SKIMAGE_DATA,
    encode,
    exif_block,
    gradient_rgb,
    sample_path,
)
from _memory import PixelWork
from mediaref.media.image import ImageMediaIO
from mediaref.media.image._jpeg_turbo import decode_rgb_jpeg


def pillow_decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def turbo_decode(data: bytes) -> Image.Image | None:
    """The path itself, no fallback: None where it declines."""
    with Image.open(io.BytesIO(data)) as header:
        return decode_rgb_jpeg(header, data)


def assert_same_pixels_as_pillow(data: bytes) -> None:
    decoded = turbo_decode(data)
    assert decoded is not None, "this JPEG should take the one-call decode"
    expected = pillow_decode(data)
    assert (decoded.mode, decoded.size) == (expected.mode, expected.size)
    assert np.array_equal(np.asarray(decoded), np.asarray(expected))
    # Through the media IO, as every fetch decodes it.
    loaded = ImageMediaIO().load_bytes(data)
    assert np.array_equal(np.asarray(loaded), np.asarray(expected))


def real_jpegs() -> list[Path]:
    paths = sorted(SKIMAGE_DATA.glob("*.jpg"))
    try:
        import matplotlib.cbook
    except ImportError:
        return paths
    return [*paths, Path(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))]


def noisy(width: int, height: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


# --- the same pixels as Pillow -----------------------------------------------------------------


@pytest.mark.parametrize("path", real_jpegs(), ids=lambda p: p.name)
def test_real_photos_decode_to_pillows_pixels(path: Path) -> None:
    assert_same_pixels_as_pillow(path.read_bytes())


@pytest.mark.parametrize("name", [n for n in RGB_SAMPLES if n.endswith(".png")])
@pytest.mark.parametrize(
    "options",
    [
        {"quality": 95, "subsampling": 0},  # 4:4:4
        {"quality": 90, "subsampling": 1},  # 4:2:2
        {"quality": 75, "subsampling": 2},  # 4:2:0
        {"quality": 85, "progressive": True},
        {"quality": 85, "optimize": True},
        {"quality": 85, "restart_marker_blocks": 3},
        {"quality": 85, "keep_rgb": True},  # stored as RGB (Adobe marker), no YCbCr transform
        {"quality": 30, "subsampling": 2, "progressive": True, "optimize": True},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_every_pillow_encoding_decodes_to_pillows_pixels(
    name: str, options: dict[str, object]
) -> None:
    with Image.open(sample_path(name)) as image:
        assert_same_pixels_as_pillow(encode(image.convert("RGB"), "JPEG", **options))


@pytest.mark.parametrize("subsampling", ["444", "422", "420", "440", "411"])
def test_every_chroma_subsampling_decodes_to_pillows_pixels(subsampling: str) -> None:
    # 4:4:0 and 4:1:1 are ones Pillow cannot write: libjpeg-turbo's encoder makes them.
    with Image.open(sample_path("chelsea.png")) as image:
        pixels = np.asarray(image.convert("RGB"))
    assert_same_pixels_as_pillow(simplejpeg.encode_jpeg(pixels, colorsubsampling=subsampling))


@pytest.mark.parametrize(
    "size", [(1, 1), (3, 5), (17, 9), (1001, 7), (7, 1001), (1913, 1079)], ids=str
)
@pytest.mark.parametrize("subsampling", [0, 2])
def test_odd_sizes_decode_to_pillows_pixels(size: tuple[int, int], subsampling: int) -> None:
    image = Image.fromarray(noisy(*size))
    assert_same_pixels_as_pillow(encode(image, "JPEG", quality=90, subsampling=subsampling))


def test_the_first_frame_of_an_mpo_decodes_to_pillows_pixels() -> None:
    frames = [Image.fromarray(noisy(64, 48, seed)) for seed in (1, 2)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "MPO", save_all=True, append_images=frames[1:])
    data = buffer.getvalue()
    decoded = turbo_decode(data)
    assert decoded is not None and decoded.format == "MPO"
    assert np.array_equal(np.asarray(decoded), np.asarray(pillow_decode(data)))


# --- what it carries over ----------------------------------------------------------------------


def test_the_image_keeps_its_format_and_metadata() -> None:
    icc = b"\0" * 128  # carried as bytes; nothing here interprets it
    data = encode(gradient_rgb(64, 48), "JPEG", icc_profile=icc, dpi=(300, 300))
    decoded = turbo_decode(data)
    assert decoded is not None
    expected = pillow_decode(data)
    assert decoded.format == "JPEG"
    assert decoded.info == expected.info
    assert decoded.info["icc_profile"] == icc


def test_an_exif_orientation_still_turns_the_image_upright() -> None:
    data = encode(gradient_rgb(64, 48), "JPEG", exif=exif_block(orientation=6))
    assert turbo_decode(data) is not None
    upright = ImageMediaIO().load_bytes(data)
    expected = ImageOps.exif_transpose(pillow_decode(data))
    assert upright.size == (48, 64)
    assert np.array_equal(np.asarray(upright), np.asarray(expected))
    assert EXIF_ORIENTATION not in upright.getexif()


# --- what it leaves to Pillow ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_other_colour_spaces_are_left_to_pillow(mode: str) -> None:
    data = encode(gradient_rgb(64, 48).convert(mode), "JPEG")
    assert turbo_decode(data) is None
    loaded = ImageMediaIO(image_mode=None).load_bytes(data)
    assert loaded.mode == mode
    assert np.array_equal(np.asarray(loaded), np.asarray(pillow_decode(data)))


def test_a_drafted_jpeg_is_left_to_pillow() -> None:
    data = encode(Image.fromarray(noisy(256, 128)), "JPEG")
    with Image.open(io.BytesIO(data)) as header:
        header.draft("RGB", (64, 32))
        assert decode_rgb_jpeg(header, data) is None


def test_an_image_over_one_pillow_block_is_left_to_pillow() -> None:
    # 2900 x 1500 RGB is 17.4 MB of storage: more than one 16 MiB block, no single run.
    data = encode(Image.fromarray(noisy(2900, 1500)), "JPEG", quality=50)
    assert turbo_decode(data) is None
    loaded = ImageMediaIO().load_bytes(data)
    assert np.array_equal(np.asarray(loaded), np.asarray(pillow_decode(data)))


@pytest.mark.parametrize("extra_row", [0, 1])
def test_the_block_check_agrees_with_pillows_storage(pixel_work: PixelWork, extra_row: int) -> None:
    # The widest rows that fill one block exactly, then one row more: the first is taken, the
    # second declined before any image is allocated for it.
    width = 2048
    height = Image.core.get_block_size() // (width * 4) + extra_row  # type: ignore[attr-defined]
    data = encode(Image.new("RGB", (width, height), (90, 140, 200)), "JPEG", quality=50)
    pixel_work.restart()
    decoded = turbo_decode(data)
    if extra_row:
        assert decoded is None
        assert pixel_work.cores_allocated == 0
    else:
        assert decoded is not None
        assert np.array_equal(np.asarray(decoded), np.asarray(pillow_decode(data)))


def test_the_setting_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode(gradient_rgb(64, 48), "JPEG")
    assert turbo_decode(data) is not None
    monkeypatch.setenv("MEDIAREF_TURBO_JPEG", "0")
    assert turbo_decode(data) is None


def test_a_truncated_jpeg_gets_pillows_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode(Image.fromarray(noisy(256, 128)), "JPEG")
    cut = data[: len(data) // 2]
    assert turbo_decode(cut) is None
    verdicts = []
    for setting in ("1", "0"):
        monkeypatch.setenv("MEDIAREF_TURBO_JPEG", setting)
        with pytest.raises(ValueError, match="truncated") as failure:
            ImageMediaIO().load_bytes(cut)
        verdicts.append(str(failure.value))
    assert verdicts[0] == verdicts[1]


def test_a_stream_libjpeg_only_warns_about_gets_pillows_tolerant_pixels() -> None:
    data = encode(Image.fromarray(noisy(64, 48)), "JPEG")
    end = data.rindex(b"\xff\xd9")
    damaged = data[:end] + b"\x00" * 7 + data[end:]  # "extraneous bytes before marker 0xd9"
    with pytest.raises(ValueError, match="extraneous"):
        simplejpeg.decode_jpeg(damaged, strict=True)
    assert turbo_decode(damaged) is None
    loaded = ImageMediaIO().load_bytes(damaged)
    assert np.array_equal(np.asarray(loaded), np.asarray(pillow_decode(damaged)))


@pytest.mark.parametrize(("opened", "decoded"), [((64, 48), (80, 60)), ((80, 60), (64, 48))])
def test_a_frame_header_other_than_pillows_is_left_to_pillow(
    opened: tuple[int, int], decoded: tuple[int, int]
) -> None:
    # Pillow and libjpeg-turbo read the same frame header; were they ever to disagree, a larger
    # image would not fit the storage and a smaller one would not fill it.
    header_source = encode(gradient_rgb(*opened), "JPEG")
    with Image.open(io.BytesIO(header_source)) as header:
        assert decode_rgb_jpeg(header, encode(gradient_rgb(*decoded), "JPEG")) is None


def test_a_header_libjpeg_cannot_read_is_left_to_pillow() -> None:
    data = encode(gradient_rgb(64, 48), "JPEG")
    with Image.open(io.BytesIO(data)) as header:
        assert decode_rgb_jpeg(header, b"\xff\xd8 not a JPEG") is None


# --- the GIL -----------------------------------------------------------------------------------


def test_the_decode_lets_python_run_beside_it() -> None:
    data = encode(Image.fromarray(noisy(1024, 768)), "JPEG", quality=95)
    with Image.open(io.BytesIO(data)) as header:
        decoded, progress = python_progress_in_some_call(lambda: decode_rgb_jpeg(header, data))
    assert decoded is not None
    assert progress > 0


# --- hostile bytes -----------------------------------------------------------------------------


def test_mutated_jpegs_give_pillows_pixels_or_go_to_pillow() -> None:
    # Bytes flipped anywhere past the SOI: whatever Pillow still opens, the one-call decode
    # either gives exactly Pillow's pixels or declines (so Pillow's verdict stands); it never
    # raises, and never gives pixels where Pillow's decoder fails.
    rng = np.random.default_rng(7)
    base = encode(Image.fromarray(noisy(64, 48)), "JPEG", quality=80)
    taken = declined = 0
    for _ in range(400):
        mutated = bytearray(base)
        for _ in range(int(rng.integers(1, 4))):
            mutated[int(rng.integers(2, len(mutated)))] = int(rng.integers(0, 256))
        data = bytes(mutated)
        try:
            header = Image.open(io.BytesIO(data))
        except Exception:
            continue
        with header:
            decoded = decode_rgb_jpeg(header, data)
        if decoded is None:
            declined += 1
            continue
        taken += 1
        assert np.array_equal(np.asarray(decoded), np.asarray(pillow_decode(data)))
    assert taken > 0 and declined > 0  # both outcomes were exercised
