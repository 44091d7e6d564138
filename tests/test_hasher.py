"""MultiModalHasher: the MediaRef branch never decodes, every branch, framing, algorithms.

Digests of values that are not refs equal vLLM 0.33's (test_hasher_vllm_vectors.py pins them
against vLLM's own output); the properties below are the ones a reader can check by eye, including
the collisions vLLM's encoding has and mediaref therefore shares.
"""

from __future__ import annotations

import io
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from PIL import ExifTags, Image

from _counting import CountingDecoder
from _image_samples import encode, exif_block
from mediaref.hasher import MultiModalHasher
from mediaref.media.base import DecodeSpec, MediaRef, MediaWithBytes
from mediaref.media.image import ImageMediaIO


def H(*args: object, **kwargs: object) -> str:
    """``hash_kwargs`` under blake3 unless an algorithm is given."""
    return MultiModalHasher.hash_kwargs(*(args or ("blake3",)), **kwargs)


IMAGE_ID = "8d2f7c3a-5b1e-4f60-9a47-2c3d4e5f6a7b"


def framed(raw: bytes) -> bytes:
    return len(raw).to_bytes(8, "little") + raw


# --- the MediaRef branch ------------------------------------------------------------------------


def test_media_ref_hashes_as_its_key_without_decoding() -> None:
    decoder = CountingDecoder(Image.new("RGB", (4, 4)))
    ref = MediaRef(b"encoded", decoder, DecodeSpec(modality="image"))
    assert b"".join(MultiModalHasher.serialize_item(ref)) == framed(ref.key)
    assert b"".join(MultiModalHasher.iter_value_to_bytes(ref)) == b"\x04" + framed(ref.key)
    H(image=ref)
    H(image=[ref, {"nested": (ref,)}])
    assert decoder.calls == 0 and not ref.is_decoded


def test_media_ref_identity_is_its_key_not_its_payload_or_decoded_value() -> None:
    spec = DecodeSpec(modality="image")
    one = MediaRef(b"a", lambda: 1, spec, key=b"k" * 32)
    same_key = MediaRef(b"different payload", lambda: 2, spec, key=b"k" * 32)
    other_key = MediaRef(b"a", lambda: 1, spec, key=b"j" * 32)
    assert H(image=one) == H(image=same_key) != H(image=other_key)


def test_media_ref_does_not_collide_with_bytes_equal_to_its_key() -> None:
    ref = MediaRef(b"x", lambda: None, DecodeSpec(modality="image"))
    assert H(image=ref) != H(image=ref.key)


def test_released_ref_still_hashes() -> None:
    ref = MediaRef(b"x", lambda: None, DecodeSpec(modality="image"))
    before = H(image=ref)
    ref.release()
    assert H(image=ref) == before


def test_refs_with_white_and_black_rgba_backgrounds_differ() -> None:
    png = encode(Image.new("RGBA", (4, 4), (10, 20, 30, 0)), "PNG")
    white = ImageMediaIO(rgba_background_color=(255, 255, 255)).load_bytes_ref(png)
    black = ImageMediaIO(rgba_background_color=(0, 0, 0)).load_bytes_ref(png)
    assert H(image=white) != H(image=black)
    assert not white.is_decoded and not black.is_decoded
    # Decoded, the composites differ in their pixels too.
    assert H(image=white.decode()) != H(image=black.decode())


def test_spec_settings_alone_separate_refs_of_the_same_bytes() -> None:
    white = MediaRef(
        b"png", lambda: None, DecodeSpec(modality="image", rgba_background_color=[255, 255, 255])
    )
    black = MediaRef(
        b"png", lambda: None, DecodeSpec(modality="image", rgba_background_color=[0, 0, 0])
    )
    assert H(image=white) != H(image=black)


# --- fetched images: vLLM's digest, from the bytes -----------------------------------------------


def _vllm_item(data: bytes, io: ImageMediaIO, io_config: dict[str, Any] | None) -> MediaWithBytes:
    """What vLLM's image decoder hands its hasher for ``data``: the media, bytes and io_config."""
    return MediaWithBytes(io.load_bytes(data), data, io_config)


@pytest.mark.parametrize(
    ("image", "fmt", "converts"),
    [
        (Image.new("RGB", (8, 6), (200, 30, 40)), "JPEG", False),  # RGB already: bytes alone
        (Image.new("L", (8, 6), 90), "JPEG", True),  # converted to RGB: io_config too
        (Image.new("RGBA", (8, 6), (10, 20, 30, 128)), "PNG", True),  # transparency flattened
        (Image.new("P", (8, 6)), "PNG", True),
    ],
)
def test_a_fetched_image_hashes_to_vllms_digest_without_decoding(
    image: Image.Image, fmt: str, converts: bool
) -> None:
    data = encode(image, fmt)
    io = ImageMediaIO()
    ref = io.load_bytes_ref(data)
    io_config = {"image_mode": "RGB", "rgba_background_color": (255, 255, 255)}
    expected = H(model_id="m", image=_vllm_item(data, io, io_config if converts else None))
    assert H(model_id="m", image=ref) == expected
    assert not ref.is_decoded  # the view is read off the header


def _vllm_io_config(data: bytes, target: str = "RGB") -> dict[str, Any] | None:
    """vLLM 0.33's ``ImageMediaIO.load_bytes`` rule: io_config when converting the opened
    image to ``target`` returns another image (transparency flattened onto RGB, or a mode
    change)."""
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        transparent = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
        if not ((target == "RGB" and transparent) or image.mode != target):
            return None
    return {"image_mode": target, "rgba_background_color": (255, 255, 255)}


def _png_with_trns(image: Image.Image, transparency: object) -> bytes:
    return encode(image, "PNG", transparency=transparency)


HEADER_MODE_CASES = {
    "jpeg_rgb": lambda: encode(Image.new("RGB", (9, 7), (1, 2, 3)), "JPEG"),
    "jpeg_l": lambda: encode(Image.new("L", (9, 7), 5), "JPEG"),
    "jpeg_cmyk": lambda: encode(Image.new("CMYK", (9, 7), (1, 2, 3, 4)), "JPEG"),
    "png_1": lambda: encode(Image.new("1", (9, 7), 1), "PNG"),
    "png_l": lambda: encode(Image.new("L", (9, 7), 5), "PNG"),
    "png_i16": lambda: encode(Image.new("I;16", (9, 7), 300), "PNG"),
    "png_rgb": lambda: encode(Image.new("RGB", (9, 7), (1, 2, 3)), "PNG"),
    "png_rgb_trns": lambda: _png_with_trns(Image.new("RGB", (9, 7), (1, 2, 3)), (1, 2, 3)),
    "png_l_trns": lambda: _png_with_trns(Image.new("L", (9, 7), 5), 5),
    "png_p": lambda: encode(Image.new("P", (9, 7), 3), "PNG"),
    "png_p_trns": lambda: _png_with_trns(Image.new("P", (9, 7), 3), 3),
    "png_la": lambda: encode(Image.new("LA", (9, 7), (5, 6)), "PNG"),
    "png_rgba": lambda: encode(Image.new("RGBA", (9, 7), (1, 2, 3, 4)), "PNG"),
    "webp_lossy": lambda: encode(Image.new("RGB", (9, 7), (1, 2, 3)), "WEBP"),
    "webp_lossy_alpha": lambda: encode(Image.new("RGBA", (9, 7), (1, 2, 3, 4)), "WEBP"),
    "webp_lossless": lambda: encode(Image.new("RGB", (9, 7), (1, 2, 3)), "WEBP", lossless=True),
    "webp_lossless_alpha": lambda: encode(
        Image.new("RGBA", (9, 7), (1, 2, 3, 4)), "WEBP", lossless=True
    ),
    "gif": lambda: encode(Image.new("P", (9, 7), 3), "GIF"),
    "bmp": lambda: encode(Image.new("RGB", (9, 7), (1, 2, 3)), "BMP"),
}


@pytest.mark.parametrize("name", list(HEADER_MODE_CASES))
@pytest.mark.parametrize("target", ["RGB", "L"])
def test_the_header_decides_io_config_as_vllms_decoded_image_does(name: str, target: str) -> None:
    data = HEADER_MODE_CASES[name]()
    io = ImageMediaIO(target)
    ref = io.load_bytes_ref(data)
    vllm_item = MediaWithBytes(Image.new(target, (1, 1)), data, _vllm_io_config(data, target))
    assert H(image=ref) == H(image=vllm_item)
    assert not ref.is_decoded


def test_an_exif_image_id_hashes_by_mediarefs_key_only_when_trusted() -> None:
    data = encode(Image.new("RGB", (8, 6), "red"), "JPEG", exif=exif_block(image_id=IMAGE_ID))
    vllm = H(image=_vllm_item(data, ImageMediaIO(), None))  # vLLM: the bytes (a text ImageID)
    untrusted = ImageMediaIO(trust_exif_image_id=False).load_bytes_ref(data)
    assert H(image=untrusted) == vllm
    # Trusted, the ImageID is the identity two encodings share (docs/compat.md): the key.
    trusted = ImageMediaIO(trust_exif_image_id=True).load_bytes_ref(data)
    assert trusted.hash_view() is None
    assert b"".join(MultiModalHasher.serialize_item(trusted)) == framed(trusted.key)
    assert H(image=trusted) != vllm


def test_an_image_refs_view_follows_forks_not_transforms_and_needs_its_bytes() -> None:
    ref = ImageMediaIO().load_bytes_ref(encode(Image.new("RGB", (4, 4)), "PNG"))
    assert ref.hash_view() is not None
    assert H(image=ref.fork()) == H(image=ref)
    assert ref.map(lambda image: image).hash_view() is not None  # identity kept
    rotated = ref.map(lambda image: image.rotate(90), rotate=90)
    assert rotated.hash_view() is None and H(image=rotated) != H(image=ref)  # keyed apart
    ref.release()
    with pytest.raises(RuntimeError, match="released"):
        ref.hash_view()


# --- PIL images -----------------------------------------------------------------------------------


def with_image_id(image: Image.Image, image_id: object) -> Image.Image:
    exif = image.getexif()
    exif[ExifTags.Base.ImageID] = image_id
    return image


def test_an_exif_image_id_uuid_is_the_identity_of_the_image() -> None:
    image_id = uuid.uuid4()
    red = with_image_id(Image.new("RGB", (4, 4), "red"), image_id)
    # As in vLLM: the declared id alone identifies the image, whatever its pixels, mode or size.
    assert H(image=red) == H(image=with_image_id(Image.new("L", (2, 9)), image_id))
    assert H(image=red) != H(image=with_image_id(Image.new("RGB", (4, 4), "red"), uuid.uuid4()))


def test_an_image_id_that_is_not_a_uuid_object_falls_back_to_pixels() -> None:
    # Pillow reads ImageID from a file as text; vLLM trusts only a uuid.UUID set in memory.
    image_id = str(uuid.uuid4())
    red = with_image_id(Image.new("RGB", (4, 4), "red"), image_id)
    blue = with_image_id(Image.new("RGB", (4, 4), "blue"), image_id)
    assert H(image=red) != H(image=blue)
    assert H(image=red) == H(image=Image.new("RGB", (4, 4), "red"))


def test_a_malformed_exif_block_falls_back_to_pixels() -> None:
    class BrokenExif(Image.Image):
        def getexif(self) -> Image.Exif:
            raise SyntaxError("not a TIFF file")

    image = Image.new("RGB", (2, 2), "red")
    broken = BrokenExif()
    broken.__dict__.update(image.__dict__)
    assert H(image=broken) == H(image=image)


def test_pixels_decide_equality_of_images() -> None:
    assert H(image=Image.new("RGB", (3, 3), (1, 2, 3))) == H(
        image=Image.new("RGB", (3, 3), (1, 2, 3))
    )
    assert H(image=Image.new("RGB", (3, 3), (1, 2, 3))) != H(
        image=Image.new("RGB", (3, 3), (1, 2, 4))
    )


def test_modes_1_and_l_differ() -> None:
    # Same bytes: an 8x1 bilevel image packs into the one byte of a 1x1 grayscale image.
    bilevel, gray = Image.new("1", (8, 1), 0), Image.new("L", (1, 1), 0)
    assert bilevel.tobytes() == gray.tobytes()
    assert H(image=bilevel) != H(image=gray)
    assert H(image=Image.new("1", (4, 4), 0)) != H(image=Image.new("L", (4, 4), 0))


def test_rgba_and_cmyk_with_the_same_bytes_differ() -> None:
    raw = bytes(range(16))
    rgba, cmyk = Image.frombytes("RGBA", (2, 2), raw), Image.frombytes("CMYK", (2, 2), raw)
    assert rgba.tobytes() == cmyk.tobytes()
    assert H(image=rgba) != H(image=cmyk)


def test_two_palettes_over_the_same_indices_differ() -> None:
    indices = bytes([0, 1, 1, 0])
    one, two = Image.frombytes("P", (2, 2), indices), Image.frombytes("P", (2, 2), indices)
    one.putpalette([0, 0, 0, 255, 255, 255])
    two.putpalette([255, 0, 0, 0, 0, 255])
    assert one.tobytes() == two.tobytes()
    assert H(image=one) != H(image=two)
    same = Image.frombytes("P", (2, 2), indices)
    same.putpalette([0, 0, 0, 255, 255, 255])
    assert H(image=one) == H(image=same)


def test_an_image_and_its_transpose_differ() -> None:
    image = Image.frombytes("L", (2, 3), bytes(range(6)))
    assert H(image=image) != H(image=image.transpose(Image.Transpose.TRANSPOSE))
    flat = Image.new("L", (2, 3), 7)  # uniform: the transpose has the very same bytes
    transposed = flat.transpose(Image.Transpose.TRANSPOSE)
    assert flat.tobytes() == transposed.tobytes()
    assert H(image=flat) != H(image=transposed)


# --- MediaWithBytes -------------------------------------------------------------------------------


def test_media_with_bytes_hashes_its_encoded_bytes_and_decode_settings() -> None:
    image = Image.new("RGB", (4, 4), "red")
    png = encode(image, "PNG")
    plain = MediaWithBytes(image, png)
    assert H(image=plain) == H(image=MediaWithBytes(Image.new("RGB", (4, 4), "blue"), png))
    assert H(image=plain) != H(image=image)  # the bytes, not the pixels
    converted = MediaWithBytes(image, png, {"image_mode": "L"})
    assert H(image=converted) != H(image=plain)


def test_media_with_bytes_frames_hash_the_smaller_of_frames_and_file() -> None:
    frames = np.zeros((2, 2, 2, 3), np.uint8)  # 24 bytes
    small_file, large_file = b"x" * 10, b"y" * 100
    # A file smaller than its frames: the file is hashed, so equal files hash alike.
    assert H(v=MediaWithBytes(frames, small_file)) == H(v=MediaWithBytes(frames + 1, small_file))
    # Frames smaller than the file: the frames are hashed.
    assert H(v=MediaWithBytes(frames, large_file)) != H(v=MediaWithBytes(frames + 1, large_file))
    assert H(v=MediaWithBytes(frames, large_file)) == H(v=MediaWithBytes(frames, b"z" * 100))


# The digests vLLM 0.33.0's hasher gives these items (computed once with its parser and
# MultiModalHasher.hash_kwargs("blake3", video=...) on the same values).
_FILE_DIGEST = "efc4e6813dd728cadd8494c28709f80bf669789e9f874b40121c5a71a3067660"
_VLLM_VIDEO_DIGESTS = {
    (8, "numpy"): _FILE_DIGEST,
    (8, "torch"): _FILE_DIGEST,
    (2, "numpy"): "1807d0d1ec5e92416dcecc25dee9c75419d8fb664ac0da4ba504e4f5cef722d4",
    (2, "torch"): "ee7b3fac8b1d22e6d60f62343906e257d70c59be4352890f4eb64b359b521717",
}


@pytest.mark.parametrize(("side", "frames_type"), list(_VLLM_VIDEO_DIGESTS))
@pytest.mark.parametrize("needs_metadata", [False, True])
def test_a_video_with_its_bytes_and_metadata_hashes_as_vllms(
    side: int, frames_type: str, needs_metadata: bool
) -> None:
    # MediaWithBytes((frames, metadata), bytes): the frames or the file, whichever is smaller
    # (8x8 frames: the 100-byte file, so numpy and torch frames alike; 2x2: the frames).
    from mediaref.parse import MultiModalDataParser

    frames: Any = np.zeros((2, side, side, 3), np.uint8)
    if frames_type == "torch":
        frames = torch.from_numpy(frames)
    metadata = {
        "total_num_frames": 2,
        "fps": 2.0,
        "duration": 1.0,
        "video_backend": "torchcodec",
        "frames_indices": [0, 1],
        "do_sample_frames": False,
    }
    parser = MultiModalDataParser(video_needs_metadata=needs_metadata)
    items = parser._parse_video_data([MediaWithBytes((frames, metadata), b"x" * 100)])
    assert items is not None
    digest = H(video=items.get_all_items_for_hash()[0])
    assert digest == _VLLM_VIDEO_DIGESTS[side, frames_type]


# --- tensors and arrays ---------------------------------------------------------------------------


def test_tensor_dtype_and_shape_are_part_of_the_hash() -> None:
    as_float = torch.zeros(4, dtype=torch.float32)
    as_int = torch.zeros(4, dtype=torch.int32)
    assert as_float.numpy().tobytes() == as_int.numpy().tobytes()
    assert H(x=as_float) != H(x=as_int)
    assert H(x=torch.zeros(2, 3)) != H(x=torch.zeros(3, 2))
    assert H(x=torch.tensor(1.0)) != H(x=torch.tensor([1.0]))
    assert H(x=torch.arange(6.0)) == H(x=torch.arange(6.0))


def test_bfloat16_tensors_hash_by_their_bytes() -> None:
    a = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    assert H(x=a) == H(x=a.clone()) != H(x=torch.tensor([1.0, 3.0], dtype=torch.bfloat16))
    # float16 with the same bit pattern is a different tensor.
    assert H(x=a) != H(x=a.view(torch.float16))


def test_non_contiguous_tensor_and_array_equal_their_contiguous_copies() -> None:
    tensor = torch.arange(12.0).reshape(3, 4).t()
    assert not tensor.is_contiguous()
    assert H(x=tensor) == H(x=tensor.contiguous())
    array = np.arange(12.0).reshape(3, 4).T
    assert not array.flags.c_contiguous
    assert H(x=array) == H(x=np.ascontiguousarray(array))
    assert H(x=np.arange(12.0)[::2]) == H(x=np.arange(0.0, 12.0, 2.0))


def test_tensors_vllm_cannot_hash_get_a_digest_of_their_values() -> None:
    # vLLM raises on each of these; mediaref hashes the values they hold.
    z = torch.tensor([1 + 2j, 3 - 4j])
    assert H(x=z.conj()) == H(x=z.conj().resolve_conj()) != H(x=z)
    grad = torch.ones(3, requires_grad=True)
    assert H(x=grad) == H(x=torch.ones(3))
    fp8 = torch.tensor([1.0, 2.0]).to(torch.float8_e4m3fn)
    assert H(x=fp8) == H(x=fp8.clone()) != H(x=fp8.view(torch.uint8))


def test_array_dtype_and_shapes() -> None:
    assert H(x=np.array(5)) != H(x=np.array([5]))  # shape () vs (1,)
    assert H(x=np.zeros((2, 3))) != H(x=np.zeros((3, 2)))
    assert H(x=np.zeros(2, np.float32)) != H(x=np.zeros(2, np.int32))
    # A 0-d array hashes its Python value: float32 1.5 as the float 1.5, with its own dtype.
    assert H(x=np.array(1.5, np.float32)) != H(x=np.array(1.5, np.float64))


def test_object_arrays_hash_by_their_elements() -> None:
    # vLLM would hash the element pointers (a different digest every run); mediaref the values.
    one = np.array(["a", 1, None], dtype=object)
    assert H(x=one) == H(x=np.array(["a", 1, None], dtype=object))
    assert H(x=one) != H(x=np.array(["a", 2, None], dtype=object))


def test_tensor_and_array_of_the_same_values_differ() -> None:
    assert H(x=torch.zeros(3)) != H(x=np.zeros(3, np.float32))


# --- scalars, strings, bytes, None ----------------------------------------------------------------


def test_scalar_encodings() -> None:
    # vLLM's leaves carry no type: a str and the bytes of its UTF-8 encoding hash alike, as do
    # an int and its 8 little-endian bytes. The rest differ.
    assert H(x="1") == H(x=b"1")
    assert H(x=1) == H(x=(1).to_bytes(8, "little"))
    hashes = {H(x=v) for v in (1, 1.0, True, "1", None, np.int64(1))}
    assert len(hashes) == 6
    assert H(x=-0.0) != H(x=0.0)
    assert H(x=memoryview(b"ab")) == H(x=b"ab") != H(x=bytearray(b"ab"))  # bytearray: pickled
    strided = memoryview(bytes(range(6)))[::2]
    assert H(x=strided) == H(x=bytes([0, 2, 4]))


def test_integers_beyond_64_bits_hash_deterministically() -> None:
    assert H(x=2**100) == H(x=2**100) != H(x=2**100 + 1)
    assert H(x=-(2**70)) != H(x=2**70)
    # As in vLLM: numpy holds 2**63 as uint64 and -2**63 as int64, with the same eight bytes.
    assert H(x=2**63) == H(x=-(2**63))


def test_none_and_empty_string_differ() -> None:
    assert H(x=None) != H(x="")
    assert H(x="") == H(x=b"")


# --- containers and framing ------------------------------------------------------------------------


def test_framing_cannot_shift_content_between_keys_and_values() -> None:
    assert H(d={"ab": "c"}) != H(d={"a": "bc"})
    assert H(ab="c") != H(a="bc")
    assert H(x=["ab", "c"]) != H(x=["a", "bc"])


def test_nested_dict_and_dotted_key_differ() -> None:
    assert H(a={"b": 1}) != H(**{"a.b": 1})
    assert H(x={"a": {"b": 1}}) != H(x={"a.b": 1})


def test_list_and_dict_differ_but_list_and_tuple_do_not() -> None:
    assert H(x=["p", "q"]) != H(x={"0": "p", "1": "q"})
    assert H(x=["p", "q"]) == H(x=("p", "q"))  # as in vLLM: both are sequences
    assert H(x={0: "p"}) == H(x={"0": "p"})  # as in vLLM: keys are hashed as str(key)


def test_empty_dict_and_absent_differ() -> None:
    assert H(a=1, b={}) != H(a=1)
    assert H(a=1, b=[]) != H(a=1, b={})
    assert H(x={"k": {}}) != H(x={})


def test_keyword_order_does_not_count_but_dict_order_does() -> None:
    assert H(a=1, b=2) == H(b=2, a=1)
    assert H(x={"a": 1, "b": 2}) != H(x={"b": 2, "a": 1})  # as in vLLM


def test_nesting_depth_is_framed() -> None:
    assert H(x=[[1], 2]) != H(x=[[1, 2]])
    assert H(x=[[]]) != H(x=[])


# --- pickle fallback ---------------------------------------------------------------------------------


@dataclass
class Opaque:
    value: int


def test_unknown_objects_fall_back_to_pickle_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="mediaref.hasher"):
        first = H(x=Opaque(1))
    assert "Falling back to pickle" in caplog.text
    assert first == H(x=Opaque(1)) != H(x=Opaque(2))


# --- algorithms ---------------------------------------------------------------------------------------


def test_the_algorithm_is_required_and_positional() -> None:
    hash_kwargs: Any = MultiModalHasher.hash_kwargs
    with pytest.raises(TypeError):
        hash_kwargs(x=1)
    with pytest.raises(TypeError):
        hash_kwargs(algorithm="sha256", x=1)
    # Positional-only: a kwarg named "algorithm" is an entry like any other.
    assert hash_kwargs("sha256", algorithm="blake3") != hash_kwargs("sha256")


def test_algorithms() -> None:
    assert len(H("blake3", x=1)) == 64
    assert len(H("sha256", x=1)) == 64 and H("sha256", x=1) != H("blake3", x=1)
    assert len(H("sha512", x=1)) == 128
    with pytest.raises(ValueError, match="Unsupported hash algorithm: 'md5'"):
        H("md5", x=1)


def test_the_wire_format_is_the_documented_grammar() -> None:
    # Caches shared across processes and with vLLM rely on the encoding staying put, so the
    # stream is rebuilt here by hand from the module docstring's grammar.
    import hashlib

    def length(n: int) -> bytes:
        return n.to_bytes(8, "little")

    stream = (
        framed(b"image")  # entries sort by key: "image" < "model_id"
        + b"\x01"
        + length(2)
        + b"\x03"
        + framed(np.array(1).tobytes())
        + b"\x00"
        + framed(b"model_id")
        + b"\x03"
        + framed(b"m")
    )
    assert H("sha256", model_id="m", image=[1, None]) == hashlib.sha256(stream).hexdigest()


def test_serialize_item_and_iter_item_to_bytes() -> None:
    assert b"".join(MultiModalHasher.serialize_item("é")) == framed("é".encode())
    chunks = b"".join(bytes(c) for c in MultiModalHasher.iter_item_to_bytes("k", "v"))
    assert chunks == framed(b"k") + b"\x03" + framed(b"v")
    assert b"".join(MultiModalHasher.iter_value_to_bytes({"a": None})) == (
        b"\x02" + (1).to_bytes(8, "little") + framed(b"a") + b"\x00"
    )
