"""The shared-memory cache's secret: drawn by the sender, handed to the workers, never in the segment.

The secret keys the handles' signatures and every item's MAC (``_shm_store``). Whoever can map
the segment can read it, so the secret is kept out of it: the sender holds it in its own memory
and exports it (hex) in ``MEDIAREF_SHM_CACHE_SECRET`` for the processes it starts afterwards.

Why the environment: vLLM builds a worker's cache with ``worker_receiver_cache_from_config(
vllm_config, shared_worker_lock)`` in a process the engine core spawns, and the engine core is
spawned by the frontend after its sender exists; the only things that travel from the frontend
to a worker are the pickled config and the environment. The segment's name already travels this
way (``VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME``). A caller with a channel of its own passes
``secret=`` to the receiver instead. The environment of a process is readable by its own user
(and root) only, the same principals that can read the process's memory.

The variable is not a setting: it is read here, never through ``mediaref.envs``, so no settings
listing shows it.
"""

from __future__ import annotations

import os
import secrets

SECRET_BYTES = 32
SECRET_ENV = "MEDIAREF_SHM_CACHE_SECRET"


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def export_secret(secret: bytes) -> None:
    """Leave ``secret`` for the processes this one starts from now on."""
    os.environ[SECRET_ENV] = secret.hex()


def inherited_secret() -> bytes:
    """The secret the sender that started this process exported (``ValueError`` without one)."""
    raw = os.environ.get(SECRET_ENV, "")
    try:
        secret = bytes.fromhex(raw)
    except ValueError:
        secret = b""
    if len(secret) != SECRET_BYTES:
        raise ValueError(
            f"no shared-memory cache secret: {SECRET_ENV} is unset or malformed (a worker "
            "reading the cache must be started by the process that created its sender, or be "
            "given the secret as secret=)"
        )
    return secret


__all__ = ["SECRET_BYTES", "SECRET_ENV", "export_secret", "inherited_secret", "new_secret"]
