"""The Redis second-level processor cache, over real Redis connections.

The shared server at 127.0.0.1:6379 serves the behaviour tests (each test writes under a
namespace of its own); the fault tests start their own ``redis-server`` on a free port, so they
can stop, slow and restart it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis  # the test extra has it: these tests never skip

from _instrumented_decoding import image_bytes, instrumented_ref
from _redis import SHARED_URL, require_redis
from mediaref.cache import MultiModalProcessorOnlyCache
from mediaref.cache.layered import UnstorableItem
from mediaref.cache.redis_l2 import (
    RedisL2Settings,
    RedisL2Store,
    RedisLayeredProcessorCache,
    load_secret,
    settings_namespace,
)
from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import ModelConfig
from mediaref.processing.stored_updates import PROMPT_UPDATES_JSON
from mediaref.registry import MULTIMODAL_REGISTRY

SECRET = b"fleet-secret-for-the-tests-0123456789"
PROMPT = "<|vision_start|><|image_pad|><|vision_end|>What is this?"
DEBUG_ON = ("--enable-debug-command", "yes")  # DEBUG SLEEP: the slow-Redis fault
CONFIG = ModelConfig(model=str(builtin_model_path("qwen2_vl")))


@pytest.fixture(scope="module")
def shared_redis() -> str:
    return require_redis(SHARED_URL)


def settings(url: str, namespace: str, **overrides: Any) -> RedisL2Settings:
    values: dict[str, Any] = {"url": url, "secret": SECRET, "namespace": namespace}
    values.update(overrides)
    return RedisL2Settings(**values)


class Replica:
    """One process's worth: a processor with its own local cache over the shared store."""

    def __init__(self, store_settings: RedisL2Settings) -> None:
        self.store = RedisL2Store(store_settings)
        self.cache = RedisLayeredProcessorCache(
            MultiModalProcessorOnlyCache(CONFIG), self.store, PROMPT_UPDATES_JSON
        )
        self.processor = MULTIMODAL_REGISTRY.create_processor(CONFIG, cache=self.cache)

    def render(self, variant: int) -> tuple[Any, Any]:
        ref, decoder = instrumented_ref(image_bytes(variant))
        out = self.processor.apply(self.processor.build_inputs(PROMPT, {"image": [ref]}))
        return out, decoder

    def close(self) -> None:
        self.cache.close()


@pytest.fixture
def namespace() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def replicas(shared_redis: str, namespace: str) -> Iterator[tuple[Replica, Replica]]:
    pair = (Replica(settings(shared_redis, namespace)), Replica(settings(shared_redis, namespace)))
    yield pair
    for replica in pair:
        replica.close()


def _tensors(out: Any) -> list[Any]:
    item = out["mm_kwargs"]["image"][0]
    return [item[key].data for key in sorted(item)]


# -- sharing ---------------------------------------------------------------------------------


def test_an_item_one_replica_processed_is_a_hit_for_another_without_a_decode(
    replicas: tuple[Replica, Replica],
) -> None:
    first, second = replicas
    expected, first_decoder = first.render(1)
    first.store.flush()
    assert first_decoder.calls == 1 and first.store.stats["written"] == 1

    out, decoder = second.render(1)
    assert decoder.calls == 0  # served from Redis: never decoded, never processed
    assert second.store.stats["hits"] == 1
    assert out["prompt_token_ids"] == expected["prompt_token_ids"]
    assert out["mm_placeholders"] == expected["mm_placeholders"]
    assert out["mm_hashes"] == expected["mm_hashes"]
    for ours, theirs in zip(_tensors(out), _tensors(expected), strict=True):
        assert ours.dtype == theirs.dtype and bool((ours == theirs).all())
    # Now local to the second replica too: its next request does not ask Redis.
    second.render(1)
    assert second.store.stats["hits"] == 1


def test_entries_expire_and_are_keyed_by_namespace(shared_redis: str, namespace: str) -> None:
    writer = Replica(settings(shared_redis, namespace, ttl_s=120))
    other_model = Replica(settings(shared_redis, namespace + "-other"))
    try:
        out, _ = writer.render(2)
        writer.store.flush()
        (mm_hash,) = out["mm_hashes"]["image"]
        client = redis.Redis.from_url(shared_redis)
        assert 0 < client.ttl(writer.store.redis_key(mm_hash)) <= 120
        _, decoder = other_model.render(2)
        assert decoder.calls == 1  # another namespace (model, settings) shares nothing
    finally:
        writer.close()
        other_model.close()


def test_settings_namespace_changes_with_any_setting() -> None:
    base = settings_namespace("qwen2_vl", {"dtype": "bfloat16", "max_pixels": 1000})
    assert base == settings_namespace("qwen2_vl", {"max_pixels": 1000, "dtype": "bfloat16"})
    assert base != settings_namespace("qwen2_vl", {"dtype": "bfloat16", "max_pixels": 1001})
    assert base != settings_namespace("qwen2_audio", {"dtype": "bfloat16", "max_pixels": 1000})


# -- integrity -------------------------------------------------------------------------------


def _stored_key(replica: Replica, out: Any) -> str:
    replica.store.flush()
    (mm_hash,) = out["mm_hashes"]["image"]
    return replica.store.redis_key(mm_hash)


def test_a_tampered_entry_is_ignored_counted_and_recomputed(
    replicas: tuple[Replica, Replica],
) -> None:
    first, second = replicas
    expected, _ = first.render(3)
    key = _stored_key(first, expected)
    client = redis.Redis.from_url(SHARED_URL)
    value = bytearray(client.get(key))
    value[-1] ^= 0xFF  # one bit of one tensor
    client.set(key, bytes(value))

    out, decoder = second.render(3)
    assert decoder.calls == 1  # recomputed, not served
    # Counted at each look (the processor checks again between its phases).
    assert second.store.stats["rejected"] >= 1 and second.store.stats["hits"] == 0
    assert out["prompt_token_ids"] == expected["prompt_token_ids"]


def test_an_entry_copied_from_another_key_is_not_served(
    replicas: tuple[Replica, Replica],
) -> None:
    first, second = replicas
    one, _ = first.render(4)
    two, _ = first.render(5)
    client = redis.Redis.from_url(SHARED_URL)
    client.set(_stored_key(first, two), client.get(_stored_key(first, one)))

    _, decoder = second.render(5)
    assert decoder.calls == 1 and second.store.stats["rejected"] >= 1


def test_entries_written_with_another_secret_are_not_served(
    shared_redis: str, namespace: str
) -> None:
    writer = Replica(settings(shared_redis, namespace, secret=b"another-fleet-secret-000000"))
    reader = Replica(settings(shared_redis, namespace))
    try:
        writer.render(6)
        writer.store.flush()
        _, decoder = reader.render(6)
        assert decoder.calls == 1 and reader.store.stats["rejected"] >= 1
    finally:
        writer.close()
        reader.close()


def test_an_entry_over_the_cap_or_with_code_in_its_updates_stays_local(
    shared_redis: str, namespace: str
) -> None:
    small = Replica(settings(shared_redis, namespace, max_entry_bytes=1024))
    try:
        small.render(7)
        small.store.flush()
        assert small.store.stats["not_written"] == 1 and small.store.stats["written"] == 0
    finally:
        small.close()
    with pytest.raises(UnstorableItem):
        PROMPT_UPDATES_JSON.dumps([object()])


def test_the_secret_comes_from_a_file_or_the_environment(tmp_path: Any) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"  from-a-file-0123456789\n")
    assert load_secret(str(path)) == b"from-a-file-0123456789"
    assert load_secret(env={"MEDIAREF_CACHE_REDIS_SECRET": "from-the-env-0123456"}) == (
        b"from-the-env-0123456"
    )
    with pytest.raises(ValueError, match="fleet secret"):
        load_secret(env={})
    with pytest.raises(ValueError, match="at least 16 bytes"):
        RedisL2Settings(url=SHARED_URL, secret=b"short")


# -- faults: a Redis server of the test's own ------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class OwnRedis:
    def __init__(self) -> None:
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._started_once = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> OwnRedis:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("the fault tests start redis-server: install it (apt install redis-server)")
        for _ in range(5):
            self.process = subprocess.Popen(
                [binary, "--port", str(self.port), "--save", "", "--appendonly", "no", *DEBUG_ON],
                stdout=subprocess.DEVNULL,
            )
            for _ in range(500):
                if self.process.poll() is not None:
                    break  # it exited: another socket took the port meanwhile
                try:
                    redis.Redis.from_url(self.url, socket_timeout=1).ping()
                    self._started_once = True
                    return self
                except redis.RedisError:
                    time.sleep(0.02)
            self.stop()
            if not self._started_once:  # a restart keeps its port: its clients know that one
                self.port = _free_port()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    server = OwnRedis().start()
    yield server
    server.stop()


def test_redis_down_at_start_costs_nothing_but_the_hits() -> None:
    replica = Replica(settings(f"redis://127.0.0.1:{_free_port()}/0", "down", failures_to_open=2))
    try:
        for variant in (8, 9, 10):
            out, decoder = replica.render(variant)
            assert decoder.calls == 1 and out["prompt_token_ids"]
        assert replica.store.circuit_open
        assert replica.store.stats["skipped"] >= 1  # asked no more once open
    finally:
        replica.close()


def test_killed_mid_run_then_restarted_the_circuit_closes_again(own_redis: OwnRedis) -> None:
    store_settings = settings(own_redis.url, "restart", failures_to_open=2, retry_after_s=0.1)
    replica = Replica(store_settings)
    try:
        replica.render(11)
        replica.store.flush()
        assert replica.store.stats["written"] == 1
        own_redis.stop()
        for variant in (12, 13, 14):
            out, _ = replica.render(variant)  # every request still answered, from local work
            assert out["prompt_token_ids"]
        assert replica.store.circuit_open
        own_redis.start()
        deadline = time.monotonic() + 10
        while replica.store.circuit_open and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not replica.store.circuit_open  # the background probe found it back
        replica.render(15)
        replica.store.flush()
        assert replica.store.stats["written"] == 2
    finally:
        replica.close()


def test_a_slow_redis_is_not_waited_for(own_redis: OwnRedis) -> None:
    replica = Replica(settings(own_redis.url, "slow", timeout_s=0.05, failures_to_open=100))
    sleeper = threading.Thread(
        target=lambda: redis.Redis.from_url(own_redis.url).execute_command("DEBUG", "SLEEP", "5")
    )
    try:
        sleeper.start()
        time.sleep(0.2)  # the server is asleep now
        out, decoder = replica.render(16)
        # Answered from local work while Redis still sleeps: its reads timed out, not waited.
        assert sleeper.is_alive()
        assert decoder.calls == 1 and out["prompt_token_ids"]
        assert replica.store.stats["errors"] >= 1
    finally:
        sleeper.join()
        replica.close()


def test_a_server_answering_garbage_is_a_miss(namespace: str) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer_garbage() -> None:
            listener.settimeout(10)
            for _ in range(4):
                try:
                    connection, _ = listener.accept()
                except OSError:
                    return
                with connection:
                    connection.recv(65536)
                    connection.sendall(b"%%% not RESP at all \r\n")

        server = threading.Thread(target=answer_garbage, daemon=True)
        server.start()
        replica = Replica(settings(f"redis://127.0.0.1:{port}/0", namespace, timeout_s=0.5))
        try:
            out, decoder = replica.render(17)
            assert decoder.calls == 1 and out["prompt_token_ids"]
            assert replica.store.stats["errors"] >= 1 and replica.store.stats["hits"] == 0
        finally:
            replica.close()


def test_a_full_redis_evicts_and_requests_go_on(own_redis: OwnRedis) -> None:
    client = redis.Redis.from_url(own_redis.url)
    client.config_set("maxmemory", "4mb")
    client.config_set("maxmemory-policy", "allkeys-lru")
    replica = Replica(settings(own_redis.url, "full"))
    try:
        for variant in range(18, 26):  # more than 4 MiB of entries in all
            out, _ = replica.render(variant)
            assert out["prompt_token_ids"]
        replica.store.flush()
        assert replica.store.stats["errors"] == 0
        assert client.info("memory")["used_memory"] <= 6 * 1024 * 1024
    finally:
        replica.close()
