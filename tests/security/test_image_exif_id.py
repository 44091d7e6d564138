"""Cross-tenant cache poisoning through EXIF IDs: which ID keys an image, and who may turn it off.

Whoever sends an image can write any EXIF ImageID into it. When the decoder trusts the ID, two
different pictures carrying one ID share a key, so the first one cached is what the second is
answered with: the same trust model as client-supplied ``multi_modal_uuids``. Pinned here: the ID
read is IFD0's ImageID (0x800D, as vLLM's hasher reads it), never the Exif IFD's ImageUniqueID;
trust is a setting of the decoder (``trust_exif_image_id``, else ``MEDIAREF_TRUST_EXIF_IMAGE_ID``
read when the ref is built); distrusted, every image keys off its bytes, for JPEG, PNG and WebP.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from PIL import Image

from _image_samples import encode, exif_block, gradient_rgb
from mediaref.media.base import derive_identity_key, derive_media_key
from mediaref.media.image import ImageMediaIO

IMAGE_ID = "8c3f0e52-7d41-4b9a-a1f6-0e3d2c5b9a71"
FORMATS = [
    pytest.param("JPEG", {"quality": 90}, id="JPEG"),
    pytest.param("PNG", {}, id="PNG"),
    pytest.param("WEBP", {"lossless": True}, id="WEBP"),
]


@pytest.fixture(autouse=True)
def _trust_left_to_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDIAREF_TRUST_EXIF_IMAGE_ID", raising=False)


def two_pictures_with_one_id(image_format: str, options: dict[str, object]) -> tuple[bytes, bytes]:
    """Two different pictures (a victim's and an attacker's) that carry the same ImageID."""
    exif = exif_block(image_id=IMAGE_ID)
    victim = encode(gradient_rgb(24, 16), image_format, exif=exif, **options)
    attacker = encode(Image.new("RGB", (24, 16), (255, 0, 0)), image_format, exif=exif, **options)
    assert victim != attacker
    return victim, attacker


@pytest.mark.parametrize(("image_format", "options"), FORMATS)
def test_trusted_image_ids_make_different_pictures_share_a_key(
    image_format: str, options: dict[str, object]
) -> None:
    victim, attacker = two_pictures_with_one_id(image_format, options)
    media_io = ImageMediaIO(trust_exif_image_id=True)
    expected = derive_identity_key("exif-image-id", IMAGE_ID.encode(), media_io.get_decode_spec())
    assert media_io.load_bytes_ref(victim).key == media_io.load_bytes_ref(attacker).key == expected


@pytest.mark.parametrize(("image_format", "options"), FORMATS)
def test_distrusted_image_ids_leave_every_picture_its_own_key(
    image_format: str, options: dict[str, object]
) -> None:
    victim, attacker = two_pictures_with_one_id(image_format, options)
    media_io = ImageMediaIO(trust_exif_image_id=False)
    spec = media_io.get_decode_spec()
    victim_ref, attacker_ref = media_io.load_bytes_ref(victim), media_io.load_bytes_ref(attacker)
    assert victim_ref.key == derive_media_key(victim, spec)
    assert attacker_ref.key == derive_media_key(attacker, spec)
    assert victim_ref.key != attacker_ref.key
    # Trust changes identity, never the output: the spec (and the pixels) are the same.
    assert spec == ImageMediaIO(trust_exif_image_id=True).get_decode_spec()
    assert not np.array_equal(np.asarray(victim_ref.decode()), np.asarray(attacker_ref.decode()))


def test_the_setting_decides_when_the_decoder_leaves_it_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    victim, attacker = two_pictures_with_one_id("JPEG", {"quality": 90})
    media_io = ImageMediaIO()  # trust_exif_image_id=None: the setting, read per ref
    assert media_io.trusts_exif_image_id()  # vLLM's behaviour by default
    assert media_io.load_bytes_ref(victim).key == media_io.load_bytes_ref(attacker).key
    monkeypatch.setenv("MEDIAREF_TRUST_EXIF_IMAGE_ID", "0")
    assert not media_io.trusts_exif_image_id()
    assert media_io.load_bytes_ref(victim).key != media_io.load_bytes_ref(attacker).key
    # An explicit choice wins over the setting.
    assert (
        ImageMediaIO(trust_exif_image_id=True).load_bytes_ref(victim).key
        == ImageMediaIO(trust_exif_image_id=True).load_bytes_ref(attacker).key
    )


def test_trust_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="trust_exif_image_id"):
        ImageMediaIO(trust_exif_image_id="no")  # type: ignore[arg-type]


@pytest.mark.parametrize(("image_format", "options"), FORMATS)
def test_image_unique_id_is_not_an_identity(image_format: str, options: dict[str, object]) -> None:
    exif = exif_block(image_unique_id=IMAGE_ID)
    one = encode(gradient_rgb(24, 16), image_format, exif=exif, **options)
    other = encode(Image.new("RGB", (24, 16), (0, 0, 255)), image_format, exif=exif, **options)
    media_io = ImageMediaIO(trust_exif_image_id=True)
    assert media_io.load_bytes_ref(one).key == derive_media_key(one, media_io.get_decode_spec())
    assert media_io.load_bytes_ref(one).key != media_io.load_bytes_ref(other).key


def test_a_gif_or_bmp_has_no_exif_and_keys_off_its_bytes() -> None:
    media_io = ImageMediaIO(trust_exif_image_id=True)
    for image_format in ("GIF", "BMP"):
        data = encode(gradient_rgb(8, 8), image_format)
        assert media_io.load_bytes_ref(data).key == derive_media_key(
            data, media_io.get_decode_spec()
        )


def _exif_with_a_huge_exif_ifd(values: int) -> bytes:
    """An EXIF block with IFD0's ImageID and, in the Exif sub-IFD, one array of ``values`` LONGs."""
    exif = Image.Exif()
    exif[0x800D] = IMAGE_ID
    exif.get_ifd(0x8769)[0xA500] = tuple(range(70_000, 70_000 + values))  # > 16 bits: LONG
    return exif.tobytes()


def test_reading_the_id_never_unpacks_the_exif_sub_ifd() -> None:
    # The old ImageUniqueID lookup unpacked the whole Exif sub-IFD into Python objects at fetch
    # time: a 1 MB array became tens of megabytes. IFD0's one tag is all the key needs.
    block = _exif_with_a_huge_exif_ifd(250_000)
    data = encode(gradient_rgb(8, 8), "PNG", exif=block)
    media_io = ImageMediaIO(trust_exif_image_id=True)
    tracemalloc.start()
    try:
        ref = media_io.load_bytes_ref(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ref.key == derive_identity_key(
        "exif-image-id", IMAGE_ID.encode(), media_io.get_decode_spec()
    )
    assert peak < 4 * len(data)
