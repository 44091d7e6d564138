"""The sender (frontend) cache mirrors the receiver (engine-core) cache when both see one order.

A driver plays the processor: it asks the sender ``is_cached``, supplies the processed item for
each miss and ``None`` for each hit, and forwards what the sender returns to the receiver.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mediaref.cache import (
    MultiModalCacheMissError,
    MultiModalProcessorSenderCache,
    MultiModalReceiverCache,
)
from mediaref.inputs import MultiModalFieldElem, MultiModalFlatField, MultiModalKwargsItem

GiB = 1 << 30
BUDGET_BYTES = 256


def item_of(nbytes: int) -> MultiModalKwargsItem:
    data = torch.zeros(nbytes, dtype=torch.uint8)
    field = MultiModalFlatField([slice(0, nbytes)])
    return MultiModalKwargsItem({"pixel_values": MultiModalFieldElem(data, field)})


@dataclass
class Pool:
    """Processed items by hash: one hash always means the same content and size."""

    sizes: dict[str, int]
    items: dict[str, MultiModalKwargsItem] = field(init=False)
    updates: dict[str, list[str]] = field(init=False)

    def __post_init__(self) -> None:
        self.items = {h: item_of(n) for h, n in self.sizes.items()}
        self.updates = {h: [f"update-of-{h}"] for h in self.sizes}


@dataclass
class Sent:
    """One request as it left the frontend: what goes over the wire, per position."""

    wire: list[MultiModalKwargsItem | None]
    hashes: list[str]


def process_on_frontend(
    sender: MultiModalProcessorSenderCache,
    pool: Pool,
    hashes: Sequence[str],
    is_cached: Sequence[bool] | None = None,
) -> Sent:
    """The processor's cached apply; ``is_cached`` may be a stale answer taken earlier."""
    if is_cached is None:
        is_cached = sender.is_cached(hashes)
    inputs = [
        None if hit else (pool.items[h], pool.updates[h])
        for h, hit in zip(hashes, is_cached, strict=True)
    ]
    outputs = sender.get_and_update(inputs, list(hashes))
    for h, (_, updates) in zip(hashes, outputs, strict=True):
        assert updates == pool.updates[h]  # prompt updates come back on hits too
    return Sent([item for item, _ in outputs], list(hashes))


def deliver_to_engine_core(receiver: MultiModalReceiverCache, pool: Pool, sent: Sent) -> None:
    received = receiver.get_and_update(sent.wire, sent.hashes)
    for h, item in zip(sent.hashes, received, strict=True):
        assert item is pool.items[h]


def assert_mirrored(
    sender: MultiModalProcessorSenderCache, receiver: MultiModalReceiverCache
) -> None:
    assert sender.cached_hashes() == receiver.cached_hashes()
    assert sender.make_stats().size_bytes == receiver.make_stats().size_bytes


def random_pool(rng: random.Random) -> Pool:
    sizes = {f"h{i:02d}": rng.randint(1, 120) for i in range(40)}
    sizes.update({f"huge{i}": BUDGET_BYTES + rng.randint(1, 50) for i in range(3)})
    return Pool(sizes)


def random_request(rng: random.Random, pool: Pool) -> list[str]:
    names = sorted(pool.sizes)
    hot = names[:8]
    return [
        rng.choice(hot) if rng.random() < 0.6 else rng.choice(names)
        for _ in range(rng.randint(1, 5))
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sender_predicts_the_receiver_over_random_traffic(seed: int) -> None:
    rng = random.Random(seed)
    pool = random_pool(rng)
    sender = MultiModalProcessorSenderCache(BUDGET_BYTES / GiB)
    receiver = MultiModalReceiverCache(BUDGET_BYTES / GiB)
    seen = {"evictions": 0, "skipped_sends": 0, "oversize_sends": 0, "stale_refusals": 0}

    for _ in range(2500):
        request = random_request(rng, pool)
        stale_answer = None
        if rng.random() < 0.15:
            # Phase 1 of this request ran, then another request went all the way through.
            stale_answer = sender.is_cached(request)
            other = process_on_frontend(sender, pool, random_request(rng, pool))
            deliver_to_engine_core(receiver, pool, other)
        before = sender.cached_hashes()
        try:
            sent = process_on_frontend(sender, pool, request, stale_answer)
        except MultiModalCacheMissError:
            # A refused batch changes nothing; phase 2 re-derives the cache state and retries.
            assert sender.cached_hashes() == before
            seen["stale_refusals"] += 1
            sent = process_on_frontend(sender, pool, request)
        deliver_to_engine_core(receiver, pool, sent)  # never a miss: that is the claim
        assert_mirrored(sender, receiver)

        seen["evictions"] += len(before - sender.cached_hashes())
        seen["skipped_sends"] += sum(item is None for item in sent.wire)
        seen["oversize_sends"] += sum(h.startswith("huge") for h in sent.hashes)

    assert all(count > 0 for count in seen.values()), seen  # every path was exercised


requests_strategy = st.lists(
    st.lists(st.sampled_from([f"k{i}" for i in range(12)]), min_size=1, max_size=6),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(0, 120), min_size=12, max_size=12), requests=requests_strategy)
def test_sender_predicts_the_receiver_for_any_request_sequence(
    sizes: list[int], requests: list[list[str]]
) -> None:
    pool = Pool({f"k{i}": size for i, size in enumerate(sizes)})
    sender = MultiModalProcessorSenderCache(100 / GiB)
    receiver = MultiModalReceiverCache(100 / GiB)
    for request in requests:
        deliver_to_engine_core(receiver, pool, process_on_frontend(sender, pool, request))
        assert_mirrored(sender, receiver)


# -- the same checks fail when the order is broken ---------------------------------------


def test_requests_delivered_out_of_order_make_the_engine_core_miss() -> None:
    pool = Pool({"a": 60, "b": 60})
    sender = MultiModalProcessorSenderCache(100 / GiB)
    receiver = MultiModalReceiverCache(100 / GiB)
    first = process_on_frontend(sender, pool, ["a"])
    second = process_on_frontend(sender, pool, ["b"])  # evicts a on the frontend
    third = process_on_frontend(sender, pool, ["b"])  # a hit: nothing is sent for b
    assert third.wire == [None]

    deliver_to_engine_core(receiver, pool, second)
    deliver_to_engine_core(receiver, pool, first)  # here a evicts b on the engine core
    with pytest.raises(MultiModalCacheMissError, match="b") as info:
        deliver_to_engine_core(receiver, pool, third)
    assert info.value.mm_hashes == ["b"]


def test_random_traffic_replayed_with_swapped_neighbours_misses() -> None:
    rng = random.Random(7)
    pool = random_pool(rng)
    sender = MultiModalProcessorSenderCache(BUDGET_BYTES / GiB)
    sent = [process_on_frontend(sender, pool, random_request(rng, pool)) for _ in range(400)]
    reordered: list[Any] = []
    for i in range(0, len(sent) - 1, 2):
        reordered += [sent[i + 1], sent[i]]

    receiver = MultiModalReceiverCache(BUDGET_BYTES / GiB)
    with pytest.raises(MultiModalCacheMissError):
        for request in reordered:
            deliver_to_engine_core(receiver, pool, request)

    in_order = MultiModalReceiverCache(BUDGET_BYTES / GiB)  # the control: same traffic, in order
    for request in sent:
        deliver_to_engine_core(in_order, pool, request)
    assert_mirrored(sender, in_order)
