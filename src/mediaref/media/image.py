"""Image decoding with Pillow: the header at fetch time, the pixels at decode time.

:meth:`ImageMediaIO.load_bytes_ref` parses the header eagerly. That is enough to enforce
``VLLM_MAX_IMAGE_PIXELS`` before a single pixel is allocated (so a decompression bomb fails at
fetch time with :class:`~mediaref.exceptions.MediaTooLargeError`) and to read an EXIF ImageID,
which, when present, becomes the ref's key in place of a digest of the bytes. A header that will
not parse is left for decode time, where it fails like any other corrupt image::

    ValueError("Failed to decode image: <reason>")

Decoding takes the first frame of animated formats, applies the EXIF orientation, then converts
to ``image_mode``, compositing transparency onto ``rgba_background_color`` when the target mode
has no alpha band. Every one of those settings is in the decode spec, hence in the key.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import ClassVar

import pybase64
from PIL import Image, ImageMode

from mediaref import envs
from mediaref.exceptions import MediaTooLargeError
from mediaref.media._image_header import (
    ImageHeader,
    check_pillow_refusal,
    check_pixel_limit,
    jpeg_header,
    open_image_header,
    read_exif_image_id,
    webp_header,
)
from mediaref.media._image_pixels import BackgroundColor, convert_image_mode, decode_first_frame
from mediaref.media.base import DecodeSpec, MediaIO, MediaRef, derive_identity_key

_EXIF_IMAGE_ID_KIND = "exif-image-id"


class ImageMediaIO(MediaIO[Image.Image]):
    """Decodes encoded images into ``PIL.Image.Image`` objects in ``image_mode``.

    ``rgba_background_color`` is what transparent pixels become when ``image_mode`` has no alpha
    band: three ints in 0..255.
    """

    modality: ClassVar[str] = "image"

    def __init__(
        self,
        image_mode: str = "RGB",
        *,
        rgba_background_color: Sequence[int] = (255, 255, 255),
    ) -> None:
        self.image_mode = _validated_image_mode(image_mode)
        self.rgba_background_color = _validated_background_color(rgba_background_color)
        self._spec = DecodeSpec(
            modality=self.modality,
            decoder="pillow",
            image_mode=self.image_mode,
            rgba_background_color=list(self.rgba_background_color),
            exif_transpose=True,
            frame=0,
        )

    def get_decode_spec(self) -> DecodeSpec:
        return self._spec

    def get_max_bytes(self) -> int | None:
        return envs.size_cap_bytes("MEDIAREF_MAX_IMAGE_FILESIZE_MB")

    def load_bytes(self, data: bytes) -> Image.Image:
        try:
            header = open_image_header(data)
        except MediaTooLargeError:
            raise
        except Exception as exc:
            raise _decode_failure(exc) from exc
        return self._decode_header(header)

    def load_bytes_ref(self, data: bytes) -> MediaRef[Image.Image]:
        """A ref keyed by the EXIF ImageID when the header has one, else by the bytes.

        Raises :class:`MediaTooLargeError` for an oversized payload or pixel count; nothing else
        about the image fails here.
        """
        self.check_encoded_size(len(data))
        # WebP and JPEG say what a key needs in their container headers, more cheaply than a
        # Pillow open; the pixels (and Pillow's own header parse) wait for the decode.
        webp = webp_header(data)
        container = webp or jpeg_header(data)
        if container is not None:
            size, image_id = container
            check_pixel_limit(size)
            if webp is not None:
                check_pillow_refusal(size)  # Pillow's WebP plugin refuses these inside its open
            return MediaRef(data, lambda: self.load_bytes(data), self._spec, key=self._key_for(image_id))
        try:
            header = open_image_header(data)
        except MediaTooLargeError:
            raise
        except Exception:  # noqa: BLE001
            # Left for decode time, where this failure surfaces with the other decode failures.
            return MediaRef(data, lambda: self.load_bytes(data), self._spec)
        key = self._key_for(read_exif_image_id(header.image))
        # The closure holds only the header (and, through it, a view of the payload); MediaRef
        # drops it after the decode or on release.
        return MediaRef(data, lambda: self._decode_header(header), self._spec, key=key)

    def _key_for(self, image_id: bytes | None) -> bytes | None:
        """The EXIF ImageID key, or None to let the ref key off its bytes."""
        if image_id is None:
            return None
        return derive_identity_key(_EXIF_IMAGE_ID_KIND, image_id, self._spec)

    def encode_base64(self, media: Image.Image, *, image_format: str = "PNG") -> str:
        """``media`` in ``image_mode``, encoded as ``image_format`` and base64 (vLLM's helper)."""
        image = convert_image_mode(media, self.image_mode, self.rgba_background_color)
        with io.BytesIO() as buffer:
            image.save(buffer, image_format)
            return pybase64.b64encode(buffer.getvalue()).decode("ascii")

    def _decode_header(self, header: ImageHeader) -> Image.Image:
        try:
            return decode_first_frame(header.image, self.image_mode, self.rgba_background_color)
        except MemoryError:
            raise  # the server's problem, not the payload's
        except Exception as exc:
            raise _decode_failure(exc) from exc
        finally:
            header.close()

    def __repr__(self) -> str:
        return (
            f"ImageMediaIO(image_mode={self.image_mode!r}, "
            f"rgba_background_color={self.rgba_background_color!r})"
        )


def _decode_failure(exc: Exception) -> ValueError:
    """The one mapping of Pillow's (and its plugins') exceptions for a payload that won't decode."""
    return ValueError(f"Failed to decode image: {str(exc) or type(exc).__name__}")


def _validated_image_mode(mode: str) -> str:
    try:
        ImageMode.getmode(mode)
    except (KeyError, TypeError):
        raise ValueError(
            f"image_mode must be a Pillow image mode such as 'RGB', got {mode!r}"
        ) from None
    return mode


def _validated_background_color(color: Sequence[int]) -> BackgroundColor:
    if (
        not isinstance(color, (tuple, list))
        or len(color) != 3
        or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in color)
    ):
        raise ValueError(
            "rgba_background_color must be a list or tuple of 3 integers in the range "
            f"[0, 255], got {color!r}"
        )
    return (color[0], color[1], color[2])


__all__ = ["ImageMediaIO"]
