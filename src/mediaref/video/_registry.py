"""The video loader registry: backend name -> loader class."""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

VideoFrames = npt.NDArray[np.uint8]
"""Decoded frames: uint8 RGB, shape (num_frames, height, width, 3)."""

VideoMetadata = dict[str, Any]
"""vLLM's keys: total_num_frames, fps, duration, video_backend, frames_indices, do_sample_frames."""


class VideoLoader(Protocol):
    """What a registered backend provides: one call from encoded bytes to frames and metadata.

    ``load_bytes`` is a classmethod or staticmethod. Options beyond ``num_frames`` and ``fps`` are
    further keyword arguments with defaults; :class:`~mediaref.media.video.VideoMediaIO` checks
    the options it is given against the signature, so a misspelled option fails at construction
    (a loader taking ``**kwargs`` vets its options itself).
    ``decoder_version`` names the backend's algorithm: bump it when the same settings start
    returning different frames, so cache keys made before the change stop matching.
    """

    decoder_version: ClassVar[str]

    @classmethod
    def load_bytes(
        cls, data: bytes, num_frames: int = -1, fps: float | None = None
    ) -> tuple[VideoFrames, VideoMetadata]: ...


_L = TypeVar("_L", bound=type)


class UnknownVideoBackendError(ValueError, AssertionError):
    """No loader is registered under the name asked for.

    vLLM's registry fails this lookup with an ``AssertionError`` ("Extension class <name> not
    found"); this is one too, so code written against vLLM catches it, and a ``ValueError`` as
    every other bad setting here is.
    """


class VideoLoaderRegistry:
    """Backend name -> loader class, filled by the ``register`` decorator."""

    def __init__(self) -> None:
        self._loaders: dict[str, type] = {}

    def register(self, name: str) -> Callable[[_L], _L]:
        """Register the decorated class under ``name``; a name taken by another class is refused."""

        def decorate(loader: _L) -> _L:
            existing = self._loaders.get(name)
            if existing is not None and existing is not loader:
                raise ValueError(
                    f"video loader backend {name!r} is already registered "
                    f"({existing.__module__}.{existing.__qualname__}); unregister it first"
                )
            self._loaders[name] = loader
            return loader

        return decorate

    def unregister(self, name: str) -> None:
        """Remove ``name``; a name that is not registered is an error, as in :meth:`load`."""
        self.load(name)
        del self._loaders[name]

    def load(self, name: str) -> type[VideoLoader]:
        """The loader class registered as ``name``; :class:`UnknownVideoBackendError` if none."""
        try:
            return self._loaders[name]  # type: ignore[return-value]
        except KeyError:
            known = ", ".join(repr(n) for n in sorted(self._loaders)) or "none"
            raise UnknownVideoBackendError(
                f"Extension class {name} not found: unknown video loader backend {name!r}; "
                f"registered backends: {known}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._loaders)

    def __contains__(self, name: object) -> bool:
        return name in self._loaders


VIDEO_LOADER_REGISTRY = VideoLoaderRegistry()
