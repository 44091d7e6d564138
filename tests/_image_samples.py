"""Image payloads for the image decoder's tests: scikit-image's sample files and crafted bytes.

Crafted payloads are built at the byte level where Pillow would refuse to write them (headers
declaring more pixels than the body holds, which is what a decompression bomb looks like).

:func:`encode` is the one way the tests turn a Pillow image into encoded bytes (PNG, JPEG, ...):
a test that needs a small picture builds it with Pillow or numpy and encodes it here.
"""

from __future__ import annotations

import functools
import io
import struct
import wave
import zlib
from pathlib import Path

import numpy as np
import skimage.data
from PIL import Image

# skimage.data.data_dir points at a download cache; the files shipped with the wheel live here.
SKIMAGE_DATA = Path(skimage.data.__file__).parent

RGB_SAMPLES = (
    "astronaut.png",
    "chelsea.png",
    "coffee.png",
    "rocket.jpg",
    "retina.jpg",
    "hubble_deep_field.jpg",
)
GRAYSCALE_SAMPLE = "camera.png"
ANIMATED_GIF_SAMPLE = "no_time_for_that_tiny.gif"

EXIF_IFD = 0x8769
EXIF_IMAGE_ID = 0x800D  # IFD0's ImageID: the identity vLLM's hasher reads
EXIF_IMAGE_UNIQUE_ID = 0xA420  # the Exif IFD's ImageUniqueID: not an identity mediaref keys on
EXIF_ORIENTATION = 0x0112


def sample_path(name: str) -> Path:
    return SKIMAGE_DATA / name


def sample_bytes(name: str) -> bytes:
    return sample_path(name).read_bytes()


def encode(image: Image.Image, image_format: str, **save_options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, image_format, **save_options)
    return buffer.getvalue()


def exif_block(
    *,
    image_id: str | None = None,
    orientation: int | None = None,
    image_unique_id: str | None = None,
) -> bytes:
    """An EXIF block (as Pillow's ``exif=`` save option takes it) with the given tags.

    ``image_id`` is IFD0's ImageID (0x800D); ``image_unique_id`` the Exif IFD's ImageUniqueID.
    """
    exif = Image.Exif()
    if orientation is not None:
        exif[EXIF_ORIENTATION] = orientation
    if image_id is not None:
        exif[EXIF_IMAGE_ID] = image_id
    if image_unique_id is not None:
        exif.get_ifd(EXIF_IFD)[EXIF_IMAGE_UNIQUE_ID] = image_unique_id
    return exif.tobytes()


def gradient_rgb(width: int, height: int) -> Image.Image:
    """An asymmetric picture: every pixel differs from its mirror images and rotations."""
    ys, xs = np.mgrid[0:height, 0:width]
    pixels = np.stack(
        [xs * 255 // max(width - 1, 1), ys * 255 // max(height - 1, 1), (xs * 7 + ys * 13) % 256],
        axis=-1,
    )
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


def semi_transparent_rgba() -> Image.Image:
    """4x1 RGBA: opaque red, half-transparent green, fully transparent blue, opaque white."""
    pixels = np.array(
        [[[255, 0, 0, 255], [0, 255, 0, 128], [0, 0, 255, 0], [255, 255, 255, 255]]],
        dtype=np.uint8,
    )
    return Image.fromarray(pixels, "RGBA")


def two_frame_animation(image_format: str) -> bytes:
    """A red frame then a blue frame, 8x8, in an animated ``image_format`` (GIF, PNG, WEBP)."""
    frames = [Image.new("RGB", (8, 8), color) for color in ((255, 0, 0), (0, 0, 255))]
    options: dict[str, object] = {"save_all": True, "append_images": frames[1:], "duration": 100}
    if image_format == "WEBP":
        options["lossless"] = True
    return encode(frames[0], image_format, **options)


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


@functools.cache
def png_bomb(width: int, height: int) -> bytes:
    """A valid all-black 1-bit PNG of ``width`` x ``height``: ~110 KB on disk for 30000x30000."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit grayscale
    row = b"\x00" * (1 + (width + 7) // 8)  # filter byte + packed bits
    compressor = zlib.compressobj(9)
    rows_per_chunk = 1000
    parts = [compressor.compress(row * rows_per_chunk) for _ in range(height // rows_per_chunk)]
    parts.append(compressor.compress(row * (height % rows_per_chunk)))
    parts.append(compressor.flush())
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", b"".join(parts))
        + _png_chunk(b"IEND", b"")
    )


def jpeg_claiming_size(width: int, height: int) -> bytes:
    """A 16x16 baseline JPEG whose frame header (SOF0) declares ``width`` x ``height``."""
    data = bytearray(encode(Image.new("RGB", (16, 16), (90, 120, 150)), "JPEG"))
    sof = data.index(b"\xff\xc0")
    # SOF0: marker(2) length(2) precision(1) height(2) width(2)
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def webp_claiming_size(width: int, height: int) -> bytes:
    """A lossless 16x16 WebP whose VP8L header declares ``width`` x ``height`` (at most 16384)."""
    data = bytearray(encode(Image.new("RGB", (16, 16), (10, 200, 30)), "WEBP", lossless=True))
    assert data[12:16] == b"VP8L" and data[20] == 0x2F
    # After the 0x2F signature: 14 bits width-1, 14 bits height-1, alpha bit, 3 version bits.
    bits = int.from_bytes(data[21:25], "little")
    bits = (bits & ~((1 << 28) - 1)) | (width - 1) | ((height - 1) << 14)
    data[21:25] = bits.to_bytes(4, "little")
    return bytes(data)


def wav_bytes() -> bytes:
    """A tenth of a second of silent 8 kHz mono PCM: a valid file, but not an image."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(8000)
        writer.writeframes(b"\x00\x00" * 800)
    return buffer.getvalue()
