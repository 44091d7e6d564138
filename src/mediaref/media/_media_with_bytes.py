"""vLLM's ``MediaWithBytes``: decoded media with the encoded bytes it came from attached.

vLLM's decoders return it so a hasher can key the media off its bytes. mediaref's decoders do not:
fetched media travels as a :class:`~mediaref.media.base.MediaRef`, whose key is derived from the
bytes without decoding and which forwards nothing. This class exists for code written against
vLLM that builds or unwraps one, and it behaves as vLLM's does: it stands in for the media it
wraps (attribute access, iteration, indexing and ``numpy.asarray`` all reach ``media``). That
forwarding is what ``MediaRef`` must never do; the two are unrelated types.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

_T = TypeVar("_T")


@dataclass
class MediaWithBytes(Generic[_T]):
    """``media`` with its ``original_bytes``; ``io_config`` holds the decode settings that made
    ``media`` differ from those bytes (e.g. an image mode conversion), so they can be hashed too.
    """

    media: _T
    original_bytes: bytes = field(repr=False)
    io_config: dict[str, Any] | None = None

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        array = np.asarray(self.media, dtype=dtype)
        return array.copy() if copy else array

    def __iter__(self) -> Iterator[Any]:
        iterator: Iterator[Any] = iter(self.media)  # type: ignore[call-overload]
        return iterator

    def __getitem__(self, index: Any) -> Any:
        return self.media[index]  # type: ignore[index]

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the wrapper lacks. While the instance is being built (copy,
        # unpickling) ``media`` is not set yet: looking it up here would recurse.
        if name.startswith("__") or name in ("media", "original_bytes", "io_config"):
            raise AttributeError(name)
        return getattr(self.media, name)


@dataclass(frozen=True)
class EncodedImageHashView:
    """What vLLM 0.33's hasher reads of a fetched image, known without decoding it.

    vLLM hashes the ``MediaWithBytes`` its image decoder returns: the encoded bytes, with
    ``io_config`` (the target mode and background) when converting to the target mode changed
    the image. (Its EXIF ImageID branch takes only a ``uuid.UUID``, which Pillow never reads
    from a file.) A :class:`~mediaref.media.base.MediaRef` offers this view
    (``MediaRef.hash_view``) so that its item hash is vLLM's digest.
    """

    data: bytes = field(repr=False)
    io_config: dict[str, Any] | None = None


__all__ = ["EncodedImageHashView", "MediaWithBytes"]
