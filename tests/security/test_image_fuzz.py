"""A fuzzer over the image header path: mutated real images and random bytes behind real magic.

For every input, :meth:`ImageMediaIO.load_bytes_ref` (the fetch-time path) must:

- raise nothing but the documented fetch-time refusals (:class:`MediaTooLargeError`,
  :class:`VLLMUnprocessableEntityError`) or return a ref;
- never rasterize: no ``ImageFile.load`` and no Pillow image core allocated;
- allocate little: the ``tracemalloc`` peak stays within a small multiple of the payload.

and ``decode()`` must return an image or raise a ``ValueError`` (the decoder's verdict, a cap
included), within a generous bound on time, and with the caps keeping its allocations small.
"""

from __future__ import annotations

import concurrent.futures
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from _image_samples import encode, exif_block, gradient_rgb, two_frame_animation
from _memory import PixelWork
from mediaref.exceptions import MediaTooLargeError, VLLMUnprocessableEntityError
from mediaref.media.base import MediaRef
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.image import ImageMediaIO

FETCH_REFUSALS = (MediaTooLargeError, VLLMUnprocessableEntityError)
NEVER_HANGS_S = 60.0  # generous: a decode here takes milliseconds
# Fixed costs a header parse may have whatever the payload: Pillow's BMP plugin lists every
# palette index it was told of (up to 65536, about 2.6 MB of ints).
FETCH_PEAK_SLACK = 4 * 1024 * 1024


def _seeds() -> Iterator[bytes]:
    rng = np.random.default_rng(7)
    noise = Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8))
    exif = exif_block(image_id="fuzz-id", orientation=6)
    yield encode(noise, "JPEG", quality=80, exif=exif)
    yield encode(noise, "JPEG", progressive=True)
    yield encode(noise.convert("CMYK"), "JPEG")
    yield encode(noise, "PNG", exif=exif)
    yield encode(noise.convert("P"), "PNG", transparency=3)
    yield encode(noise.convert("LA"), "PNG")
    yield two_frame_animation("PNG")
    yield encode(noise, "WEBP", quality=70)
    yield encode(noise.convert("RGBA"), "WEBP", lossless=True, exif=exif)
    yield two_frame_animation("WEBP")
    yield two_frame_animation("GIF")
    yield encode(noise, "BMP")
    yield encode(noise.convert("1"), "BMP")
    yield encode(noise.convert("P"), "BMP")
    yield encode(gradient_rgb(8, 8), "TIFF")  # refused, whatever the mutation leaves of it


SEEDS = list(_seeds())
MAGIC = [
    b"\xff\xd8\xff\xe0",
    b"\xff\xd8\xff\xc2",
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    b"GIF89a",
    b"GIF87a",
    b"RIFF\x00\x10\x00\x00WEBPVP8X",
    b"RIFF\x00\x10\x00\x00WEBPVP8L",
    b"BM",
    b"II*\x00",
    b"\x00\x00\x01\x00",
    b"icns",
]


@st.composite
def mutated_images(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "overwrite", "insert", "delete", "truncate"]))
        if action == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=8))
            data[at : at + len(chunk)] = chunk
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
        elif action == "delete":
            del data[at : at + draw(st.integers(1, 32))]
        else:
            del data[at:]
    return bytes(data)


random_behind_magic = st.builds(
    lambda magic, body: magic + body, st.sampled_from(MAGIC), st.binary(max_size=512)
)


@pytest.fixture(scope="module")
def decode_pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        yield pool


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> PixelWork:
    # Mutated headers claim any size: keep what a decode may allocate small, as a deployment's
    # caps would keep it bounded.
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "4000000")
    monkeypatch.delenv("MEDIAREF_MAX_IMAGE_FILESIZE_MB", raising=False)
    ImageMediaIO().load_bytes(encode(gradient_rgb(2, 2), "PNG"))  # plugins imported before tracing
    return PixelWork(monkeypatch)


def fetch(data: bytes, pixel_work: PixelWork) -> MediaRef[Image.Image] | None:
    """Build the ref as the connector would; check what that is allowed to cost."""
    pixel_work.restart()
    tracemalloc.start()
    try:
        try:
            ref: MediaRef[Image.Image] | None = ImageMediaIO().load_bytes_ref(data)
        except FETCH_REFUSALS:
            ref = None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert pixel_work.work() == (0, 0), "load_bytes_ref rasterized"
    assert peak < 4 * len(data) + FETCH_PEAK_SLACK, f"fetch took {peak} bytes for {len(data)}"
    return ref


def decode(ref: MediaRef[Image.Image], pool: concurrent.futures.Executor) -> None:
    def run() -> None:
        with decode_budget_scope(MediaDecodedBudget(limit_bytes=64 * 1024 * 1024)):
            try:
                assert isinstance(ref.decode(), Image.Image)
            except ValueError as exc:  # a verdict or a cap, and nothing else
                assert isinstance(exc, FETCH_REFUSALS) or str(exc).startswith(
                    ("Failed to load image: ", "image ", "the request's decoded media")
                ), exc

    pool.submit(run).result(timeout=NEVER_HANGS_S)


FUZZ_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ_SETTINGS
@given(data=mutated_images())
def test_mutated_images(
    data: bytes, small_caps: PixelWork, decode_pool: concurrent.futures.Executor
) -> None:
    ref = fetch(data, small_caps)
    if ref is not None:
        decode(ref, decode_pool)


@FUZZ_SETTINGS
@given(data=random_behind_magic)
def test_random_bytes_behind_real_magic(
    data: bytes, small_caps: PixelWork, decode_pool: concurrent.futures.Executor
) -> None:
    ref = fetch(data, small_caps)
    if ref is not None:
        decode(ref, decode_pool)


def test_every_seed_decodes_or_is_refused(
    small_caps: PixelWork, decode_pool: concurrent.futures.Executor
) -> None:
    decoded = 0
    for seed in SEEDS:
        ref = fetch(seed, small_caps)
        if ref is not None:
            decode(ref, decode_pool)
            decoded += ref.is_decoded
    assert decoded == len(SEEDS) - 1  # all but the TIFF
