"""Environment settings, read when used and never at import.

``mediaref.envs.VLLM_IMAGE_FETCH_TIMEOUT`` parses the variable each time it is accessed, so a test
or a server that changes ``os.environ`` sees the change at once. Names follow vLLM's ``VLLM_*``
settings with vLLM 0.33.0's defaults, so one deployment config serves both; a setting vLLM does
not have is ``MEDIAREF_*``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def _bool(raw: str) -> bool:
    return raw.strip().lower() in ("1", "true", "yes", "on")


def _optional_str(raw: str) -> str | None:
    return raw or None


# name -> (parser, default). The default is returned as is when the variable is unset or empty.
# vLLM's names carry vLLM 0.33.0's defaults; MEDIAREF_* are settings vLLM does not have.
_SETTINGS: dict[str, tuple[Callable[[str], Any], Any]] = {
    # Decoding: per-item caps
    "VLLM_MAX_IMAGE_PIXELS": (int, 178_956_970),  # Pillow's 2x bomb threshold; 0 disables
    "VLLM_MAX_AUDIO_CLIP_FILESIZE_MB": (float, 25.0),
    "VLLM_MAX_AUDIO_DECODE_DURATION_S": (float, 600.0),
    "VLLM_MAX_AUDIO_DECODE_BYTES": (int, 268_435_456),  # float32 PCM a decode may allocate
    "MEDIAREF_MAX_IMAGE_FILESIZE_MB": (float, 64.0),
    "MEDIAREF_MAX_VIDEO_FILESIZE_MB": (float, 1024.0),
    # Decoding: per-request caps and trust
    "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES": (int, 715_827_880),  # decoded bytes per request
    "VLLM_MAX_EMBED_DECODE_BYTES": (int, 2_147_483_648),  # a client-supplied embedding, densified
    # Per-request media caps over every modality and source form (sglang-mm's): items, encoded
    # bytes per item and per request; checked when a request's data is parsed
    "MEDIAREF_MAX_MEDIA_ITEMS_PER_REQUEST": (int, 64),
    "MEDIAREF_MAX_MEDIA_ITEM_SIZE_MB": (float, 64.0),
    "MEDIAREF_MAX_MEDIA_REQUEST_SIZE_MB": (float, 256.0),
    "MEDIAREF_TRUST_EXIF_IMAGE_ID": (_bool, True),  # key images by their EXIF ImageID
    # Decoding: backends and pool
    "VLLM_VIDEO_LOADER_BACKEND": (str, "pyav"),
    "VLLM_MEDIA_LOADING_THREAD_COUNT": (int, 8),
    # RGB JPEGs decoded by libjpeg-turbo in one call into Pillow's storage (the same pixels as
    # Pillow's own decoder, ~30% sooner); off: Pillow decodes every JPEG
    "MEDIAREF_TURBO_JPEG": (_bool, True),
    # Transport
    "VLLM_IMAGE_FETCH_TIMEOUT": (float, 5.0),
    "VLLM_VIDEO_FETCH_TIMEOUT": (float, 30.0),
    "VLLM_AUDIO_FETCH_TIMEOUT": (float, 10.0),
    "VLLM_MEDIA_FETCH_MAX_RETRIES": (int, 3),  # attempts in all, as in vLLM (at least 1)
    "VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB": (float, 256.0),  # one http(s) download
    "VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB": (float, 256.0),  # all of one request's downloads
    "VLLM_MEDIA_URL_ALLOW_REDIRECTS": (_bool, True),
    "MEDIAREF_MEDIA_URL_ALLOW_PRIVATE_IPS": (_bool, False),
    # Connections one request's downloads hold at once (in a request scope; see request_scope)
    "MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS": (int, 16),
    "VLLM_MEDIA_CONNECTOR": (str, "http"),
    "VLLM_MEDIA_CACHE": (_optional_str, None),
    "VLLM_MEDIA_CACHE_MAX_SIZE_MB": (float, 5120.0),
    "VLLM_MEDIA_CACHE_TTL_HOURS": (float, 24.0),
    # Serving: an idle keep-alive connection closes after this; `mediaref serve` also gives a
    # connection this long to send a whole request's headers (--header-timeout)
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": (float, 5.0),
    # Processing (vLLM has this as the model config's mm_processor_cache_gb, not a variable)
    "MEDIAREF_MM_PROCESSOR_CACHE_GB": (float, 4.0),
    # Qwen2-VL's fused exact image/video path (bit-identical to HF's default processors); off:
    # every item goes through the HF processor
    "MEDIAREF_QWEN2_VL_FUSED": (_bool, True),
    # That path's resize and patch rows in one native pass (torch's uint8 antialiased bicubic
    # reproduced bit for bit, used where a first-use check finds torch's bytes); off: torch's
    # resize kernel, then the rows
    "MEDIAREF_NATIVE_RESIZE": (_bool, True),
    # Opt-in approximate modes of that path, comma-separated: "jpeg_draft" (large JPEGs decoded at
    # a DCT scale), "video_scale" (video frames decoded straight to their target size)
    "MEDIAREF_QWEN2_VL_APPROX": (str, ""),
    # vLLM running on mediaref (mediaref-vllm): the encodings of items its render server wrote,
    # kept so that an item the processor cache hands out again is not encoded again; 0: off
    # (read when vLLM first imports its mm_serde)
    "MEDIAREF_HOOK_ENCODED_CACHE_MB": (float, 512.0),
    # vLLM's Rust frontend cannot leave normalization to the device: it vetoes mm_device_do_normalize
    "VLLM_USE_RUST_FRONTEND": (_bool, False),
    # The shared-memory processor cache's buffer (mm_processor_cache_type="shm"); unset: the
    # sender names one per process tree and exports it for the workers (as vLLM does)
    "VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME": (_optional_str, None),
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
