"""The render server's Prometheus metrics (``GET /metrics``, text format via ``prometheus_client``).

Every metric lives in the server's own :class:`~prometheus_client.CollectorRegistry`, not the
process-global one, so two servers in one process (the tests) never share or clash counters.

====================================================  ==========================================
``mediaref_requests_total{route,status}``              requests answered, by route and status
``mediaref_requests_in_flight``                        requests being rendered now
``mediaref_request_seconds{route}``                    whole request, body read to response
``mediaref_fetch_seconds``                             one request's chat parse with every fetch
                                                       (bytes and keys; no pixel decoded)
``mediaref_decode_seconds``                            one request's wait for its media decodes
``mediaref_hf_processing_seconds``                     one request's HF processor time (misses)
``mediaref_decodes_total{modality}``                   media items decoded (a cache hit decodes
                                                       nothing)
``mediaref_mm_cache_hits_total{model}``                processor-cache lookups that hit
``mediaref_mm_cache_misses_total{model}``              ... that missed
``mediaref_mm_cache_evictions_total{model}``           items the cache dropped to make room
``mediaref_mm_cache_bytes{model}``                     bytes the cache holds now
``mediaref_l2_cache_<event>_total{model}``             the Redis cache (``--cache-redis-url``):
                                                       hits, misses, rejected (failed the MAC),
                                                       errors, skipped (circuit open), written,
                                                       not_written, bytes_read, bytes_written
``mediaref_l2_cache_read_seconds_total{model}``        time spent reading it
``mediaref_l2_cache_circuit_open{model}``              1 while requests go without it
``mediaref_worker_cache_<event>_total{model}``         the workers' shared-memory cache
                                                       (``--workers``): the same events
``mediaref_workers``, ``mediaref_workers_reporting``   with ``--workers N``: N, and how many
                                                       this scrape sums (every figure above is
                                                       the workers' sum)
====================================================  ==========================================

The cache figures are read from each model's cache when scraped (its own cumulative counters),
so they cost nothing per request.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Render latencies span a cache hit (~1 ms) to a cold video (seconds).
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)

# A seen-hash set this much larger than after the last sweep is swept (bounds its size).
_SWEEP_GROWTH = 2
_MIN_SWEEP = 1024


class _StatsLike(Protocol):
    hits: int
    total: int
    size_bytes: int


class ProcessorCacheLike(Protocol):
    """What the metrics read of a processor cache (``BaseMultiModalProcessorCache``)."""

    def make_stats(self, *, delta: bool = False) -> _StatsLike: ...

    def is_cached(self, mm_hashes: Sequence[str]) -> list[bool]: ...


class _CacheWatch:
    """One model's cache, and the hashes it holds as far as responses showed (for evictions).

    The cache keeps no eviction counter. Every item a miss stores shows up in that request's
    response, so the hashes seen cover everything stored; an entry is a seen hash still cached.
    Then ``evictions = misses - items not stored (larger than the whole budget) - entries``,
    exact when requests do not overlap (under concurrency an item evicted before its own request
    is checked counts as not stored instead).
    """

    def __init__(self, cache: ProcessorCacheLike) -> None:
        self.cache = cache
        self._seen: set[str] = set()
        self._not_stored = 0
        self._evictions = 0
        self._swept_size = 0
        self._lock = threading.Lock()

    def saw(self, mm_hashes: Iterable[str]) -> None:
        hashes = list(dict.fromkeys(mm_hashes))
        if not hashes:
            return
        cached = self.cache.is_cached(hashes)
        with self._lock:
            self._seen.update(hashes)
            self._not_stored += cached.count(False)
            grown = len(self._seen) > max(_MIN_SWEEP, _SWEEP_GROWTH * self._swept_size)
        if grown:
            self._sweep()

    def _sweep(self) -> int:
        """Forget the seen hashes no longer cached; the number of entries left."""
        with self._lock:
            seen = list(self._seen)
        gone = [h for h, cached in zip(seen, self.cache.is_cached(seen), strict=True) if not cached]
        with self._lock:
            self._seen.difference_update(gone)
            self._swept_size = len(self._seen)
            return self._swept_size

    def read(self) -> tuple[_StatsLike, int]:
        """The cache's counters, and the evictions so far."""
        entries = self._sweep()
        stats = self.cache.make_stats()
        with self._lock:
            misses = stats.total - stats.hits
            self._evictions = max(self._evictions, misses - self._not_stored - entries)
            return stats, self._evictions


class _CacheCollector(Collector):
    def __init__(self, watches: Mapping[str, _CacheWatch]) -> None:
        self._watches = watches

    def collect(self) -> Iterator[Metric]:
        hits = CounterMetricFamily(
            "mediaref_mm_cache_hits", "Processor-cache lookups that hit", labels=["model"]
        )
        misses = CounterMetricFamily(
            "mediaref_mm_cache_misses", "Processor-cache lookups that missed", labels=["model"]
        )
        evictions = CounterMetricFamily(
            "mediaref_mm_cache_evictions", "Items the processor cache dropped", labels=["model"]
        )
        size = GaugeMetricFamily(
            "mediaref_mm_cache_bytes", "Bytes the processor cache holds", labels=["model"]
        )
        for model, watch in self._watches.items():
            stats, evicted = watch.read()
            hits.add_metric([model], stats.hits)
            misses.add_metric([model], stats.total - stats.hits)
            evictions.add_metric([model], evicted)
            size.add_metric([model], stats.size_bytes)
        yield from (hits, misses, evictions, size)


class L2StoreLike(Protocol):
    """What the metrics read of a :class:`~mediaref.cache.redis_l2.RedisL2Store`."""

    @property
    def stats(self) -> Mapping[str, int]: ...

    @property
    def seconds(self) -> float: ...

    @property
    def circuit_open(self) -> bool: ...


L2_EVENTS = (
    "hits",
    "misses",
    "rejected",
    "errors",
    "skipped",
    "written",
    "not_written",
    "bytes_read",
    "bytes_written",
)


class _StoreCollector(Collector):
    """A shared store's counters: ``mediaref_{kind}_cache_*`` (the Redis cache: ``l2``; the
    workers' shared memory: ``worker``)."""

    def __init__(self, kind: str, what: str, stores: Mapping[str, L2StoreLike]) -> None:
        self._kind = kind
        self._what = what
        self._stores = stores

    def collect(self) -> Iterator[Metric]:
        prefix = f"mediaref_{self._kind}_cache"
        events = {
            event: CounterMetricFamily(
                f"{prefix}_{event}", f"{self._what}: {event}", labels=["model"]
            )
            for event in L2_EVENTS
        }
        seconds = CounterMetricFamily(
            f"{prefix}_read_seconds", f"Time spent reading the {self._what}", labels=["model"]
        )
        circuit = GaugeMetricFamily(
            f"{prefix}_circuit_open",
            f"1 while requests go without the {self._what}",
            labels=["model"],
        )
        for model, store in self._stores.items():
            for event, family in events.items():
                family.add_metric([model], store.stats.get(event, 0))
            seconds.add_metric([model], store.seconds)
            circuit.add_metric([model], float(store.circuit_open))
        yield from (*events.values(), seconds, circuit)


class ServeMetrics:
    """The counters and histograms one server updates, in a registry of its own."""

    def __init__(
        self,
        caches: Mapping[str, ProcessorCacheLike | None] | None = None,
        l2_stores: Mapping[str, L2StoreLike] | None = None,
        worker_stores: Mapping[str, L2StoreLike] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "mediaref_requests",
            "Requests answered, by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "mediaref_requests_in_flight", "Requests being rendered now", registry=self.registry
        )
        self.request_seconds = Histogram(
            "mediaref_request_seconds",
            "Whole render request, body read to response",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.fetch_seconds = Histogram(
            "mediaref_fetch_seconds",
            "One request's chat parse with its media fetches (no pixel decoded)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.decode_seconds = Histogram(
            "mediaref_decode_seconds",
            "One request's wait for its media decodes",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.hf_seconds = Histogram(
            "mediaref_hf_processing_seconds",
            "One request's HF processor time (cache misses only)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.responses_cut = Counter(
            "mediaref_responses_cut",
            "Connections closed because the client took its response slower than "
            "--min-send-rate-kb or --send-timeout",
            registry=self.registry,
        )
        self.decodes = Counter(
            "mediaref_decodes",
            "Media items decoded",
            ["modality"],
            registry=self.registry,
        )
        self._watches = {
            model: _CacheWatch(cache) for model, cache in (caches or {}).items() if cache
        }
        if self._watches:
            self.registry.register(_CacheCollector(self._watches))
        if l2_stores:
            self.registry.register(_StoreCollector("l2", "Redis cache", l2_stores))
        if worker_stores:
            self.registry.register(
                _StoreCollector("worker", "workers' shared cache", worker_stores)
            )

    def observe_stages(self, stage_secs: Mapping[str, float]) -> None:
        """A rendered request's stage timings (a :class:`~mediaref.registry.TimingContext`'s)."""
        if "decode_media" in stage_secs:
            self.decode_seconds.observe(stage_secs["decode_media"])
        if "apply_hf_processor" in stage_secs:
            self.hf_seconds.observe(stage_secs["apply_hf_processor"])

    def observe_cached(self, model: str, mm_hashes: Iterable[str]) -> None:
        """A rendered request's item hashes, so evictions can be counted later."""
        watch = self._watches.get(model)
        if watch is not None:
            watch.saw(mm_hashes)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)


__all__ = [
    "CONTENT_TYPE",
    "L2_EVENTS",
    "LATENCY_BUCKETS",
    "L2StoreLike",
    "ProcessorCacheLike",
    "ServeMetrics",
]
