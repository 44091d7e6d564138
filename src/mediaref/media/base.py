"""The media reference: encoded bytes, the identity derived from them, and a deferred decode.

A :class:`MediaRef` is what travels from fetch to processor. Its ``key`` is computed from the
encoded payload and the :class:`DecodeSpec` (never from decoded content), so a processor-cache hit
is recognised without paying for a decode, and misses decode later, in parallel.

vLLM's other names at this path are here too: :class:`MediaIO` (with ``merge_kwargs``),
``MediaDecodedBudget`` (from :mod:`mediaref.media.decode_budget`) and ``MediaWithBytes``, vLLM's
decoded-media wrapper, which forwards attribute access to its media as vLLM's does and which
mediaref's decoders never return (a ``MediaRef`` forwards nothing).
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast

import pybase64

from mediaref.exceptions import MediaClientError, MediaTooLargeError
from mediaref.media._media_with_bytes import EncodedImageHashView, MediaWithBytes
from mediaref.media._shared_decode import SharedDecode
from mediaref.media.decode_budget import MediaDecodedBudget

_T = TypeVar("_T")
_U = TypeVar("_U")

_JSON_SCALARS = (str, int, float, bool, type(None))

JPEG_FRAMES_MEDIA_TYPE = "video/jpeg"
"""The ``data:`` media type of a video sent as base64 JPEG frames joined by commas (vLLM's form).

Its payload is not one base64 blob: the connector hands the text to the decoders as is
(:meth:`MediaIO.load_base64_ref`), and the video decoder splits it."""


def is_jpeg_frames(media_type: str) -> bool:
    """Whether ``media_type`` names the base64 JPEG frame sequence form."""
    return media_type.strip().lower() == JPEG_FRAMES_MEDIA_TYPE


def _check_setting(path: str, value: Any) -> None:
    """Reject what canonical JSON cannot carry exactly, with the setting's path in the message."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"decode setting {path!r} must be a finite number, got {value!r}")
    if isinstance(value, _JSON_SCALARS):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_setting(f"{path}[{i}]", item)
        return
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                raise TypeError(f"decode setting {path!r} has a non-string key {k!r}")
            _check_setting(f"{path}.{k}", item)
        return
    raise TypeError(
        f"decode setting {path!r} has unsupported type {type(value).__name__}; "
        "use str, int, float, bool, None, lists or string-keyed dicts"
    )


class DecodeSpec:
    """Every setting that parameterizes a decode or changes the media relative to its bytes.

    Stored as canonical JSON (sorted keys, compact separators), so two specs with equal settings
    have equal bytes whatever order the settings were given in. The spec is immutable:
    ``settings`` returns a fresh copy and :meth:`extend` returns a new spec.
    """

    __slots__ = ("_canonical",)

    def __init__(self, settings: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        merged = {**(settings or {}), **kwargs}
        _check_setting("spec", merged)
        self._canonical = json.dumps(
            merged, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")

    @classmethod
    def from_canonical_bytes(cls, canonical: bytes) -> DecodeSpec:
        return cls(json.loads(canonical))

    @property
    def settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = json.loads(self._canonical)  # always a JSON object
        return settings

    def canonical_bytes(self) -> bytes:
        return self._canonical

    def extend(self, **settings: Any) -> DecodeSpec:
        """A new spec with ``settings`` added; a setting given again takes the new value."""
        return DecodeSpec(self.settings, **settings)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DecodeSpec) and other._canonical == self._canonical

    def __hash__(self) -> int:
        return hash(self._canonical)

    def __repr__(self) -> str:
        return f"DecodeSpec({self._canonical.decode('utf-8')})"


def _digest_chunks(domain: bytes, *chunks: bytes | bytearray | memoryview) -> bytes:
    # Each chunk is preceded by its length, so content cannot shift a chunk boundary:
    # (b"x", b'{"a":"b"}') and (b"xy", b'{"a":"bc"}') frame differently. The domain keeps keys
    # made from payloads, from EXIF identities and from map() settings in separate spaces.
    digest = hashlib.sha256()
    for chunk in (domain, *chunks):
        digest.update(len(chunk).to_bytes(8, "big"))
        digest.update(chunk)
    return digest.digest()


def derive_media_key(data: bytes | bytearray | memoryview, spec: DecodeSpec) -> bytes:
    """The cache identity of ``data`` decoded under ``spec``: sha256, length-framed.

    Always sha256 rather than the configurable multimodal hasher: the key identifies an item, so it
    must not depend on which optional hash packages are installed.
    """
    return _digest_chunks(b"payload", data, spec.canonical_bytes())


def derive_identity_key(kind: str, identity: bytes, spec: DecodeSpec) -> bytes:
    """A key from an identity the media declares about itself (e.g. an EXIF ImageID) and ``spec``."""
    return _digest_chunks(b"identity:" + kind.encode("utf-8"), identity, spec.canonical_bytes())


def _derive_mapped_key(parent_key: bytes, spec: DecodeSpec) -> bytes:
    return _digest_chunks(b"map", parent_key, spec.canonical_bytes())


class MediaRef(Generic[_T]):
    """Fetched media as an encoded payload, its cache ``key``, and a deferred, memoized decode.

    It forwards nothing: no ``__getattr__``, ``__iter__``, ``__getitem__`` or ``__array__``, so
    logging it, handing it to numpy or testing membership never decodes. Say :meth:`decode`.
    """

    __slots__ = ("__weakref__", "_decoded", "_hash_view", "_key", "_shared", "_spec", "_value")

    def __init__(
        self,
        data: bytes,
        decoder: Callable[[], _T],
        spec: DecodeSpec,
        *,
        key: bytes | None = None,
        hash_view: Callable[[], object | None] | None = None,
    ) -> None:
        self._spec = spec
        self._key = derive_media_key(data, spec) if key is None else key
        self._shared: SharedDecode[_T] | None = SharedDecode(data, decoder)
        self._value: _T | None = None
        self._decoded = False
        self._hash_view = hash_view

    @classmethod
    def from_decoded(cls, value: _U, *, key: bytes, spec: DecodeSpec) -> MediaRef[_U]:
        """A ref that is already decoded and carries no encoded bytes."""
        ref = cast("MediaRef[_U]", object.__new__(cls))
        ref._key, ref._spec, ref._shared = key, spec, None
        ref._value, ref._decoded, ref._hash_view = value, True, None
        return ref

    @property
    def key(self) -> bytes:
        return self._key

    @property
    def spec(self) -> DecodeSpec:
        return self._spec

    def hash_view(self) -> object | None:
        """What vLLM 0.33's hasher would read for this item, computed from the encoded bytes
        (never decoding), or None: the ``key`` stands for the item in its hash.

        A decoder offers a view only where its decode equals vLLM's for every setting the view
        leaves out (images: ``EncodedImageHashView``), so an item hash built on it is both vLLM's
        digest and a sound cache identity. RuntimeError once released (hash before releasing).
        """
        view = self._hash_view
        if view is None:
            return None
        if self._shared is None:  # its bytes are gone: a key-based hash would be another identity
            raise RuntimeError(f"{self!r} was released: its hash view needs its bytes")
        return view()

    @property
    def data(self) -> bytes:
        """The encoded payload; ``b""`` once released (or for a ref restored from a pickle)."""
        shared = self._shared
        return shared.data if shared is not None else b""

    @property
    def is_decoded(self) -> bool:
        shared = self._shared
        return self._decoded or (shared is not None and shared.succeeded)

    @property
    def is_released(self) -> bool:
        return self._shared is None

    def decode(self) -> _T:
        """The decoded media, decoding on first use. Decoder exceptions propagate unchanged.

        A failure is remembered only when it is a verdict on the payload (a ``ValueError`` that is
        not a :class:`~mediaref.exceptions.MediaTooLargeError`); after any other failure (a cap,
        ``MemoryError``, an interrupt...) the next call decodes again.
        """
        if self._decoded:
            return self._value  # type: ignore[return-value]
        shared = self._shared
        if shared is None:
            raise RuntimeError(f"{self!r} was released before it was decoded")
        value = shared.run()
        self._value, self._decoded = value, True
        return value

    def map(self, transform: Callable[[_T], _U], **settings: Any) -> MediaRef[_U]:
        """A ref decoding to ``transform(self.decode())``, sharing this ref's bytes.

        ``settings`` must identify the transform and every parameter that changes its output; they
        extend the spec and derive the new key from this key without re-reading the payload. With
        no settings the transform must preserve identity, and spec and key are kept.
        """
        if settings:
            spec = self._spec.extend(**settings)
            key = _derive_mapped_key(self._key, spec)
        else:
            spec, key = self._spec, self._key
        shared = self._shared
        if shared is None and not self._decoded:
            raise RuntimeError(f"cannot map {self!r}: it was released before it was decoded")
        # Without a shared decode the ref was released after decoding: ``_value`` holds the value.
        parent_decode: Callable[[], _T] = (
            shared.run if shared is not None else (lambda: cast(_T, self._value))
        )
        data = shared.data if shared is not None else b""
        # The closure holds the parent's shared decode, not the parent ref: releasing either
        # leaves the other usable, and the payload lives while one of them still needs it. A
        # transform with settings changes the output: the parent's hash view no longer holds.
        hash_view = None if settings else self._hash_view
        return MediaRef(
            data, lambda: transform(parent_decode()), spec, key=key, hash_view=hash_view
        )

    def fork(self) -> MediaRef[_T]:
        """An independently releasable wrapper borrowing this ref's decode, bytes, spec and key."""
        twin: MediaRef[_T] = MediaRef.__new__(MediaRef)
        twin._key, twin._spec, twin._shared = self._key, self._spec, self._shared
        twin._value, twin._decoded = self._value, self._decoded
        twin._hash_view = self._hash_view
        return twin

    def release(self) -> None:
        """Drop this ref's hold on the payload and decode closure at once; never waits.

        Decoded media stays readable, including media a decode already running (a fork's, on
        another thread) produces after this returns: that decode hands its value to this ref when
        it succeeds. Otherwise an undecoded ref raises ``RuntimeError`` from ``decode()``
        afterwards. Forks, mapped refs and parents hold the payload independently, and a decode
        in flight keeps the bytes it reads alive by itself.
        """
        shared = self._shared
        if shared is None:
            return
        self._shared = None
        if not self._decoded:
            shared.notify_when_done(self._adopt)

    def _adopt(self, value: _T) -> None:
        self._value, self._decoded = value, True

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickling materializes: the closure and the lock cannot cross a process boundary.
        return (_media_ref_from_pickle, (self.decode(), self._key, self._spec.canonical_bytes()))

    def __repr__(self) -> str:
        state = "decoded" if self.is_decoded else "encoded"
        if self.is_released:
            state += ", released"
        return (
            f"MediaRef(key={self._key.hex()[:16]}, {len(self.data)} bytes, {state}, "
            f"spec={self._spec.canonical_bytes().decode('utf-8')})"
        )


def _media_ref_from_pickle(value: Any, key: bytes, canonical_spec: bytes) -> MediaRef[Any]:
    return MediaRef.from_decoded(
        value, key=key, spec=DecodeSpec.from_canonical_bytes(canonical_spec)
    )


class MediaIO(ABC, Generic[_T]):
    """Decodes one modality. ``load_*`` decode now; ``load_*_ref`` return a lazy :class:`MediaRef`.

    Subclasses implement :meth:`load_bytes` and report every output-affecting setting through
    :meth:`get_decode_spec`, which is folded into each ref's key.
    """

    modality: ClassVar[str]

    @classmethod
    def merge_kwargs(
        cls, default_kwargs: Mapping[str, Any] | None, runtime_kwargs: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The kwargs a decoder is built with: the deployment's ``default_kwargs`` (the
        ``--media-io-kwargs`` of this modality) with the request's ``runtime_kwargs`` on top.

        A shallow merge: a key the request sets replaces the default's whole value. A subclass
        whose settings depend on each other overrides this (vLLM's video decoder drops ``fps``
        when a request sets ``num_frames``, and the reverse).
        """
        merged = dict(default_kwargs or {})
        merged.update(runtime_kwargs or {})
        return merged

    @abstractmethod
    def load_bytes(self, data: bytes) -> _T: ...

    def load_base64(self, media_type: str, data: str) -> _T:
        return self.load_bytes(self._b64decode(data))

    def load_file(self, filepath: Path | str) -> _T:
        return self.load_bytes(Path(filepath).read_bytes())

    @abstractmethod
    def get_decode_spec(self) -> DecodeSpec: ...

    def get_max_bytes(self) -> int | None:
        """The largest encoded payload this decoder accepts, or None for no cap."""
        return None

    def check_encoded_size(self, size: int) -> None:
        cap = self.get_max_bytes()
        if cap is not None and size > cap:
            raise MediaTooLargeError(
                f"{self.modality} payload of {size} bytes exceeds the {cap}-byte limit"
            )

    def load_bytes_ref(self, data: bytes) -> MediaRef[_T]:
        """A ref whose decode runs :meth:`load_bytes`. Subclasses may parse headers eagerly."""
        self.check_encoded_size(len(data))
        return MediaRef(data, lambda: self.load_bytes(data), self.get_decode_spec())

    def load_base64_ref(self, media_type: str, data: str) -> MediaRef[_T]:
        return self.load_bytes_ref(self._b64decode(data))

    def _b64decode(self, text: str) -> bytes:
        """Strict base64 (no whitespace, exact padding) or :class:`MediaClientError` (HTTP 400).

        The connector's ``data:`` URLs refuse the same text with the same error type and reason
        ("invalid base64 payload"); a decoder taking base64 directly must not let ``binascii``'s
        error escape unmapped. Text that would decode to more than :meth:`get_max_bytes` is
        refused (:class:`MediaTooLargeError`) before anything is decoded: strict base64 is
        exactly 4 characters for every 3 bytes.
        """
        cap = self.get_max_bytes()
        if cap is not None and len(text) > 4 * ((cap + 2) // 3):
            raise MediaTooLargeError(
                f"{self.modality} payload of about {len(text) * 3 // 4} bytes (base64) exceeds "
                f"the {cap}-byte limit"
            )
        try:
            return pybase64.b64decode(text, validate=True)
        except ValueError as exc:  # binascii.Error, or non-ASCII text
            raise MediaClientError(f"invalid base64 payload for {self.modality}: {exc}") from exc

    def load_file_ref(self, filepath: Path | str) -> MediaRef[_T]:
        return self.load_bytes_ref(Path(filepath).read_bytes())


__all__ = [
    "JPEG_FRAMES_MEDIA_TYPE",
    "DecodeSpec",
    "EncodedImageHashView",
    "MediaDecodedBudget",
    "MediaIO",
    "MediaRef",
    "MediaWithBytes",
    "derive_identity_key",
    "derive_media_key",
    "is_jpeg_frames",
]
