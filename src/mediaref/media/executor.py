"""The shared media decode pool: one lazily created thread pool for every decode and key derivation.

Sized by ``VLLM_MEDIA_LOADING_THREAD_COUNT`` (default 8), read when the pool is first needed.
Decoders release the GIL in their C cores (Pillow, libav, libsndfile, hashlib), so threads scale.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from mediaref import envs

MEDIA_POOL_THREAD_PREFIX = "mediaref-media"
"""The pool's thread names start so (:func:`on_media_pool_thread` reads them)."""

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def get_media_executor() -> ThreadPoolExecutor:
    """The process-wide media pool, created on first use."""
    global _executor
    if _executor is None:
        with _lock:
            if _executor is None:
                workers = envs.VLLM_MEDIA_LOADING_THREAD_COUNT
                if workers < 1:
                    raise ValueError(f"VLLM_MEDIA_LOADING_THREAD_COUNT must be >= 1, got {workers}")
                _executor = ThreadPoolExecutor(
                    max_workers=workers, thread_name_prefix=MEDIA_POOL_THREAD_PREFIX
                )
    return _executor


def on_media_pool_thread() -> bool:
    """Whether the caller runs on a media-pool thread: there, waiting for jobs queued on the
    pool behind it could deadlock, so fan-out work runs inline instead."""
    return threading.current_thread().name.startswith(MEDIA_POOL_THREAD_PREFIX)


def shutdown_media_executor(wait: bool = True) -> None:
    """Shut the pool down; the next :func:`get_media_executor` builds a fresh one."""
    global _executor
    with _lock:
        executor, _executor = _executor, None
    if executor is not None:
        executor.shutdown(wait=wait)


__all__ = [
    "MEDIA_POOL_THREAD_PREFIX",
    "get_media_executor",
    "on_media_pool_thread",
    "shutdown_media_executor",
]
