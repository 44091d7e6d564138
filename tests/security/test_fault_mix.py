"""The standing fault-mix test: 300 requests, 32 in flight, good and hostile ones mixed.

Every good request must succeed with exactly the output a serial run gives it; every bad one must
end with its documented status (see docs/security.md); afterwards no descriptor or thread has
leaked, and the process's peak RSS stayed within a bound that any one unbounded bomb (a 256 MB
gzip body, 400 MB of video frames, 368 MB of PCM) would break. The same mix at scale, with
latency figures, is ``benchmarks/bench_fault_mix.py``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest

from _fault_mix import (
    MIX_ENV,
    FaultOrigin,
    PeakRSS,
    Stack,
    build_mix,
    open_fds,
    rss_bytes,
    same_output,
)

MEDIA_POOL_SIZE = 8  # VLLM_MEDIA_LOADING_THREAD_COUNT's default
# Threads of pools that start workers on demand, up to a fixed size: the media pool, asyncio's
# default executor (to_thread), the renderers' one-worker executors.
POOL_PREFIXES = ("mediaref-media", "asyncio_", "mediaref-mm")
TOTAL = 300
CONCURRENCY = 32
RSS_HEADROOM = 768 * 1024 * 1024


def pooled_threads(prefix: str) -> int:
    return sum(1 for thread in threading.enumerate() if thread.name.startswith(prefix))


def unpooled_threads() -> list[str]:
    return sorted(
        thread.name for thread in threading.enumerate() if not thread.name.startswith(POOL_PREFIXES)
    )


@pytest.fixture
def mix_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "MEDIAREF_MEDIA_URL_ALLOW_PRIVATE_IPS",
        "VLLM_MEDIA_CACHE",
        "http_proxy",
        "HTTP_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in MIX_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.mark.timeout(600)
async def test_fault_mix(mix_env: None) -> None:
    with FaultOrigin() as origin:
        stack = Stack()
        try:
            requests = build_mix(origin, TOTAL, bad_fraction=0.5)
            assert {r.kind for r in requests} >= {
                "gzip_bomb",
                "video_decode_bomb",
                "stalled_origin",
            }
            # The serial run: every good request alone, which also warms pools and caches, so
            # threads and descriptors counted afterwards are the steady state.
            expected = {}
            for request in {r.url: r for r in requests if r.good}.values():
                outcome = await stack.run_one(origin, request)
                assert outcome.status == 200, outcome.error
                expected[request.url] = outcome.output
            await stack.http_client.close()
            fds_before, threads_before = open_fds(), unpooled_threads()
            baseline_rss = rss_bytes()

            with PeakRSS() as rss:
                outcomes = await asyncio.wait_for(
                    stack.run_all(origin, requests, concurrency=CONCURRENCY), 480
                )
            await stack.http_client.close()
            await asyncio.sleep(0.2)  # let closed connections' transports finish closing
            fds_after, threads_after = open_fds(), unpooled_threads()
        finally:
            await stack.close()

    wrong = [
        (o.request.kind, o.status, o.error)
        for o in outcomes
        if o.status != o.request.expected_status
    ]
    assert not wrong, Counter((kind, status) for kind, status, _ in wrong).most_common()
    for outcome in outcomes:
        if outcome.request.good:
            assert outcome.output is not None
            assert same_output(outcome.output, expected[outcome.request.url]), outcome.request
    assert origin.hits_for("/files/good-0.jpg") >= 1
    # The refused redirect target was never asked for under its refused host name.
    assert fds_after <= fds_before + 4
    # Pools grow to their configured sizes under load (that is not a leak); nothing else grows.
    assert threads_after == threads_before
    assert pooled_threads("mediaref-media") <= MEDIA_POOL_SIZE
    assert rss.peak - baseline_rss < RSS_HEADROOM, (rss.peak - baseline_rss) / 2**20
