"""A second-level processor cache on Redis, shared by a fleet of processes and machines.

Each process keeps its own local cache (:class:`~mediaref.cache.MultiModalProcessorOnlyCache`);
:class:`RedisLayeredProcessorCache` puts a Redis server under it. A local miss asks Redis before
the item is decoded and processed; an item processed here is written back (by a background
thread, never on the request's path). So a fleet of N render servers behind a load balancer
shares one hit rate instead of N private ones::

    is_cached(hashes)   local hit -> True
                        local miss -> MGET from Redis -> verified, decoded, stored locally -> True
                        else False: the processor decodes and processes the item
    get_and_update()    local cache as before; each newly processed item queued for SET ... EX ttl

**What is stored** is the layered cache's payload (:func:`mediaref.cache.layered.encode_entry`:
data only, never code). An entry larger than ``max_entry_bytes`` is not written. Keys are
``{prefix}:{namespace}:{mm_hash}``: the namespace stands for the model and every setting that
changes processed output (:func:`settings_namespace`), the item hash for the item.

**Integrity.** Every entry carries a MAC (keyed BLAKE3) over its key and payload, keyed by the
fleet's secret (from a file or the environment; it is never stored in Redis). An entry that fails the
check, or was copied from another key, is ignored, counted (``rejected``) and recomputed: never
served. Whoever holds the secret can write entries every reader serves; whoever can reach Redis
without it can only make items be recomputed.

**Faults.** Every Redis call has a short socket timeout. After ``failures_to_open`` failures in a
row the circuit opens: requests stop asking Redis (no added latency) and a background thread
pings it every ``retry_after_s`` seconds, closing the circuit once it answers. A request never
fails because of Redis; it only loses the L2 hit.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mediaref.cache._processor_only import MultiModalProcessorOnlyCache
from mediaref.cache.layered import LayeredProcessorCache, Payload, PromptUpdatesCodec

logger = logging.getLogger(__name__)

_MAGIC = b"MRL2\x01"
_MAC_BYTES = 32
_LENGTH_BYTES = 4
_WRITE_QUEUE = 256  # entries waiting to be written; past it, new ones are dropped (counted)


@dataclass(frozen=True)
class RedisL2Settings:
    """Where the second-level cache lives and how it behaves."""

    url: str
    """``redis://HOST:PORT/DB`` (``rediss://`` for TLS, ``unix://`` for a socket)."""
    secret: bytes = field(repr=False)
    """The fleet's MAC key: every process of the fleet must have the same one."""
    namespace: str = ""
    """The model and the settings that change its output (:func:`settings_namespace`)."""
    prefix: str = "mediaref:l2"
    ttl_s: int = 24 * 3600
    """Seconds an entry lives in Redis after it is written."""
    max_entry_bytes: int = 64 * 1024 * 1024
    """Larger entries are not written (a 1080p image's Qwen2-VL item is ~6 MB)."""
    timeout_s: float = 0.25
    """Socket timeout of every Redis call: the most a request waits on a silent Redis. (50 ms
    timed out 5% of 12 MB reads with three servers on two busy cores.)"""
    failures_to_open: int = 3
    """Failures in a row that open the circuit."""
    retry_after_s: float = 2.0
    """While the circuit is open, how often the background thread pings Redis."""

    def __post_init__(self) -> None:
        if len(self.secret) < 16:
            raise ValueError("the L2 cache's secret must be at least 16 bytes")
        if self.ttl_s <= 0 or self.max_entry_bytes <= 0 or self.timeout_s <= 0:
            raise ValueError("ttl_s, max_entry_bytes and timeout_s must be positive")


def settings_namespace(model_id: str, settings: Mapping[str, Any]) -> str:
    """A short name for a model and every setting that changes its processed output: two
    processes share entries exactly when both agree."""
    canonical = json.dumps({"model": model_id, **settings}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def load_secret(path: str | None = None, *, env: Mapping[str, str] | None = None) -> bytes:
    """The fleet secret: the file at ``path`` (its contents, stripped), else
    ``MEDIAREF_CACHE_REDIS_SECRET``. ValueError when neither gives one."""
    import os

    if path:
        with open(path, "rb") as handle:
            secret = handle.read().strip()
    else:
        secret = (
            (env if env is not None else os.environ).get("MEDIAREF_CACHE_REDIS_SECRET", "").encode()
        )
    if not secret:
        raise ValueError(
            "the Redis cache needs a fleet secret: --cache-redis-secret-file FILE or "
            "MEDIAREF_CACHE_REDIS_SECRET"
        )
    return secret


# -- entries -----------------------------------------------------------------------------------


def _mac(secret: bytes, key: bytes, payload: Payload) -> bytes:
    # BLAKE3 in keyed mode (a MAC by design): 1.9 ms over a 1080p image's 12 MB entry, where
    # HMAC-SHA256 took 8.4 ms.
    from blake3 import blake3

    digest = blake3(key=hashlib.sha256(b"mediaref-l2-mac\0" + secret).digest())
    digest.update(len(key).to_bytes(4, "little") + key)
    digest.update(payload)
    return bytes(digest.digest())


# -- the store ---------------------------------------------------------------------------------


class RedisL2Store:
    """Authenticated entries in Redis, behind a timeout and a circuit breaker.

    ``stats`` counts ``hits``, ``misses``, ``rejected`` (failed the MAC or would not decode),
    ``errors`` (Redis failed or timed out), ``skipped`` (asked while the circuit was open),
    ``written``, ``not_written`` (too large, unstorable, or the write queue full),
    ``bytes_read``, ``bytes_written``; ``seconds`` sums the time spent in reads.
    """

    def __init__(self, settings: RedisL2Settings, *, client: Any = None) -> None:
        self.settings = settings
        self.stats: Counter[str] = Counter()
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._failures = 0
        self._open = False
        self._closed = threading.Event()
        self._client = client if client is not None else _client_for(settings)
        self._writes: queue.Queue[tuple[str, Payload] | None] = queue.Queue(_WRITE_QUEUE)
        self._writer = threading.Thread(target=self._write_loop, name="mediaref-l2-writer")
        self._writer.daemon = True
        self._writer.start()

    @property
    def circuit_open(self) -> bool:
        return self._open

    def redis_key(self, mm_hash: str) -> str:
        return f"{self.settings.prefix}:{self.settings.namespace}:{mm_hash}"

    def get_many(self, mm_hashes: Sequence[str]) -> list[Payload | None]:
        """The verified payload stored for each hash, None where there is none (or Redis
        cannot say in time)."""
        if not mm_hashes:
            return []
        if self._open:
            self.stats["skipped"] += len(mm_hashes)
            return [None] * len(mm_hashes)
        keys = [self.redis_key(h) for h in mm_hashes]
        start = time.perf_counter()
        try:
            values = self._client.mget(keys)
        except Exception as exc:  # redis errors, timeouts, a garbled reply: all the same here
            self._failed(exc)
            return [None] * len(mm_hashes)
        finally:
            self.seconds += time.perf_counter() - start
        self._succeeded()
        found: list[Payload | None] = []
        for key, value in zip(keys, values, strict=True):
            found.append(self._verified(key, value))
        return found

    def _verified(self, key: str, value: object) -> Payload | None:
        if value is None:
            self.stats["misses"] += 1
            return None
        if not isinstance(value, bytes) or len(value) < len(_MAGIC) + _MAC_BYTES:
            self.stats["rejected"] += 1
            return None
        self.stats["bytes_read"] += len(value)
        mac = value[len(_MAGIC) : len(_MAGIC) + _MAC_BYTES]
        # A view: slicing the reply would copy its megabytes once more (the reply is this
        # process's own bytes, which nothing else writes).
        payload = memoryview(value)[len(_MAGIC) + _MAC_BYTES :]
        expected = _mac(self.settings.secret, key.encode(), payload)
        if value[: len(_MAGIC)] != _MAGIC or not hmac.compare_digest(mac, expected):
            self.stats["rejected"] += 1
            return None
        self.stats["hits"] += 1
        return payload

    def put(self, mm_hash: str, payload: Payload) -> None:
        """Queue ``payload`` to be written under ``mm_hash``; never blocks."""
        if len(payload) + len(_MAGIC) + _MAC_BYTES > self.settings.max_entry_bytes:
            self.stats["not_written"] += 1
            return
        try:
            self._writes.put_nowait((mm_hash, payload))
        except queue.Full:
            self.stats["not_written"] += 1

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every queued write was attempted (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._writes.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)

    def _write_loop(self) -> None:
        while True:
            job = self._writes.get()
            try:
                if job is None:
                    return
                self._write(*job)
            finally:
                self._writes.task_done()

    def _write(self, mm_hash: str, payload: Payload) -> None:
        if self._open:
            self.stats["not_written"] += 1
            return
        key = self.redis_key(mm_hash)
        value = _MAGIC + _mac(self.settings.secret, key.encode(), payload) + payload
        try:
            self._client.set(key, value, ex=self.settings.ttl_s)
        except Exception as exc:
            self.stats["not_written"] += 1
            self._failed(exc)
            return
        self._succeeded()
        self.stats["written"] += 1
        self.stats["bytes_written"] += len(value)

    def _failed(self, exc: BaseException) -> None:
        self.stats["errors"] += 1
        with self._lock:
            self._failures += 1
            if self._open or self._failures < self.settings.failures_to_open:
                return
            self._open = True
        logger.warning(
            "the Redis cache at %s failed %d times in a row (%s); requests go without it "
            "and it is retried every %.1f s",
            _redacted(self.settings.url),
            self.settings.failures_to_open,
            type(exc).__name__,
            self.settings.retry_after_s,
        )
        threading.Thread(
            target=self._probe_until_back, name="mediaref-l2-probe", daemon=True
        ).start()

    def _succeeded(self) -> None:
        self._failures = 0

    def _probe_until_back(self) -> None:
        while not self._closed.wait(self.settings.retry_after_s):
            try:
                self._client.ping()
            except Exception:
                continue
            with self._lock:
                self._failures, self._open = 0, False
            logger.info("the Redis cache at %s answers again", _redacted(self.settings.url))
            return

    def close(self) -> None:
        self._closed.set()
        try:
            self._writes.put_nowait(None)
        except queue.Full:
            pass
        self._writer.join(5)
        close = getattr(self._client, "close", None)
        if callable(close):
            close()


def _client_for(settings: RedisL2Settings) -> Any:
    try:
        import redis
    except ImportError as exc:  # an optional dependency
        raise ImportError(
            "the Redis cache needs the redis package: pip install 'mediaref[redis]'"
        ) from exc
    return redis.Redis.from_url(
        settings.url,
        socket_timeout=settings.timeout_s,
        socket_connect_timeout=settings.timeout_s,
        retry_on_timeout=False,
        health_check_interval=0,
    )


def _redacted(url: str) -> str:
    """``url`` without a password, for logs."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"


# -- the layered cache -------------------------------------------------------------------------


class RedisLayeredProcessorCache(LayeredProcessorCache):
    """A local :class:`MultiModalProcessorOnlyCache` with a :class:`RedisL2Store` under it (see
    the module docstring). Usable without the server: pass it as a processor's ``cache``."""

    def __init__(
        self, local: MultiModalProcessorOnlyCache, store: RedisL2Store, codec: PromptUpdatesCodec
    ) -> None:
        super().__init__(local, [store], codec)
        self.store = store


__all__ = [
    "RedisL2Settings",
    "RedisL2Store",
    "RedisLayeredProcessorCache",
    "load_secret",
    "settings_namespace",
]
