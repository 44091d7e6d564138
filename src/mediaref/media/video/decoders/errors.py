"""The errors a codec raises on purpose, each also the type vLLM raises in the same case."""

from __future__ import annotations


class VideoCodecUnavailableError(ValueError, ImportError):
    """The codec cannot decode here: its optional package is missing, or it needs a GPU.

    An ``ImportError`` as vLLM's missing-package error is, and a ``ValueError`` like every other
    bad setting (a :class:`~mediaref.media.video.VideoMediaIO` raises it when it is built).
    """


class UnsupportedCodecOptionError(ValueError, AssertionError):
    """An option the chosen codec does not support (vLLM asserts; mediaref also says ValueError)."""


__all__ = ["UnsupportedCodecOptionError", "VideoCodecUnavailableError"]
