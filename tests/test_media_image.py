"""ImageMediaIO: header-time caps and keys, decode-time pixels, and the failures of each."""

from __future__ import annotations

import gc
import io
import sys
import tracemalloc
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pybase64
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import (
    Image,
    ImageOps,
    JpegImagePlugin,
    PngImagePlugin,
    WebPImagePlugin,
)

from _image_samples import (
    ANIMATED_GIF_SAMPLE,
    GRAYSCALE_SAMPLE,
    RGB_SAMPLES,
    encode,
    exif_block,
    gradient_rgb,
    jpeg_claiming_size,
    png_bomb,
    sample_bytes,
    sample_path,
    semi_transparent_rgba,
    two_frame_animation,
    wav_bytes,
    webp_claiming_size,
)
from _memory import PixelWork
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.base import MediaRef, derive_identity_key, derive_media_key
from mediaref.media.image import ImageMediaIO

IMAGE_ID = "5d8f2a31c0e94b7fa6e21d3c4b5a6978"


@pytest.fixture(autouse=True)
def _default_image_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VLLM_MAX_IMAGE_PIXELS", "MEDIAREF_MAX_IMAGE_FILESIZE_MB"):
        monkeypatch.delenv(name, raising=False)


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image)


def decode_error(ref: MediaRef[Image.Image]) -> ValueError:
    with pytest.raises(ValueError) as caught:
        ref.decode()
    return caught.value


# --- decoded pixels ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*RGB_SAMPLES, GRAYSCALE_SAMPLE])
def test_decode_matches_pillow_rgb_conversion(name: str) -> None:
    ref = ImageMediaIO().load_bytes_ref(sample_bytes(name))
    decoded = ref.decode()
    with Image.open(sample_path(name)) as reference:
        expected = reference.convert("RGB")
    assert decoded.mode == "RGB"
    assert decoded.size == expected.size
    assert np.array_equal(pixels(decoded), pixels(expected))


def test_grayscale_sample_is_converted_to_the_target_mode() -> None:
    with Image.open(sample_path(GRAYSCALE_SAMPLE)) as source:
        assert source.mode == "L"
    assert ImageMediaIO().load_bytes_ref(sample_bytes(GRAYSCALE_SAMPLE)).decode().mode == "RGB"
    assert ImageMediaIO("L").load_bytes_ref(sample_bytes("astronaut.png")).decode().mode == "L"


def test_other_target_mode_matches_pillow_conversion() -> None:
    decoded = ImageMediaIO("L").load_bytes(sample_bytes("rocket.jpg"))
    with Image.open(sample_path("rocket.jpg")) as reference:
        assert np.array_equal(pixels(decoded), pixels(reference.convert("L")))


def test_load_bytes_decodes_now_like_the_ref() -> None:
    data = sample_bytes("chelsea.png")
    media_io = ImageMediaIO()
    assert np.array_equal(
        pixels(media_io.load_bytes(data)), pixels(media_io.load_bytes_ref(data).decode())
    )


def test_file_and_base64_loaders_share_the_bytes_key() -> None:
    media_io = ImageMediaIO()
    data = sample_bytes("coffee.png")
    encoded = pybase64.b64encode(data).decode("ascii")
    expected_key = media_io.load_bytes_ref(data).key
    assert media_io.load_file_ref(sample_path("coffee.png")).key == expected_key
    assert media_io.load_base64_ref("image/png", encoded).key == expected_key
    assert np.array_equal(
        pixels(media_io.load_base64("image/png", encoded)),
        pixels(media_io.load_file(sample_path("coffee.png"))),
    )


def test_encode_base64_round_trips_losslessly() -> None:
    media_io = ImageMediaIO()
    original = gradient_rgb(17, 9)
    encoded = media_io.encode_base64(original)
    assert pybase64.b64decode(encoded)[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.array_equal(pixels(media_io.load_base64("image/png", encoded)), pixels(original))
    jpeg = media_io.encode_base64(original, image_format="JPEG")
    assert pybase64.b64decode(jpeg)[:2] == b"\xff\xd8"


def test_encode_base64_writes_the_target_mode() -> None:
    # The helper encodes what decode would produce, so RGBA input can be written as JPEG.
    encoded = ImageMediaIO().encode_base64(semi_transparent_rgba(), image_format="PNG")
    with Image.open(io.BytesIO(pybase64.b64decode(encoded))) as written:
        assert written.mode == "RGB"
        assert pixels(written)[0, 2].tolist() == [255, 255, 255]  # transparent: the background
    jpeg = ImageMediaIO().encode_base64(semi_transparent_rgba(), image_format="JPEG")
    assert pybase64.b64decode(jpeg)[:2] == b"\xff\xd8"


# --- transparency ------------------------------------------------------------------------------


def test_rgba_is_composited_onto_the_background() -> None:
    data = encode(semi_transparent_rgba(), "PNG")
    on_white = ImageMediaIO().load_bytes_ref(data)
    on_black = ImageMediaIO(rgba_background_color=(0, 0, 0)).load_bytes_ref(data)
    white, black = pixels(on_white.decode()), pixels(on_black.decode())
    assert white[0, 0].tolist() == black[0, 0].tolist() == [255, 0, 0]  # opaque: untouched
    assert white[0, 2].tolist() == [255, 255, 255]  # transparent: the background
    assert black[0, 2].tolist() == [0, 0, 0]
    assert white[0, 1].tolist() == [127, 255, 127]  # half: a blend
    assert black[0, 1].tolist() == [0, 128, 0]
    assert on_white.key != on_black.key


def _palette_image_with_transparent_index() -> Image.Image:
    image = Image.new("P", (2, 1), 1)
    image.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    image.info["transparency"] = 1
    return image


@pytest.mark.parametrize(
    "image",
    [
        pytest.param(Image.new("LA", (2, 1), (40, 0)), id="LA"),
        pytest.param(_palette_image_with_transparent_index(), id="P-with-transparency"),
    ],
)
def test_other_alpha_carriers_are_composited(image: Image.Image) -> None:
    data = encode(image, "PNG")
    decoded = ImageMediaIO(rgba_background_color=(10, 20, 30)).load_bytes(data)
    assert pixels(decoded)[0, 0].tolist() == [10, 20, 30]
    # A plain conversion would expose the colour stored under the transparency instead.
    with Image.open(io.BytesIO(data)) as reopened:
        assert pixels(reopened.convert("RGB"))[0, 0].tolist() != [10, 20, 30]


def test_target_mode_with_alpha_keeps_it() -> None:
    decoded = ImageMediaIO("RGBA").load_bytes(encode(semi_transparent_rgba(), "PNG"))
    assert decoded.mode == "RGBA"
    assert np.array_equal(pixels(decoded), pixels(semi_transparent_rgba()))


@pytest.mark.parametrize(
    "color",
    [
        (255, 255),
        (0, 0, 0, 0),
        (256, 0, 0),
        (-1, 0, 0),
        (1.0, 2, 3),
        (True, 0, 0),
        "white",
        None,
        7,
    ],
)
def test_background_color_is_validated_at_construction(color: object) -> None:
    with pytest.raises(ValueError, match="rgba_background_color"):
        ImageMediaIO(rgba_background_color=color)  # type: ignore[arg-type]


def test_background_color_accepts_a_list() -> None:
    assert ImageMediaIO(rgba_background_color=[1, 2, 3]).rgba_background_color == (1, 2, 3)


def test_image_mode_is_validated_and_other_options_kept_in_the_spec() -> None:
    with pytest.raises(ValueError, match="image_mode"):
        ImageMediaIO("NOPE")
    # vLLM keeps options it does not know for custom decoders; they count in the key.
    custom = ImageMediaIO(my_option=[1, 2])
    assert custom.kwargs == {"my_option": [1, 2]}
    assert custom.get_decode_spec().settings["kwargs"] == {"my_option": [1, 2]}
    data = sample_bytes("rocket.jpg")
    assert custom.load_bytes_ref(data).key != ImageMediaIO().load_bytes_ref(data).key
    with pytest.raises(TypeError, match="unsupported type"):
        ImageMediaIO(my_option=object())  # not a JSON value: it could not be in the key


# --- spec and keys -----------------------------------------------------------------------------


def test_spec_records_every_output_setting() -> None:
    spec = ImageMediaIO("L", rgba_background_color=(1, 2, 3)).get_decode_spec()
    assert spec.settings == {
        "modality": "image",
        "decoder": "pillow",
        "image_mode": "L",
        "rgba_background_color": [1, 2, 3],
        "exif_transpose": True,
        "frame": 0,
    }


def test_key_is_a_digest_of_the_bytes_and_stable() -> None:
    media_io = ImageMediaIO()
    data = sample_bytes("rocket.jpg")
    first, second = (
        media_io.load_bytes_ref(data),
        ImageMediaIO().load_bytes_ref(bytes(bytearray(data))),
    )
    assert first.key == second.key == derive_media_key(data, media_io.get_decode_spec())
    assert first.key != media_io.load_bytes_ref(sample_bytes("retina.jpg")).key


def test_key_differs_by_image_mode() -> None:
    data = sample_bytes("astronaut.png")
    assert (
        ImageMediaIO("RGB").load_bytes_ref(data).key != ImageMediaIO("L").load_bytes_ref(data).key
    )


# --- EXIF ImageID ------------------------------------------------------------------------------


def _chelsea() -> Image.Image:
    with Image.open(sample_path("chelsea.png")) as image:
        return image.convert("RGB")


def test_exif_image_id_makes_two_encodings_share_a_key() -> None:
    media_io = ImageMediaIO()
    exif = exif_block(image_id=IMAGE_ID)
    as_jpeg = media_io.load_bytes_ref(encode(_chelsea(), "JPEG", quality=90, exif=exif))
    as_png = media_io.load_bytes_ref(encode(_chelsea(), "PNG", exif=exif))
    assert as_jpeg.key == as_png.key
    assert as_jpeg.key == derive_identity_key(
        "exif-image-id", IMAGE_ID.encode(), media_io.get_decode_spec()
    )
    # The spec still counts: another mode is another key for the same ImageID.
    assert ImageMediaIO("L").load_bytes_ref(encode(_chelsea(), "PNG", exif=exif)).key != as_png.key


def test_without_an_image_id_two_encodings_differ() -> None:
    media_io = ImageMediaIO()
    plain_jpeg = encode(_chelsea(), "JPEG", quality=90)
    plain_png = encode(_chelsea(), "PNG")
    assert media_io.load_bytes_ref(plain_jpeg).key != media_io.load_bytes_ref(plain_png).key
    assert media_io.load_bytes_ref(plain_png).key == derive_media_key(
        plain_png, media_io.get_decode_spec()
    )


def test_different_image_ids_give_different_keys() -> None:
    media_io = ImageMediaIO()
    image = gradient_rgb(8, 8)
    keys = {
        media_io.load_bytes_ref(encode(image, "PNG", exif=exif_block(image_id=image_id))).key
        for image_id in (IMAGE_ID, IMAGE_ID[::-1])
    }
    assert len(keys) == 2


@pytest.mark.parametrize("where", ["exif-ifd", "ifd0"])
def test_image_unique_id_alone_does_not_key(where: str) -> None:
    # ImageUniqueID (0xA420) is not the identity vLLM reads: it must not merge two payloads.
    if where == "exif-ifd":
        exif = exif_block(image_unique_id=IMAGE_ID)
    else:
        block = Image.Exif()
        block[0xA420] = IMAGE_ID
        exif = block.tobytes()
    media_io = ImageMediaIO()
    for image_format in ("JPEG", "PNG"):
        data = encode(gradient_rgb(8, 8), image_format, exif=exif)
        assert media_io.load_bytes_ref(data).key == derive_media_key(
            data, media_io.get_decode_spec()
        )


def test_placeholder_and_damaged_exif_fall_back_to_the_bytes_key() -> None:
    media_io = ImageMediaIO()
    spec = media_io.get_decode_spec()
    placeholder = encode(gradient_rgb(8, 8), "JPEG", exif=exif_block(image_id="0" * 32))
    assert media_io.load_bytes_ref(placeholder).key == derive_media_key(placeholder, spec)
    damaged = encode(
        gradient_rgb(8, 8), "JPEG", exif=b"Exif\x00\x00II*\x00\x08\x00\x00\x00\xff\xff\x01"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Pillow: "Corrupt EXIF data"
        ref = media_io.load_bytes_ref(damaged)
        assert ref.key == derive_media_key(damaged, spec)
        assert ref.decode().size == (8, 8)


def test_png_without_exif_keys_off_bytes_without_rasterizing(pixel_work: PixelWork) -> None:
    media_io = ImageMediaIO()
    data = sample_bytes("astronaut.png")
    ref = media_io.load_bytes_ref(data)
    assert ref.key == derive_media_key(data, media_io.get_decode_spec())
    assert (pixel_work.loads, pixel_work.cores_allocated) == (0, 0)
    # The hazard being avoided: asking such a PNG for its EXIF decodes it.
    with Image.open(sample_path("astronaut.png")) as probe:
        probe.getexif()
    assert pixel_work.loads == 1 and pixel_work.cores_allocated >= 1


@pytest.mark.parametrize(
    ("image_format", "options"),
    [
        ("PNG", {}),
        ("PNG", {"exif": exif_block(image_id=IMAGE_ID, orientation=6)}),
        ("JPEG", {"exif": exif_block(image_id=IMAGE_ID, orientation=6)}),
        ("WEBP", {"exif": exif_block(image_id=IMAGE_ID)}),
        ("GIF", {}),
        ("BMP", {}),
    ],
)
def test_building_a_ref_never_rasterizes(
    pixel_work: PixelWork, image_format: str, options: dict[str, object]
) -> None:
    data = encode(gradient_rgb(64, 48), image_format, **options)
    pixel_work.restart()  # count from here, not from the encode
    ref = ImageMediaIO().load_bytes_ref(data)
    assert (pixel_work.loads, pixel_work.cores_allocated) == (0, 0)
    assert ref.decode().size in ((64, 48), (48, 64))
    # The witness that the decode rasterized: Pillow's load, or (an RGB JPEG's one-call decode)
    # a new image to decode into.
    assert pixel_work.loads >= 1 or pixel_work.cores_allocated >= 1


# --- EXIF orientation --------------------------------------------------------------------------


@pytest.mark.parametrize("eager", [False, True], ids=["ref", "load_bytes"])
@pytest.mark.parametrize("image_format", ["PNG", "WEBP"])
@pytest.mark.parametrize(("orientation", "rot90_turns"), [(3, 2), (6, -1), (8, 1)])
def test_exif_orientation_is_applied(
    orientation: int, rot90_turns: int, image_format: str, eager: bool
) -> None:
    original = gradient_rgb(6, 4)
    options = {"lossless": True} if image_format == "WEBP" else {}
    data = encode(original, image_format, exif=exif_block(orientation=orientation), **options)
    media_io = ImageMediaIO()
    decoded = media_io.load_bytes(data) if eager else media_io.load_bytes_ref(data).decode()
    assert np.array_equal(pixels(decoded), np.rot90(pixels(original), k=rot90_turns))
    # The tag is gone from the result, so honouring EXIF downstream does not turn it twice.
    assert decoded.getexif().get(0x0112) is None
    assert ImageOps.exif_transpose(decoded).size == decoded.size


def test_exif_orientation_in_a_jpeg_header() -> None:
    data = encode(gradient_rgb(32, 16), "JPEG", quality=95, exif=exif_block(orientation=6))
    assert ImageMediaIO().load_bytes_ref(data).decode().size == (16, 32)


# --- frames ------------------------------------------------------------------------------------


def test_animated_gif_sample_decodes_its_first_frame() -> None:
    with Image.open(sample_path(ANIMATED_GIF_SAMPLE)) as animation:
        assert getattr(animation, "n_frames", 1) > 1
        first = animation.convert("RGB")
        animation.seek(1)
        second = animation.convert("RGB")
    assert not np.array_equal(pixels(first), pixels(second))
    decoded = ImageMediaIO().load_bytes_ref(sample_bytes(ANIMATED_GIF_SAMPLE)).decode()
    assert np.array_equal(pixels(decoded), pixels(first))


@pytest.mark.parametrize("image_format", ["GIF", "PNG", "WEBP"])
def test_two_frame_animation_decodes_the_first_frame(image_format: str) -> None:
    data = two_frame_animation(image_format)
    with Image.open(io.BytesIO(data)) as animation:
        assert getattr(animation, "n_frames", 1) == 2
    decoded = ImageMediaIO().load_bytes_ref(data).decode()
    assert pixels(decoded)[4, 4].tolist() == [255, 0, 0]


# --- pixel cap ---------------------------------------------------------------------------------


def test_decompression_bomb_fails_at_construction_without_pixels(pixel_work: PixelWork) -> None:
    bomb = png_bomb(30000, 30000)
    assert len(bomb) < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(MediaTooLargeError) as caught:
            ImageMediaIO().load_bytes_ref(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert "30000x30000" in message and "900000000" in message and "178956970" in message
    assert (pixel_work.loads, pixel_work.cores_allocated) == (0, 0)
    assert peak < 2 * 1024 * 1024


def test_disabled_pixel_cap_admits_the_header_lazily(
    monkeypatch: pytest.MonkeyPatch, pixel_work: PixelWork
) -> None:
    bomb = png_bomb(30000, 30000)
    # Pillow's own check, which Image.open applies, would refuse this header outright.
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(bomb))
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "0")
    tracemalloc.start()
    try:
        ref = ImageMediaIO().load_bytes_ref(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not ref.is_decoded
    assert (pixel_work.loads, pixel_work.cores_allocated) == (0, 0)
    assert peak < 2 * 1024 * 1024
    ref.release()  # never decoded: 900 megapixels


def test_pixel_cap_applies_to_the_header_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000")
    media_io = ImageMediaIO()
    at_cap = encode(gradient_rgb(40, 25), "PNG")
    over_cap = encode(gradient_rgb(40, 26), "PNG")
    assert media_io.load_bytes_ref(at_cap).decode().size == (40, 25)
    with pytest.raises(MediaTooLargeError, match=r"40x26 = 1040 pixels exceeds the 1000-pixel"):
        media_io.load_bytes_ref(over_cap)
    with pytest.raises(MediaTooLargeError):
        media_io.load_bytes(over_cap)
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "0")
    assert media_io.load_bytes_ref(over_cap).decode().size == (40, 26)


def test_jpeg_header_size_is_capped() -> None:
    with pytest.raises(MediaTooLargeError, match="60000x40000"):
        ImageMediaIO().load_bytes_ref(jpeg_claiming_size(60000, 40000))


@pytest.mark.parametrize(
    ("options", "first_chunk"),
    [
        ({"quality": 80}, b"VP8 "),
        ({"lossless": True}, b"VP8L"),
        ({"lossless": True, "exif": exif_block(image_id=IMAGE_ID)}, b"VP8X"),
    ],
)
def test_webp_canvas_is_capped_before_pillow_opens_it(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, object], first_chunk: bytes
) -> None:
    data = encode(gradient_rgb(40, 26), "WEBP", **options)
    assert data[12:16] == first_chunk
    # Pillow's WebP plugin would refuse 1040 pixels itself, from inside its open.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000")
    with pytest.raises(MediaTooLargeError, match=r"40x26 = 1040 pixels exceeds the 1000-pixel"):
        ImageMediaIO().load_bytes_ref(data)


def test_pillow_refusing_inside_a_plugin_is_too_large_even_without_our_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = webp_claiming_size(16384, 16384)
    with pytest.raises(MediaTooLargeError, match="16384x16384"):
        ImageMediaIO().load_bytes_ref(data)
    # With our cap off, Pillow's WebP plugin still refuses twice its process-wide limit from
    # inside its open: the image cannot be decoded here, and says so at fetch time.
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "0")
    with pytest.raises(MediaTooLargeError, match="MAX_IMAGE_PIXELS") as caught:
        ImageMediaIO().load_bytes_ref(data)
    assert isinstance(caught.value.__cause__, Image.DecompressionBombError)


def test_pillow_global_limit_is_neither_consulted_nor_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    data = encode(gradient_rgb(64, 64), "PNG")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with pytest.raises(Image.DecompressionBombError):
            Image.open(io.BytesIO(data))
        assert ImageMediaIO().load_bytes_ref(data).decode().size == (64, 64)
        assert ImageMediaIO().load_bytes(data).size == (64, 64)
    assert Image.MAX_IMAGE_PIXELS == 100


# --- encoded-size cap --------------------------------------------------------------------------


def test_encoded_size_cap_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    media_io = ImageMediaIO()
    assert media_io.get_max_bytes() == 64 * 1024 * 1024
    monkeypatch.setenv("MEDIAREF_MAX_IMAGE_FILESIZE_MB", "0.5")
    assert media_io.get_max_bytes() == 512 * 1024
    with pytest.raises(MediaTooLargeError, match="791555 bytes exceeds the 524288-byte"):
        media_io.load_bytes_ref(sample_bytes("astronaut.png"))
    with pytest.raises(MediaTooLargeError):
        media_io.load_file_ref(sample_path("astronaut.png"))
    assert media_io.load_bytes_ref(sample_bytes("chelsea.png")).decode().size == (451, 300)
    monkeypatch.setenv("MEDIAREF_MAX_IMAGE_FILESIZE_MB", "0")
    assert media_io.get_max_bytes() is None
    media_io.load_bytes_ref(sample_bytes("astronaut.png"))


# --- bad payloads ------------------------------------------------------------------------------


def _bad_payloads() -> Iterator[object]:
    astronaut, rocket = sample_bytes("astronaut.png"), sample_bytes("rocket.jpg")
    yield pytest.param(b"garbage", id="garbage")
    yield pytest.param(b"", id="empty")
    yield pytest.param(astronaut[:33], id="png-signature-and-IHDR-only")
    yield pytest.param(astronaut[: len(astronaut) // 2], id="truncated-png")
    yield pytest.param(rocket[:2000], id="truncated-jpeg")
    yield pytest.param(rocket[:200], id="jpeg-cut-in-its-header")
    yield pytest.param(wav_bytes(), id="wav")


@pytest.mark.parametrize("data", list(_bad_payloads()))
def test_bad_payload_builds_a_ref_and_fails_at_decode(data: bytes) -> None:
    media_io = ImageMediaIO()
    ref = media_io.load_bytes_ref(data)
    assert ref.key == derive_media_key(data, media_io.get_decode_spec())
    error = decode_error(ref)
    assert str(error).startswith("Failed to load image: ")
    assert type(error) is ValueError
    assert decode_error(ref) is error  # memoized: every caller sees the same failure
    with pytest.raises(ValueError, match=r"^Failed to load image: "):
        media_io.load_bytes(data)


def test_unidentified_bytes_are_described_without_addresses() -> None:
    error = decode_error(ImageMediaIO().load_bytes_ref(wav_bytes()))
    assert "cannot identify an image format in 1644 bytes starting with b'RIFF" in str(error)
    assert "0x" not in str(error)


_FUZZ_SOURCES = [
    encode(gradient_rgb(12, 10), image_format, **options)
    for image_format, options in (
        ("PNG", {}),
        ("JPEG", {"exif": exif_block(image_id=IMAGE_ID, orientation=6)}),
        ("GIF", {}),
        ("WEBP", {}),
        ("BMP", {}),
    )
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    source=st.sampled_from(_FUZZ_SOURCES),
    position=st.integers(min_value=0, max_value=10_000),
    replacement=st.binary(min_size=1, max_size=8),
    cut=st.integers(min_value=1, max_value=10_000),
)
def test_damaged_payloads_fail_only_as_value_errors(
    monkeypatch: pytest.MonkeyPatch, source: bytes, position: int, replacement: bytes, cut: int
) -> None:
    # A damaged header may claim any size; keep whatever it claims small enough to allocate.
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000000")
    offset = position % len(source)
    damaged = (source[:offset] + replacement + source[offset + len(replacement) :])[:cut]
    try:
        ref = ImageMediaIO().load_bytes_ref(damaged)
    except MediaTooLargeError:
        return
    try:
        assert isinstance(ref.decode(), Image.Image)
    except ValueError as exc:
        assert str(exc).startswith(("Failed to load image: ", "image "))


# --- payload lifetime and threads --------------------------------------------------------------


@pytest.mark.parametrize("name", ["astronaut.png", "rocket.jpg", ANIMATED_GIF_SAMPLE])
def test_decoded_image_does_not_pin_the_payload(name: str) -> None:
    data = sample_bytes(name)
    baseline = sys.getrefcount(data)
    ref = ImageMediaIO().load_bytes_ref(data)
    decoded = ref.decode()
    ref.release()
    del ref
    gc.collect()
    assert sys.getrefcount(data) == baseline
    assert decoded.size  # still readable


def test_webp_result_is_detached_from_the_plugin() -> None:
    # Pillow's WebP image keeps a decoder over a copy of the whole payload.
    decoded = (
        ImageMediaIO().load_bytes_ref(encode(gradient_rgb(8, 8), "WEBP", lossless=True)).decode()
    )
    assert not isinstance(decoded, WebPImagePlugin.WebPImageFile)
    assert np.array_equal(pixels(decoded), pixels(gradient_rgb(8, 8)))


def test_refs_decode_in_parallel_threads() -> None:
    media_io = ImageMediaIO()
    names = [*RGB_SAMPLES, GRAYSCALE_SAMPLE, ANIMATED_GIF_SAMPLE]
    serial = [pixels(media_io.load_bytes(sample_bytes(name))) for name in names]
    refs = [media_io.load_bytes_ref(sample_bytes(name)) for name in names]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(lambda ref: pixels(ref.decode()), refs))
    assert all(np.array_equal(a, b) for a, b in zip(serial, parallel, strict=True))


def test_webp_ref_reads_only_riff_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Opening a WebP sets up Pillow's whole animation decoder; the key needs only the RIFF chunks.
    plain = encode(gradient_rgb(40, 26), "WEBP", quality=80)
    with_id = encode(
        gradient_rgb(40, 26), "WEBP", lossless=True, exif=exif_block(image_id=IMAGE_ID)
    )
    opened: list[object] = []
    real_open = WebPImagePlugin.WebPImageFile._open
    monkeypatch.setattr(
        WebPImagePlugin.WebPImageFile,
        "_open",
        lambda self: (opened.append(self), real_open(self))[1],
    )
    io_ = ImageMediaIO()
    refs = [io_.load_bytes_ref(plain), io_.load_bytes_ref(with_id)]
    assert opened == []
    assert refs[0].key == derive_media_key(plain, io_.get_decode_spec())
    assert refs[1].key == derive_identity_key(
        "exif-image-id", IMAGE_ID.encode(), io_.get_decode_spec()
    )
    assert refs[0].decode().size == (40, 26) and len(opened) == 1


def test_jpeg_ref_reads_only_marker_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pillow's JPEG open parses every table before the scan; the key needs only size and EXIF.
    plain = encode(gradient_rgb(40, 26), "JPEG", quality=90)
    with_id = encode(gradient_rgb(40, 26), "JPEG", exif=exif_block(image_id=IMAGE_ID))
    opened: list[object] = []
    real_open = JpegImagePlugin.JpegImageFile._open
    monkeypatch.setattr(
        JpegImagePlugin.JpegImageFile,
        "_open",
        lambda self: (opened.append(self), real_open(self))[1],
    )
    io_ = ImageMediaIO()
    refs = [io_.load_bytes_ref(plain), io_.load_bytes_ref(with_id)]
    assert opened == []
    assert refs[0].key == derive_media_key(plain, io_.get_decode_spec())
    assert refs[1].key == derive_identity_key(
        "exif-image-id", IMAGE_ID.encode(), io_.get_decode_spec()
    )
    assert refs[1].decode().size == (40, 26) and len(opened) == 1


@pytest.mark.parametrize("cut", [3, 6, 20])
def test_jpeg_with_a_cut_header_is_left_for_decode_time(cut: int) -> None:
    data = encode(gradient_rgb(40, 26), "JPEG", quality=90)[:cut]
    ref = ImageMediaIO().load_bytes_ref(data)
    with pytest.raises(ValueError, match="Failed to load image"):
        ref.decode()


def test_jpeg_pixel_cap_reads_the_frame_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000")
    with pytest.raises(MediaTooLargeError, match=r"40x26 = 1040 pixels"):
        ImageMediaIO().load_bytes_ref(encode(gradient_rgb(40, 26), "JPEG", quality=90))


def test_png_ref_reads_only_chunk_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pillow's PNG open inflates every text chunk; the key needs only IHDR and an eXIf chunk.
    plain = encode(gradient_rgb(40, 26), "PNG")
    with_id = encode(gradient_rgb(40, 26), "PNG", exif=exif_block(image_id=IMAGE_ID))
    opened: list[object] = []
    real_open = PngImagePlugin.PngImageFile._open
    monkeypatch.setattr(
        PngImagePlugin.PngImageFile, "_open", lambda self: (opened.append(self), real_open(self))[1]
    )
    io_ = ImageMediaIO()
    refs = [io_.load_bytes_ref(plain), io_.load_bytes_ref(with_id)]
    assert opened == []
    assert refs[0].key == derive_media_key(plain, io_.get_decode_spec())
    assert refs[1].key == derive_identity_key(
        "exif-image-id", IMAGE_ID.encode(), io_.get_decode_spec()
    )
    assert refs[1].decode().size == (40, 26) and len(opened) == 1


def test_png_pixel_cap_reads_ihdr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000")
    with pytest.raises(MediaTooLargeError, match=r"40x26 = 1040 pixels"):
        ImageMediaIO().load_bytes_ref(encode(gradient_rgb(40, 26), "PNG"))


# -- feeding the decoder -----------------------------------------------------------------------


def noisy_jpeg() -> bytes:
    """About 0.9 MB: Pillow alone would feed it in some 14 pieces of 64 KiB."""
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (768, 1024, 3), dtype=np.uint8)
    return encode(Image.fromarray(noise, "RGB"), "JPEG", quality=95)


@pytest.fixture
def pillow_jpeg_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pillow's own JPEG decoder, which every JPEG the one-call decode declines goes through
    (a grayscale or CMYK one, a damaged stream): the feeds below are its."""
    monkeypatch.setenv("MEDIAREF_TURBO_JPEG", "0")


@pytest.mark.usefixtures("pillow_jpeg_decoder")
def test_a_jpeg_is_fed_to_its_decoder_at_once_so_the_gil_is_taken_once(
    decoder_feeds: dict[str, list[int]],
) -> None:
    data = noisy_jpeg()
    assert len(data) > 8 * 65536
    image = ImageMediaIO().load_bytes_ref(data).decode()
    assert decoder_feeds["jpeg"] == [len(data)]
    assert np.array_equal(pixels(image), pixels(Image.open(io.BytesIO(data)).convert("RGB")))


@pytest.mark.usefixtures("pillow_jpeg_decoder")
def test_a_payload_past_the_feed_bound_is_fed_in_bounded_pieces(
    decoder_feeds: dict[str, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mediaref.media.image import _pixels

    monkeypatch.setattr(_pixels, "DECODE_FEED_BYTES", 200_000)
    data = noisy_jpeg()
    image = ImageMediaIO().load_bytes_ref(data).decode()
    jpeg_feeds = decoder_feeds["jpeg"]
    assert len(jpeg_feeds) >= len(data) // 200_000
    # A feed is one read plus what the decoder left of the last (a marker cut in two, at most).
    assert max(jpeg_feeds) < 200_000 + 65536
    assert np.array_equal(pixels(image), pixels(Image.open(io.BytesIO(data)).convert("RGB")))
