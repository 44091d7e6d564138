"""Image decoding with Pillow: the header at fetch time, the pixels at decode time.

:meth:`ImageMediaIO.load_bytes_ref` reads the header eagerly and never rasterizes. For JPEG, PNG
and WebP it reads the container bytes itself; for GIF and BMP, Pillow's header parse. That is
enough to refuse, at fetch time and before a single pixel is allocated:

- an oversized payload or more pixels than ``VLLM_MAX_IMAGE_PIXELS`` (a decompression bomb):
  :class:`~mediaref.exceptions.MediaTooLargeError`, HTTP 413;
- a format outside JPEG, PNG, GIF, WebP and BMP, a JPEG with more scans, or a file with more
  header segments, than any encoder writes:
  :class:`~mediaref.exceptions.VLLMUnprocessableEntityError`, HTTP 422, the status of any image
  that will not decode (see ``_image_header`` for why each other format is refused).

Bytes that no accepted format recognises are left for decode time, where they fail like any
corrupt image, ``ValueError("Failed to load image: <reason>")``, which the processor reports as
a 422 naming the item. A failure that is not the payload's (``MemoryError``...) propagates as
itself and a later decode tries again.

**Keys and the EXIF ImageID.** A ref's key is a digest of its bytes, unless the image carries an
EXIF ImageID (tag 0x800D in IFD0, as vLLM's hasher reads it) and the decoder trusts it: then the
key is derived from that ID, so two encodings of one picture share a cache entry. This is the same
trust model as client-supplied ``multi_modal_uuids``: whoever can send an image can choose its
identity, and thereby what another client's image carrying the same ID is answered with. A
multi-tenant deployment turns it off (``trust_exif_image_id=False``, or
``MEDIAREF_TRUST_EXIF_IMAGE_ID=0``, read when each ref is built; the default, on, is vLLM's
behaviour), and every image then keys off its bytes.

**Decoding** takes the first frame of animated formats, applies the EXIF orientation, then converts
to ``image_mode`` (None: the image keeps its own mode) with :func:`mediaref.image.convert_image_mode`,
compositing transparency onto ``rgba_background_color`` when the target mode has no alpha band;
every one of those settings is in the decode spec, hence in the key. Before it
rasterizes, the decode charges what the raster takes (4 bytes a pixel and a pointer a row) to the
request's decoded-bytes budget (``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES``, see ``decode_budget``):
``decoded_budget=`` when given, else the budget of the request whose decode is running.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from typing import Any, ClassVar

import pybase64
from PIL import Image, ImageMode

from mediaref import envs
from mediaref.exceptions import MediaRefError
from mediaref.image import normalize_image, open_image
from mediaref.media._embedding_io import MAGIC_NUMPY_PREFIX, EmbeddingMediaIO
from mediaref.media.base import (
    DecodeSpec,
    EncodedImageHashView,
    MediaIO,
    MediaRef,
    MediaWithBytes,
    derive_identity_key,
)
from mediaref.media.decode_budget import MediaDecodedBudget, charge_decoded_bytes
from mediaref.media.image._containers import (
    WEBP_HEADER_BYTES,
    gif_header,
    jpeg_header,
    png_header,
    webp_canvas_size,
    webp_header,
)
from mediaref.media.image._header import (
    PAYLOAD_ERRORS,
    ImageHeader,
    check_container_header,
    check_header_segments,
    check_pixel_limit,
    image_id_from_exif_block,
    open_image_header,
    pillow_refusal,
    read_exif_image_id,
)
from mediaref.media.image._pixels import (
    BackgroundColor,
    convert_image_mode,
    decode_first_frame,
    decoded_image_bytes,
)
from mediaref.media.image._upright_size import read_jpeg_upright_size
from mediaref.media.sparse_utils import (  # vLLM's modules hold it too; one function for all
    check_sparse_tensor_invariants_threadsafe as check_sparse_tensor_invariants_threadsafe,
)

_EXIF_IMAGE_ID_KIND = "exif-image-id"


def _is_transparent(image: Image.Image) -> bool:
    """Whether ``image`` carries transparency (an alpha band, or a ``transparency`` entry)."""
    return image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info


class ImageMediaIO(MediaIO[Image.Image]):
    """Decodes encoded images into ``PIL.Image.Image`` objects in ``image_mode``.

    ``image_mode`` None keeps each image's own mode (alpha included), as in vLLM.
    ``rgba_background_color`` is what transparent pixels become when ``image_mode`` has no alpha
    band: three ints in 0..255. ``trust_exif_image_id`` says whether an EXIF ImageID may stand
    for the image in its key (None: ``MEDIAREF_TRUST_EXIF_IMAGE_ID`` when a ref is built).
    ``decoded_budget`` (vLLM's argument) is the budget every decode charges, in place of the
    running request's; it never changes the output, so it is not in the spec. Any other keyword
    (vLLM passes the rest of ``--media-io-kwargs`` through for custom decoders) is kept in
    ``kwargs`` and, since a subclass may decode by it, counted in the spec: it must be a JSON
    value.

    ``load_bytes`` returns the image itself, not vLLM's ``MediaWithBytes`` wrapper: fetched
    images travel as a ``MediaRef`` whose key already stands for the bytes.
    """

    modality: ClassVar[str] = "image"

    def __init__(
        self,
        image_mode: str | None = "RGB",
        *,
        rgba_background_color: Sequence[int] = (255, 255, 255),
        trust_exif_image_id: bool | None = None,
        decoded_budget: MediaDecodedBudget | None = None,
        **kwargs: Any,
    ) -> None:
        self.image_mode = _validated_image_mode(image_mode)
        self.rgba_background_color = _validated_background_color(rgba_background_color)
        if trust_exif_image_id is not None and not isinstance(trust_exif_image_id, bool):
            raise ValueError(
                f"trust_exif_image_id must be a bool or None, got {trust_exif_image_id!r}"
            )
        self.trust_exif_image_id = trust_exif_image_id
        self.decoded_budget = decoded_budget
        self.kwargs = dict(kwargs)
        settings: dict[str, Any] = {
            "modality": self.modality,
            "decoder": "pillow",
            "image_mode": self.image_mode,
            "rgba_background_color": list(self.rgba_background_color),
            "exif_transpose": True,
            "frame": 0,
        }
        if self.kwargs:
            settings["kwargs"] = self.kwargs
        self._spec = DecodeSpec(settings)

    def get_decode_spec(self) -> DecodeSpec:
        return self._spec

    def get_max_bytes(self) -> int | None:
        return envs.size_cap_bytes("MEDIAREF_MAX_IMAGE_FILESIZE_MB")

    def trusts_exif_image_id(self) -> bool:
        """This decoder's ``trust_exif_image_id``, or the setting when it was left to it."""
        if self.trust_exif_image_id is not None:
            return self.trust_exif_image_id
        return bool(envs.MEDIAREF_TRUST_EXIF_IMAGE_ID)

    def load_bytes(self, data: bytes) -> Image.Image:
        # libwebp reserves its canvas when Pillow opens a WebP, so a WebP is charged before
        # the open, at the canvas size its RIFF header declares; other formats after it.
        canvas = webp_canvas_size(data[:WEBP_HEADER_BYTES])
        if canvas is not None:
            check_pixel_limit(canvas)
            self._charge(canvas)
        try:
            header = open_image_header(data, for_decode=True)
        except MediaRefError:
            raise  # a cap or a refusal, already the client's error
        except PAYLOAD_ERRORS as exc:
            raise _decode_failure(exc) from exc
        return self._decode_header(header, data, charged=canvas is not None)

    def load_bytes_ref(self, data: bytes) -> MediaRef[Image.Image]:
        """A ref keyed by a trusted EXIF ImageID when the header has one, else by the bytes.

        Raises :class:`MediaTooLargeError` over a cap and :class:`VLLMUnprocessableEntityError`
        for a refused format; any other verdict on the payload waits for the decode.
        """
        self.check_encoded_size(len(data))
        check_header_segments(data)  # bounds every header walk below, ours and Pillow's
        want_exif = self.trusts_exif_image_id()
        container = (
            webp_header(data, want_exif=want_exif)
            or jpeg_header(data, want_exif=want_exif)
            or png_header(data, want_exif=want_exif)
            or gif_header(data)
        )
        image_id: bytes | None = None
        mode: tuple[str, bool] | None = None  # Pillow's mode and whether it is transparent
        if container is not None:
            check_container_header(container)
            if container.exif is not None:
                image_id = image_id_from_exif_block(container.exif)
            if container.mode is not None:
                mode = (container.mode, container.transparent)
        else:
            try:
                header = open_image_header(data)
            except MediaRefError:
                raise
            except PAYLOAD_ERRORS:
                # Left for decode time, where this failure surfaces with the other decode failures.
                return MediaRef(data, lambda: self.load_bytes(data), self._spec)
            try:
                image_id = read_exif_image_id(header.image) if want_exif else None
                mode = (header.image.mode, _is_transparent(header.image))
            finally:
                header.close()
        # The decode reopens the bytes: a failed attempt that is not memoized (MemoryError, a
        # budget refusal) leaves nothing half-consumed behind, and the next attempt starts clean.
        return MediaRef(
            data,
            lambda: self.load_bytes(data),
            self._spec,
            key=self._key_for(image_id),
            # vLLM hashes a fetched image by its bytes (Pillow reads an ImageID as text, which
            # its hasher does not take for an identity); a trusted ImageID keeps mediaref's key.
            hash_view=(
                None if image_id is not None else functools.partial(self._hash_view, data, mode)
            ),
        )

    def _hash_view(self, data: bytes, mode: tuple[str, bool] | None) -> EncodedImageHashView:
        """What vLLM's hasher reads of this image (:meth:`MediaRef.hash_view`): its bytes, with
        ``io_config`` when the conversion to ``image_mode`` changes the image."""
        return EncodedImageHashView(data, io_config=self._io_config(data, mode))

    def _io_config(self, data: bytes, mode: tuple[str, bool] | None) -> dict[str, Any] | None:
        """vLLM's ``io_config``: the target mode and background, when converting the image to
        ``image_mode`` changes it (another mode, or transparency flattened onto RGB). Read off
        the header (``mode``: as the ref's header walk found it; None: Pillow's header)."""
        if self.image_mode is None:
            return None
        if mode is None:
            try:
                header = open_image_header(data)
            except MediaRefError:
                return None  # the decode refuses it too: a failed item's hash is never used
            except PAYLOAD_ERRORS:
                return None
            try:
                mode = (header.image.mode, _is_transparent(header.image))
            finally:
                header.close()
        image_mode, transparent = mode
        if image_mode == self.image_mode and not (self.image_mode == "RGB" and transparent):
            return None
        return {
            "image_mode": self.image_mode,
            "rgba_background_color": self.rgba_background_color,
        }

    def _key_for(self, image_id: bytes | None) -> bytes | None:
        """The EXIF ImageID key, or None to let the ref key off its bytes."""
        if image_id is None:
            return None
        return derive_identity_key(_EXIF_IMAGE_ID_KIND, image_id, self._spec)

    def encode_base64(
        self, media: Image.Image | MediaWithBytes[Image.Image], *, image_format: str = "PNG"
    ) -> str:
        """``media`` in ``image_mode`` (None: as it is), encoded as ``image_format``, in base64."""
        image = media.media if isinstance(media, MediaWithBytes) else media
        if self.image_mode is not None:
            image = convert_image_mode(image, self.image_mode, self.rgba_background_color)
        with io.BytesIO() as buffer:
            image.save(buffer, image_format)
            return pybase64.b64encode(buffer.getvalue()).decode("ascii")

    def _charge(self, size: tuple[int, int]) -> None:
        """Charge the raster of ``size`` to the budget before it exists (see decode_budget)."""
        charge_decoded_bytes(decoded_image_bytes(size), self.decoded_budget)

    def _decode_header(self, header: ImageHeader, data: bytes, *, charged: bool) -> Image.Image:
        try:
            if not charged:  # before the pixels exist: a refused decode has allocated nothing
                self._charge(header.image.size)
            return decode_first_frame(
                header.image, self.image_mode, self.rgba_background_color, data
            )
        except MediaRefError:
            raise
        except Image.DecompressionBombError as exc:  # Pillow's own check, inside a plugin
            raise pillow_refusal(exc) from exc
        except PAYLOAD_ERRORS as exc:
            raise _decode_failure(exc) from exc
        finally:
            header.close()

    def __repr__(self) -> str:
        return (
            f"ImageMediaIO(image_mode={self.image_mode!r}, "
            f"rgba_background_color={self.rgba_background_color!r}, "
            f"trust_exif_image_id={self.trust_exif_image_id!r})"
        )


def read_image_size(data: bytes) -> tuple[int, int]:
    """The ``(width, height)`` an encoded image's header declares; no pixel is decoded.

    Read as a fetch reads it: the format allow-list, the header-work limits and
    ``VLLM_MAX_IMAGE_PIXELS`` apply. Raises :class:`MediaTooLargeError` over the pixel cap, and a
    ``ValueError`` for a header that will not parse or a format that is refused. For decoders
    built on images (a ``video/jpeg`` sequence's frames) that must size their output first.
    """
    try:
        header = open_image_header(data)
    except MediaRefError:
        raise
    except PAYLOAD_ERRORS as exc:
        raise _decode_failure(exc) from exc
    try:
        width, height = header.image.size
    finally:
        header.close()
    return width, height


def _decode_failure(exc: Exception) -> ValueError:
    """The one mapping of Pillow's exceptions for a payload that won't decode."""
    return ValueError(f"Failed to load image: {str(exc) or type(exc).__name__}")


def _validated_image_mode(mode: str | None) -> str | None:
    if mode is None:
        return None
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


class ImageEmbeddingMediaIO(EmbeddingMediaIO):
    """Loads pre-computed image embeddings (``image_embeds``): a ``.npy`` array or a
    ``torch.save``'d tensor, sparse ones densified; see :mod:`mediaref.media._embedding_io`."""

    modality: ClassVar[str] = "image"
    parameter: ClassVar[str] = "image_embeds"


__all__ = [
    "MAGIC_NUMPY_PREFIX",
    "ImageEmbeddingMediaIO",
    "ImageMediaIO",
    "normalize_image",
    "open_image",
    "read_image_size",
    "read_jpeg_upright_size",
]
