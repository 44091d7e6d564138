"""Importing a codec's optional package (cv2, torchcodec) by name, when the codec is used.

Through ``importlib`` rather than an ``import`` statement: the package is no dependency of
mediaref (pyproject.toml declares exactly what ``src/`` imports), and a deployment that never
selects the codec never loads it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from mediaref.media.video.decoders.errors import VideoCodecUnavailableError


def import_optional(module: str, *, codec: str, install: str) -> ModuleType:
    """``module``, or :class:`VideoCodecUnavailableError` saying what to install."""
    try:
        return importlib.import_module(module)
    except (ImportError, RuntimeError) as exc:  # torchcodec raises RuntimeError without FFmpeg
        raise VideoCodecUnavailableError(
            f"the {codec!r} video codec needs {install} ({module} could not be imported: "
            f"{exc}); or use the 'pyav' codec, mediaref's default"
        ) from exc


def optional_unavailable_reason(module: str, *, codec: str, install: str) -> str | None:
    try:
        import_optional(module, codec=codec, install=install)
    except VideoCodecUnavailableError as exc:
        return str(exc)
    return None


__all__ = ["import_optional", "optional_unavailable_reason"]
