"""Environment settings, read when used and never at import.

``mediaref.envs.VLLM_IMAGE_FETCH_TIMEOUT`` parses the variable each time it is accessed, so a test
or a server that changes ``os.environ`` sees the change at once. Names follow vLLM's ``VLLM_*``
settings; the ones vLLM lacks keep the same prefix so one deployment config serves both.
"""

from __future__ import annotations

import os
from typing import Any, Callable


def _bool(raw: str) -> bool:
    return raw.strip().lower() in ("1", "true", "yes", "on")


def _optional_str(raw: str) -> str | None:
    return raw or None


# name -> (parser, default). The default is returned as is when the variable is unset or empty.
_SETTINGS: dict[str, tuple[Callable[[str], Any], Any]] = {
    # Decoding
    "VLLM_MAX_IMAGE_PIXELS": (int, 89_478_485),  # Pillow's own default; 0 disables the check
    "VLLM_MAX_IMAGE_FILESIZE_MB": (float, 64.0),
    "VLLM_MAX_VIDEO_FILESIZE_MB": (float, 1024.0),
    "VLLM_MAX_AUDIO_CLIP_FILESIZE_MB": (float, 25.0),
    "VLLM_MAX_AUDIO_DURATION_S": (float, 3600.0),
    "VLLM_VIDEO_LOADER_BACKEND": (str, "pyav"),
    "VLLM_MEDIA_LOADING_THREAD_COUNT": (int, 8),
    # Transport
    "VLLM_IMAGE_FETCH_TIMEOUT": (float, 5.0),
    "VLLM_VIDEO_FETCH_TIMEOUT": (float, 30.0),
    "VLLM_AUDIO_FETCH_TIMEOUT": (float, 10.0),
    "VLLM_MEDIA_FETCH_RETRIES": (int, 2),
    "VLLM_MEDIA_URL_ALLOW_REDIRECTS": (_bool, True),
    "VLLM_MEDIA_URL_ALLOW_PRIVATE_IPS": (_bool, False),
    "VLLM_MEDIA_CONNECTOR": (str, "http"),
    "VLLM_MEDIA_CACHE": (_optional_str, None),
    "VLLM_MEDIA_CACHE_MAX_SIZE_MB": (float, 5120.0),
    "VLLM_MEDIA_CACHE_TTL_HOURS": (float, 24.0),
    "VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB": (float, 0.0),  # 0: no per-request budget
    # Processing
    "VLLM_MM_PROCESSOR_CACHE_GB": (float, 4.0),
}


_BYTES_PER_MB = 1024 * 1024


def size_cap_bytes(name: str) -> int | None:
    """A megabyte setting (MiB, as vLLM counts) in bytes; None when it is 0 or less: no cap."""
    megabytes = float(__getattr__(name))
    return int(megabytes * _BYTES_PER_MB) if megabytes > 0 else None


def __getattr__(name: str) -> Any:
    try:
        parse, default = _SETTINGS[name]
    except KeyError:
        raise AttributeError(f"module 'mediaref.envs' has no setting {name!r}") from None
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={raw!r} is invalid: {exc}") from None


def __dir__() -> list[str]:
    return sorted(_SETTINGS)
