"""The shared-memory cache's trust: what another process can do through the segment alone.

An outside attack found three holes: the handle-signing secret sat at the segment's start, so any
process able to map the segment could forge handles; a process that rewrote an item's bytes in
the segment had the workers serve them; and a SIGKILLed writer's process group (its resource
tracker included) left its segment behind for good. Each test here fails on the code before the
fix. The writers that die are real processes, killed with SIGKILL.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from mediaref.cache import ShmObjectStoreReceiverCache, ShmObjectStoreSenderCache
from mediaref.inputs import MultiModalBatchedField, MultiModalFieldElem, MultiModalKwargsItem

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="POSIX shared memory under /dev/shm, and /proc"
)

ENV = "VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME"
SECRET_ENV = "MEDIAREF_SHM_CACHE_SECRET"
SHM = "/dev/shm"


def shm_config() -> Any:
    model_config = SimpleNamespace(
        mm_processor_cache_gb=(1 << 20) / (1 << 30),
        mm_processor_cache_type="shm",
        mm_shm_cache_max_object_size_mb=1,
    )
    parallel = SimpleNamespace(world_size=1, data_parallel_size=1, _api_process_count=1)
    return SimpleNamespace(model_config=model_config, parallel_config=parallel)


@pytest.fixture
def fresh_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No segment name or secret from an earlier test; both restored afterwards."""
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(SECRET_ENV, raising=False)


def item_of(data: bytes) -> MultiModalKwargsItem:
    tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return MultiModalKwargsItem({"x": MultiModalFieldElem(tensor, MultiModalBatchedField())})


def segment_bytes(name: str) -> bytes:
    with open(os.path.join(SHM, name), "rb") as segment:
        return segment.read()


# A writer in a process of its own (and its own process group, as a server's would be): it prints
# its segment's name, then waits for its stdin to close before closing the cache.
_WRITER = textwrap.dedent(
    """
    import os, sys
    from types import SimpleNamespace
    from mediaref.cache import ShmObjectStoreSenderCache
    model = SimpleNamespace(
        mm_processor_cache_gb=(1 << 16) / (1 << 30),
        mm_processor_cache_type="shm",
        mm_shm_cache_max_object_size_mb=1,
    )
    parallel = SimpleNamespace(world_size=1, data_parallel_size=1, _api_process_count=1)
    sender = ShmObjectStoreSenderCache(SimpleNamespace(model_config=model, parallel_config=parallel))
    print(os.environ["VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME"], flush=True)
    sys.stdin.read()
    sender.close()
    """
)


@contextmanager
def writer_process(name: str | None = None) -> Iterator[tuple[subprocess.Popen[str], str]]:
    env = {k: v for k, v in os.environ.items() if k not in (ENV, SECRET_ENV)}
    if name is not None:
        env[ENV] = name
    process = subprocess.Popen(
        [sys.executable, "-c", _WRITER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stdin is not None
    segment = process.stdout.readline().strip()
    try:
        assert segment, "the writer process did not start"
        yield process, segment
    finally:
        if process.poll() is None:
            process.stdin.close()
            process.wait(timeout=60)
        if segment:  # whatever the test left, this test's own segment goes
            try:
                os.unlink(os.path.join(SHM, segment))
            except FileNotFoundError:
                pass


def kill_process_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL the writer and its resource tracker (which would otherwise unlink the segment)."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)


# --- the secret -----------------------------------------------------------------------------------


def test_the_segment_does_not_hold_the_secret(fresh_env: None) -> None:
    sender = ShmObjectStoreSenderCache(shm_config())
    try:
        sender.get_and_update_item((item_of(b"\x01" * 512), []), "h")
        secret = sender._shm_cache._secret
        assert len(secret) == 32
        segment = segment_bytes(os.environ[ENV])
        assert secret not in segment
        assert sender._shm_cache._mac_key not in segment  # nor the key derived from it
    finally:
        sender.close()


def test_segments_are_private_to_their_user(fresh_env: None) -> None:
    sender = ShmObjectStoreSenderCache(shm_config())
    try:
        info = os.stat(os.path.join(SHM, os.environ[ENV]))
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
    finally:
        sender.close()


# --- per-item integrity ---------------------------------------------------------------------------


def test_a_rewritten_payload_byte_is_refused_not_served(fresh_env: None) -> None:
    config = shm_config()
    sender = ShmObjectStoreSenderCache(config)
    reader = ShmObjectStoreReceiverCache(config, multiprocessing.Lock())
    try:
        kept = bytes(range(256)) * 4
        victim = bytes(reversed(range(256))) * 4
        kept_handle, _ = sender.get_and_update_item((item_of(kept), []), "kept")
        victim_handle, _ = sender.get_and_update_item((item_of(victim), []), "victim")
        # Another process of the same user rewrites one byte of the victim's tensor, through the
        # segment alone (it has no secret, so it cannot fix up a signature or a MAC).
        path = os.path.join(SHM, os.environ[ENV])
        at = segment_bytes(os.environ[ENV]).index(victim) + 100
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, bytes([victim[100] ^ 0xFF]), at)
        finally:
            os.close(fd)
        with pytest.raises(ValueError, match="has been modified or is invalid"):
            reader.get_and_update_item(victim_handle, "victim")
        assert bytes(reader.get_and_update_item(kept_handle, "kept")["x"].data.numpy()) == kept
    finally:
        reader.close()
        sender.close()


# --- orphaned segments ----------------------------------------------------------------------------


def test_a_sigkilled_writer_s_segment_goes_when_the_next_writer_starts(fresh_env: None) -> None:
    with writer_process() as (dead, dead_segment), writer_process() as (live, live_segment):
        kill_process_group(dead)
        assert os.path.exists(os.path.join(SHM, dead_segment))  # leaked: nothing unlinked it
        sender = ShmObjectStoreSenderCache(shm_config())
        try:
            assert not os.path.exists(os.path.join(SHM, dead_segment))
            assert os.path.exists(os.path.join(SHM, live_segment))  # its writer still runs
            assert live.poll() is None
        finally:
            sender.close()


def test_an_operator_named_segment_is_reclaimed_only_from_a_dead_writer(
    fresh_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"mediaref_trust_test_{os.getpid()}"
    monkeypatch.setenv(ENV, name)
    with writer_process(name) as (live, segment):
        assert segment == name
        with pytest.raises(FileExistsError):
            ShmObjectStoreSenderCache(shm_config())  # a live writer's segment is not taken
        assert os.path.exists(os.path.join(SHM, name))
        kill_process_group(live)
        assert os.path.exists(os.path.join(SHM, name))
        sender = ShmObjectStoreSenderCache(shm_config())  # the dead writer's name is reused
        try:
            handle, _ = sender.get_and_update_item((item_of(b"\x07" * 64), []), "h")
            reader = ShmObjectStoreReceiverCache(shm_config(), multiprocessing.Lock())
            assert reader.get_and_update_item(handle, "h")["x"].data[0] == 7
            reader.close()
        finally:
            sender.close()
