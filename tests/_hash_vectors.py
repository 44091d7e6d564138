"""Hash test vectors described as data, and the one builder that turns a description into a value.

``scripts/vllm_hash_vectors.py`` builds each input in the vLLM 0.33.0 venv, hashes it with vLLM's
``MultiModalHasher`` and writes the digests to ``tests/data/vllm_0_33_hash_vectors.json``;
``tests/test_hasher_vllm_vectors.py`` builds the same inputs here and checks mediaref's digests.
Both sides use :func:`build`, so an input cannot drift between them; only the ``MediaWithBytes``
class differs (vLLM's or mediaref's), passed in by the caller.

A description is a one-key dict: ``{"str": "a"}``, ``{"ndarray": {...}}``, ``{"list": [...]}``...
(see :func:`build`). Everything is generated; nothing is random.
"""

from __future__ import annotations

import io
import uuid
from typing import Any

import numpy as np
import torch
from PIL import ExifTags, Image

IMAGE_ID = "8d2f7c3a-5b1e-4f60-9a47-2c3d4e5f6a7b"


def _ramp(count: int, dtype: Any) -> np.ndarray:
    values = np.arange(count, dtype=np.float64) * 1.25 - 3.0
    if np.issubdtype(np.dtype(dtype), np.bool_):
        return (np.arange(count) % 3 == 0).astype(dtype)
    if np.issubdtype(np.dtype(dtype), np.unsignedinteger):
        return (np.arange(count) * 7 % 251).astype(dtype)
    if np.issubdtype(np.dtype(dtype), np.integer):
        return (np.arange(count) * 37 - 50).astype(dtype)
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
        return (values + 1j * values[::-1]).astype(dtype)
    if np.dtype(dtype).kind == "U":
        return np.array([f"s{i}é" for i in range(count)], dtype=dtype)
    return values.astype(dtype)


def _reshape(flat: Any, spec: dict[str, Any]) -> Any:
    value = flat.reshape(spec["shape"])
    for step in spec.get("views", []):
        if step == "T":
            value = value.T if isinstance(value, np.ndarray) else value.transpose(0, -1)
        elif step == "stride":
            value = value[::2]
        elif step == "fortran":
            value = np.asfortranarray(value)
        else:
            raise ValueError(f"unknown view {step!r}")
    return value


def _ndarray(spec: dict[str, Any]) -> np.ndarray:
    dtype = (
        np.dtype(spec["dtype"])
        if "fields" not in spec
        else np.dtype([(name, kind) for name, kind in spec["fields"]])
    )
    count = int(np.prod(spec["shape"]))
    if dtype.fields is not None:
        flat = np.zeros(count, dtype=dtype)
        for index, name in enumerate(dtype.names or ()):
            flat[name] = np.arange(count) + index
    else:
        flat = _ramp(count, dtype)
    return _reshape(flat, spec)  # type: ignore[no-any-return]


def _tensor(spec: dict[str, Any]) -> torch.Tensor:
    dtype = getattr(torch, spec["dtype"])
    count = int(np.prod(spec["shape"]))
    if dtype is torch.bool:
        flat = torch.arange(count) % 3 == 0
    elif dtype.is_complex:
        flat = torch.complex(torch.arange(count) * 0.5, -torch.arange(count) * 0.25).to(dtype)
    elif dtype.is_floating_point:
        flat = (torch.arange(count, dtype=torch.float64) * 0.375 - 2).to(dtype)
    else:
        flat = (torch.arange(count) * 13 % 97).to(dtype)
    return _reshape(flat, spec)  # type: ignore[no-any-return]


def _pixels(mode: str, size: tuple[int, int]) -> Image.Image:
    width, height = size
    ramp = (np.arange(width * height * 4, dtype=np.uint32) * 29 % 256).astype(np.uint8)
    if mode in ("RGB", "RGBA", "CMYK", "YCbCr", "LA", "L"):
        bands = len(mode) if mode != "YCbCr" else 3
        return Image.frombytes(mode, size, ramp[: width * height * bands].tobytes())
    if mode == "1":
        return Image.frombytes("L", size, ramp[: width * height].tobytes()).convert("1")
    if mode in ("P", "PA"):
        image = Image.frombytes("L", size, (ramp[: width * height] % 6).tobytes()).convert("P")
        image.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 0, 9, 8, 7])
        return image.convert("PA") if mode == "PA" else image
    if mode in ("I;16", "I", "F"):
        values = np.arange(width * height, dtype=np.float64).reshape(height, width) * 301.5
        kind = {"I;16": np.uint16, "I": np.int32, "F": np.float32}[mode]
        image = Image.fromarray(values.astype(kind))
        assert image.mode == mode, image.mode
        return image
    raise ValueError(f"unknown image mode {mode!r}")


def _image(spec: dict[str, Any]) -> Image.Image:
    image = _pixels(spec["mode"], tuple(spec.get("size", (5, 3))))  # type: ignore[arg-type]
    if "transparency" in spec:  # a transparent palette index or colour key
        image.info["transparency"] = spec["transparency"]
    if "reencode" in spec:  # a file-backed image, as a user would open it
        buffer = io.BytesIO()
        options: dict[str, Any] = {}
        if "orientation" in spec:
            exif = Image.Exif()
            exif[ExifTags.Base.Orientation] = spec["orientation"]
            options["exif"] = exif.tobytes()
        image.save(buffer, format=spec["reencode"], **options)
        image = Image.open(io.BytesIO(buffer.getvalue()))
    if "image_id" in spec:
        value = spec["image_id"]
        image.getexif()[ExifTags.Base.ImageID] = (
            uuid.UUID(value["uuid"]) if "uuid" in value else value["text"]
        )
    return image


def _encoded(image: Image.Image, image_format: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=image_format)
    return buffer.getvalue()


def build(desc: Any, media_with_bytes: type) -> Any:
    """The value ``desc`` describes; ``media_with_bytes`` is the ``MediaWithBytes`` class."""
    ((kind, body),) = desc.items()
    if kind == "none":
        return None
    if kind in ("str", "bool"):
        return body
    if kind == "int":
        return int(body)
    if kind == "float":
        return float.fromhex(body)
    if kind == "bytes":
        return bytes.fromhex(body)
    if kind == "memoryview":
        return memoryview(bytes.fromhex(body))
    if kind == "bytearray":
        return bytearray.fromhex(body)
    if kind == "complex":
        return complex(*body)
    if kind == "numpy_scalar":  # np.float64 is a float; the others fall back to pickle
        dtype, text = body
        return np.dtype(dtype).type(text)
    if kind == "ndarray":
        return _ndarray(body)
    if kind == "tensor":
        return _tensor(body)
    if kind == "image":
        return _image(body)
    if kind == "list":
        return [build(element, media_with_bytes) for element in body]
    if kind == "tuple":
        return tuple(build(element, media_with_bytes) for element in body)
    if kind == "dict":
        return {key: build(value, media_with_bytes) for key, value in body}
    if kind == "media_with_bytes":
        media = build(body["media"], media_with_bytes)
        if "encode_as" in body:
            original = _encoded(media, body["encode_as"])
        else:
            original = bytes.fromhex(body["original_bytes"])
        return media_with_bytes(media, original, body.get("io_config"))
    raise ValueError(f"unknown input kind {kind!r}")


def _a(dtype: str, shape: list[int], **extra: Any) -> dict[str, Any]:
    return {"ndarray": {"dtype": dtype, "shape": shape, **extra}}


def _t(dtype: str, shape: list[int], **extra: Any) -> dict[str, Any]:
    return {"tensor": {"dtype": dtype, "shape": shape, **extra}}


def _img(mode: str, **extra: Any) -> dict[str, Any]:
    return {"image": {"mode": mode, **extra}}


SCALARS: dict[str, Any] = {
    "bytes": {"bytes": "00ff10"},
    "bytes-empty": {"bytes": ""},
    "memoryview": {"memoryview": "0102030405"},
    "bytearray": {"bytearray": "0a0b"},
    "str": {"str": "a cat on a mat"},
    "str-unicode": {"str": "猫 é ✓"},
    "str-empty": {"str": ""},
    "int-zero": {"int": "0"},
    "int-negative": {"int": "-7"},
    "int-large": {"int": str(2**40 + 3)},
    "int-uint64": {"int": str(2**63 + 5)},
    "bool-true": {"bool": True},
    "bool-false": {"bool": False},
    "float": {"float": (1.5).hex()},
    "float-negative-zero": {"float": (-0.0).hex()},
    "float-inf": {"float": float("inf").hex()},
    "float-nan": {"float": float("nan").hex()},
    "none": {"none": None},
    "complex-pickled": {"complex": [1.0, -2.0]},
    "numpy-float64": {"numpy_scalar": ["float64", "2.5"]},
    "numpy-float32-pickled": {"numpy_scalar": ["float32", "1.5"]},
    "numpy-int64-pickled": {"numpy_scalar": ["int64", "5"]},
    "numpy-bool-pickled": {"numpy_scalar": ["bool", "1"]},
}

ARRAYS: dict[str, Any] = {
    "uint8-hwc": _a("uint8", [3, 4, 3]),
    "int32": _a("<i4", [5]),
    "int64-2d": _a("<i8", [2, 3]),
    "big-endian-int32": _a(">i4", [4]),
    "float16": _a("<f2", [3, 2]),
    "float32": _a("<f4", [2, 2, 2]),
    "float64": _a("<f8", [6]),
    "complex128": _a("<c16", [3]),
    "bool": _a("|b1", [7]),
    "unicode": _a("<U3", [3]),
    "zero-d-float": _a("<f8", []),
    "zero-d-int": _a("<i4", []),
    "empty": _a("<f4", [0, 3]),
    "transposed": _a("<f4", [3, 4], views=["T"]),
    "strided": _a("<i8", [6, 2], views=["stride"]),
    "fortran-order": _a("<f8", [3, 5], views=["fortran"]),
    "structured": {"ndarray": {"fields": [["x", "<i4"], ["y", "<f4"]], "shape": [3]}},
}

TENSORS: dict[str, Any] = {
    "float32": _t("float32", [2, 3]),
    "float16": _t("float16", [4]),
    "bfloat16": _t("bfloat16", [3, 2]),
    "bfloat16-zero-d": _t("bfloat16", []),
    "bfloat16-transposed": _t("bfloat16", [2, 3], views=["T"]),
    "float64-zero-d": _t("float64", []),
    "int64": _t("int64", [5]),
    "uint8-chw": _t("uint8", [3, 2, 4]),
    "bool": _t("bool", [6]),
    "complex64": _t("complex64", [3]),
    "empty": _t("float32", [0, 4]),
    "transposed": _t("float32", [3, 4], views=["T"]),
    "strided": _t("int32", [6, 2], views=["stride"]),
}

IMAGES: dict[str, Any] = {
    "rgb": _img("RGB"),
    "rgba": _img("RGBA"),
    "l": _img("L"),
    "la": _img("LA"),
    "bilevel": _img("1", size=[9, 2]),
    "cmyk": _img("CMYK"),
    "ycbcr": _img("YCbCr"),
    "palette": _img("P"),
    "palette-alpha": _img("PA"),
    "int16": _img("I;16"),
    "int32": _img("I"),
    "float": _img("F"),
    "png-rgb": _img("RGB", reencode="PNG"),
    "png-palette": _img("P", reencode="PNG"),
    "gif-palette": _img("P", reencode="GIF"),
    "jpeg": _img("RGB", size=[16, 8], reencode="JPEG"),
    "exif-image-id-uuid": _img("RGB", image_id={"uuid": IMAGE_ID}),
    "exif-image-id-uuid-other-pixels": _img("L", image_id={"uuid": IMAGE_ID}),
    "exif-image-id-text": _img("RGB", image_id={"text": IMAGE_ID}),
}

MEDIA_WITH_BYTES: dict[str, Any] = {
    "image": {"media_with_bytes": {"media": _img("RGB"), "encode_as": "PNG"}},
    "image-io-config": {
        "media_with_bytes": {
            "media": _img("RGB"),
            "encode_as": "PNG",
            "io_config": {"image_mode": "RGB", "rgba_background_color": [255, 255, 255]},
        }
    },
    "image-with-id": {
        "media_with_bytes": {"media": _img("RGB", image_id={"uuid": IMAGE_ID}), "encode_as": "PNG"}
    },
    "frames-smaller-than-file": {
        "media_with_bytes": {"media": _a("uint8", [2, 2, 2, 3]), "original_bytes": "ab" * 64}
    },
    "frames-larger-than-file": {
        "media_with_bytes": {"media": _t("uint8", [2, 3, 4, 4]), "original_bytes": "cd" * 8}
    },
}

CONTAINERS: dict[str, Any] = {
    "list": {"list": [{"int": "1"}, {"str": "a"}, {"none": None}]},
    "tuple": {"tuple": [{"int": "1"}, {"str": "a"}, {"none": None}]},
    "empty-list": {"list": []},
    "nested": {"list": [{"list": [{"int": "1"}]}, {"tuple": []}, {"dict": []}]},
    "dict": {"dict": [["b", {"int": "2"}], ["a", {"float": (0.5).hex()}]]},
    "dict-reordered": {"dict": [["a", {"float": (0.5).hex()}], ["b", {"int": "2"}]]},
    "dict-nested": {"dict": [["outer", {"dict": [["inner", {"list": [{"bool": True}]}]]}]]},
    "mixed-media": {
        "list": [
            _img("RGB"),
            _t("bfloat16", [2, 2]),
            _a("<f4", [2, 2], views=["T"]),
            {"dict": [["rate", {"float": (16000.0).hex()}], ["raw", {"bytes": "beef"}]]},
        ]
    },
}


def _meta(frames: int, fps: float) -> dict[str, Any]:
    return {
        "dict": [
            ["fps", {"float": fps.hex()}],
            ["total_num_frames", {"int": str(frames)}],
            ["frames_indices", {"list": [{"int": str(i)} for i in range(frames)]}],
        ]
    }


_FRAMES = [_img("RGB", size=[4, 2]), _img("RGB", size=[4, 2]), _img("RGB", size=[4, 2])]

PARSED: dict[str, dict[str, Any]] = {
    "image/rgb": {"modality": "image", "data": _img("RGB")},
    "image/l": {"modality": "image", "data": _img("L")},
    "image/rgba": {"modality": "image", "data": _img("RGBA")},
    "image/la": {"modality": "image", "data": _img("LA")},
    "image/palette": {"modality": "image", "data": _img("P")},
    "image/palette-transparent": {"modality": "image", "data": _img("P", transparency=1)},
    "image/cmyk": {"modality": "image", "data": _img("CMYK")},
    "image/int16": {"modality": "image", "data": _img("I;16")},
    "image/png-palette": {"modality": "image", "data": _img("P", reencode="PNG")},
    "image/jpeg-rotated": {
        "modality": "image",
        "data": _img("RGB", size=[6, 4], reencode="JPEG", orientation=6),
    },
    "image/list": {"modality": "image", "data": {"list": [_img("RGB"), _img("L", size=[2, 7])]}},
    "image/hwc-array": {"modality": "image", "data": _a("uint8", [3, 4, 3])},
    "image/chw-tensor": {"modality": "image", "data": _t("uint8", [3, 4, 5])},
    "image/array-batch": {"modality": "image", "data": _a("uint8", [2, 3, 4, 3])},
    "video/pil-frames": {"modality": "video", "data": {"list": _FRAMES}},
    "video/array": {"modality": "video", "data": _a("uint8", [3, 2, 4, 3])},
    "video/tensor": {"modality": "video", "data": _t("uint8", [3, 3, 2, 4])},
    "video/with-metadata": {
        "modality": "video",
        "data": {"tuple": [_a("uint8", [3, 2, 4, 3]), _meta(3, 2.0)]},
    },
    "video/with-metadata-needed": {
        "modality": "video",
        "parser": {"video_needs_metadata": True},
        "data": {"tuple": [_a("uint8", [3, 2, 4, 3]), _meta(3, 2.0)]},
    },
    "video/media-with-bytes-and-metadata": {
        "modality": "video",
        "data": {
            "tuple": [
                {
                    "media_with_bytes": {
                        "media": _a("uint8", [2, 2, 2, 3]),
                        "original_bytes": "ee" * 40,
                    }
                },
                _meta(2, 1.0),
            ]
        },
    },
    "audio/array": {"modality": "audio", "data": _a("<f4", [16])},
    "audio/list": {
        "modality": "audio",
        "data": {"list": [{"float": (0.25 * i).hex()} for i in range(5)]},
    },
    "audio/tensor": {"modality": "audio", "data": _t("float32", [12])},
    "audio/batch": {"modality": "audio", "data": _a("<f8", [2, 8])},
}
"""Inputs to parse first: each item's digest is of what the parser hands the hasher
(``get_item_for_hash``), so the parse layer's normalizations count too."""


def vectors() -> list[tuple[str, dict[str, Any]]]:
    """``(name, kwargs description)`` of every vector: one per value (under ``"x"``, with a
    ``model_id``), plus multi-key kwargs the way the processor hashes an item."""
    out: list[tuple[str, dict[str, Any]]] = []
    for group, values in (
        ("scalar", SCALARS),
        ("ndarray", ARRAYS),
        ("tensor", TENSORS),
        ("image", IMAGES),
        ("media-with-bytes", MEDIA_WITH_BYTES),
        ("container", CONTAINERS),
    ):
        for name, desc in values.items():
            out.append((f"{group}/{name}", {"model_id": {"str": "org/model"}, "x": desc}))
    out.append(
        (
            "kwargs/processor-item",
            {
                "model_id": {"str": "Qwen/Qwen2-VL-2B-Instruct"},
                "image": IMAGES["rgb"],
                "mm_processor_kwargs": {
                    "dict": [["max_pixels", {"int": "12845056"}], ["fps", {"float": (2.0).hex()}]]
                },
            },
        )
    )
    out.append(("kwargs/empty", {}))
    return out


__all__ = ["PARSED", "build", "vectors"]
