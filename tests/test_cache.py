"""The byte-budget caches: sizes, LRU order, oversize items, budget 0, misses, stats, locking."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from mediaref.cache import (
    CacheInfo,
    MultiModalCacheMissError,
    MultiModalProcessorCacheItem,
    MultiModalProcessorOnlyCache,
    MultiModalProcessorSenderCache,
    MultiModalReceiverCache,
)
from mediaref.cache._items import PROMPT_UPDATE_NBYTES
from mediaref.cache._lru import ByteBudgetLRU
from mediaref.exceptions import MediaRefError, VLLMValidationError
from mediaref.inputs import (
    MultiModalBatchedField,
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalKwargsItem,
    estimate_nbytes,
)

GiB = 1 << 30


def budget(nbytes: int) -> float:
    """``mm_processor_cache_gb`` for an exact byte budget (a power-of-two ratio is exact)."""
    return nbytes / GiB


def flat(data: torch.Tensor) -> MultiModalFieldElem:
    return MultiModalFieldElem(data, MultiModalFlatField([slice(0, len(data))]))


def item_of(nbytes: int) -> MultiModalKwargsItem:
    return MultiModalKwargsItem({"pixel_values": flat(torch.zeros(nbytes, dtype=torch.uint8))})


def qwen_like_image_item() -> MultiModalKwargsItem:
    return MultiModalKwargsItem(
        {
            "pixel_values": flat(torch.randn(16, 1176)),
            "image_grid_thw": MultiModalFieldElem(
                torch.tensor([1, 4, 4]), MultiModalBatchedField()
            ),
            "image_embeds": flat(torch.zeros(3, 8, dtype=torch.bfloat16)),
        }
    )


def store(cache: MultiModalProcessorOnlyCache, mm_hash: str, nbytes: int) -> None:
    cache.get_and_update([(item_of(nbytes), [])], [mm_hash])


# -- sizes -------------------------------------------------------------------------------


def test_sizes_of_real_tensor_items_are_their_tensor_bytes() -> None:
    item = qwen_like_image_item()
    expected = 16 * 1176 * 4 + 3 * 8 + 3 * 8 * 2  # float32 pixels, int64 grid, bf16 embeds
    updates = ["update-0", "update-1"]

    sender = MultiModalProcessorSenderCache(1)
    receiver = MultiModalReceiverCache(1)
    processor_only = MultiModalProcessorOnlyCache(1)
    sender.get_and_update([(item, updates)], ["h"])
    receiver.get_and_update([item], ["h"])
    processor_only.get_and_update([(item, updates)], ["h"])

    assert sender.make_stats().size_bytes == expected
    assert receiver.make_stats().size_bytes == expected
    # Only the frontend-only cache holds the prompt updates and counts them.
    assert processor_only.make_stats().size_bytes == expected + 2 * PROMPT_UPDATE_NBYTES
    assert MultiModalProcessorCacheItem(item, updates).nbytes == expected + 2 * PROMPT_UPDATE_NBYTES


def test_generic_values_are_measured_by_content_not_by_python_shell() -> None:
    array = np.zeros((10, 10), dtype=np.float64)
    tensor = torch.zeros(25, dtype=torch.int32)
    assert estimate_nbytes(array) == 800
    assert estimate_nbytes(tensor) == 100
    assert estimate_nbytes([tensor, (array, tensor)]) == 1000
    assert estimate_nbytes({"a": tensor, "b": {"c": array}}) == 900
    assert estimate_nbytes("some text") == sys.getsizeof("some text")

    lru: ByteBudgetLRU[str, object] = ByteBudgetLRU(1000)
    assert lru.put("t", [tensor, tensor]) and lru.size_bytes == 200


def test_the_lru_takes_item_assignment_as_vllms_cache_does() -> None:
    lru: ByteBudgetLRU[str, object] = ByteBudgetLRU(1000)
    lru["a"] = torch.zeros(25, dtype=torch.float32)  # 100 bytes
    lru["a"] = torch.zeros(50, dtype=torch.float32)  # replaced, not added
    assert lru.currsize == lru.size_bytes == 200 and lru["a"].numel() == 50
    with pytest.raises(ValueError, match="too large"):
        lru["b"] = torch.zeros(500, dtype=torch.float32)  # 2,000 bytes: over the budget
    with pytest.raises(KeyError):
        lru["b"]
    assert len(lru) == 1


# -- LRU by bytes ------------------------------------------------------------------------


def test_evicts_least_recently_used_until_the_new_item_fits() -> None:
    cache = MultiModalProcessorOnlyCache(budget(100))
    store(cache, "a", 40)
    store(cache, "b", 40)
    cache.get_and_update([None], ["a"])  # a becomes most recently used
    store(cache, "c", 40)
    assert cache.cached_hashes() == {"a", "c"}  # b, not a, made room

    store(cache, "d", 60)  # needs 40 bytes back: a is now the oldest
    assert cache.cached_hashes() == {"c", "d"}
    assert cache.make_stats().size_bytes == 100

    store(cache, "e", 100)  # needs everything
    assert cache.cached_hashes() == {"e"}


def test_item_larger_than_the_cache_is_served_but_not_stored_and_evicts_nothing() -> None:
    cache = MultiModalProcessorOnlyCache(budget(100))
    store(cache, "a", 40)
    store(cache, "b", 40)
    huge = item_of(101)

    [(served, updates)] = cache.get_and_update([(huge, ["u"])], ["huge"])

    assert served is huge and updates == ["u"]
    assert cache.cached_hashes() == {"a", "b"}
    assert cache.make_stats().size_bytes == 80
    with pytest.raises(MultiModalCacheMissError):
        cache.get_and_update([None], ["huge"])


def test_an_item_exactly_the_budget_is_stored() -> None:
    cache = MultiModalReceiverCache(budget(100))
    cache.get_and_update([item_of(100)], ["exact"])
    assert cache.cached_hashes() == {"exact"}


def test_budget_zero_disables_caching() -> None:
    for cache in (MultiModalProcessorOnlyCache(0), MultiModalProcessorSenderCache(0)):
        empty, item = item_of(0), item_of(8)
        outputs = cache.get_and_update([(empty, []), (item, [])], ["empty", "item"])
        assert [out[0] for out in outputs] == [empty, item]  # passed through
        assert cache.is_cached(["empty", "item"]) == [False, False]
        assert cache.make_stats().size_bytes == 0
        with pytest.raises(MultiModalCacheMissError):
            cache.get_and_update([None], ["empty"])


def test_budget_defaults_to_the_environment_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDIAREF_MM_PROCESSOR_CACHE_GB", raising=False)
    assert MultiModalReceiverCache().capacity_bytes == 4 * GiB
    monkeypatch.setenv("MEDIAREF_MM_PROCESSOR_CACHE_GB", "0.5")
    assert MultiModalProcessorOnlyCache().capacity_bytes == GiB // 2
    assert MultiModalProcessorOnlyCache(2).capacity_bytes == 2 * GiB  # the argument wins


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_invalid_budget_is_a_validation_error(bad: float) -> None:
    with pytest.raises(VLLMValidationError, match="mm_processor_cache_gb") as info:
        MultiModalProcessorSenderCache(bad)
    assert info.value.parameter == "mm_processor_cache_gb"


# -- lookups -----------------------------------------------------------------------------


def test_is_cached_does_not_touch_the_eviction_order() -> None:
    def fill() -> MultiModalProcessorOnlyCache:
        cache = MultiModalProcessorOnlyCache(budget(100))
        store(cache, "a", 50)
        store(cache, "b", 50)
        return cache

    asked = fill()
    for _ in range(5):
        assert asked.is_cached(["a"]) == [True] and asked.is_cached_item("a")
    store(asked, "c", 50)
    assert asked.cached_hashes() == {"b", "c"}  # a stayed the oldest

    used = fill()  # the control: a real use does reorder, so the check above can fail
    used.get_and_update([None], ["a"])
    store(used, "c", 50)
    assert used.cached_hashes() == {"a", "c"}


def test_touch_marks_an_item_most_recently_used() -> None:
    sender = MultiModalProcessorSenderCache(budget(100))
    receiver = MultiModalReceiverCache(budget(100))
    for name in ("a", "b"):
        sender.get_and_update([(item_of(50), [])], [name])
        receiver.get_and_update([item_of(50)], [name])
    sender.touch_sender_cache_item("a")
    receiver.touch_receiver_cache_item("a")
    sender.touch_sender_cache_item("never-stored")  # a no-op, not an error
    sender.get_and_update([(item_of(50), [])], ["c"])
    receiver.get_and_update([item_of(50)], ["c"])
    assert sender.cached_hashes() == receiver.cached_hashes() == {"a", "c"}


def test_hits_of_a_request_are_served_before_its_misses_can_evict_them() -> None:
    cache = MultiModalProcessorOnlyCache(budget(100))
    cached = item_of(40)
    cache.get_and_update([(cached, [])], ["a"])

    # A position-by-position loop would store b first, evicting a, then miss on a.
    outputs = cache.get_and_update([(item_of(70), []), None], ["b", "a"])

    assert outputs[1][0] is cached
    assert cache.cached_hashes() == {"b"}


def test_a_hash_repeated_in_one_request_is_stored_once_and_then_hit() -> None:
    cache = MultiModalProcessorOnlyCache(budget(100))
    item = item_of(10)
    outputs = cache.get_and_update([(item, []), None], ["h", "h"])
    assert outputs == [(item, []), (item, [])]
    assert cache.make_stats() == CacheInfo(hits=1, total=2, size_bytes=10)

    # Too large to store: the second position borrows the data of the first.
    huge = item_of(200)
    outputs = cache.get_and_update([(huge, []), None], ["huge", "huge"])
    assert [out[0] for out in outputs] == [huge, huge]


def test_processor_only_hit_returns_the_stored_item_and_prompt_updates() -> None:
    cache = MultiModalProcessorOnlyCache(budget(1000))
    item = item_of(10)
    cache.get_and_update([(item, ["u1", "u2"])], ["h"])
    # Even when the processor supplies a fresh copy, the stored one is served.
    [(served, updates)] = cache.get_and_update([(item_of(10), ["other"])], ["h"])
    assert served is item and updates == ["u1", "u2"]
    assert cache.get_and_update_item(None, "h") == (item, ["u1", "u2"])


# -- misses ------------------------------------------------------------------------------


def test_miss_error_names_every_missing_hash_and_changes_nothing() -> None:
    cache = MultiModalReceiverCache(budget(1000))
    cache.get_and_update([item_of(10)], ["present"])
    new_item = item_of(10)

    with pytest.raises(MultiModalCacheMissError) as info:
        cache.get_and_update([None, new_item, None, None], ["gone-1", "fresh", "present", "gone-2"])

    error = info.value
    assert error.mm_hashes == ["gone-1", "gone-2"]
    assert "gone-1" in str(error) and "gone-2" in str(error)
    assert isinstance(error, MediaRefError) and isinstance(error, LookupError)
    assert cache.cached_hashes() == {"present"}  # "fresh" was not stored by a refused batch
    assert cache.make_stats().total == 1


def test_items_and_hashes_must_pair_up() -> None:
    with pytest.raises(ValueError, match="2 items but 1 hashes"):
        MultiModalReceiverCache(1).get_and_update([item_of(1), item_of(1)], ["a"])


def test_receiver_fills_features_in_place_keyed_by_mm_hash_first() -> None:
    @dataclass
    class Feature:
        data: MultiModalKwargsItem | None
        identifier: str
        mm_hash: str | None = None

    cache = MultiModalReceiverCache(budget(1000))
    item = item_of(10)
    cache.get_and_update([item], ["content-hash"])
    features = [
        Feature(None, "lora-prefixed-id", mm_hash="content-hash"),
        Feature(None, "content-hash"),
        Feature(item_of(5), "new"),
    ]

    assert cache.get_and_update_features(features) is features
    assert features[0].data is item and features[1].data is item
    assert cache.is_cached(["new"]) == [True]


# -- housekeeping ------------------------------------------------------------------------


def test_clear_cache_drops_items_but_keeps_counting() -> None:
    cache = MultiModalProcessorSenderCache(budget(1000))
    cache.get_and_update([(item_of(10), []), (item_of(10), [])], ["a", "b"])
    cache.get_and_update([None], ["a"])
    cache.clear_cache()
    assert cache.is_cached(["a", "b"]) == [False, False]
    assert cache.make_stats() == CacheInfo(hits=1, total=3, size_bytes=0)
    with pytest.raises(MultiModalCacheMissError, match="a"):
        cache.get_and_update([None], ["a"])


def test_stats_count_queries_and_hits_and_report_deltas() -> None:
    cache = MultiModalProcessorSenderCache(budget(1000))
    cache.get_and_update([(item_of(10), []), (item_of(20), [])], ["a", "b"])
    assert cache.make_stats(delta=True) == CacheInfo(hits=0, total=2, size_bytes=30)
    cache.get_and_update([None, None, (item_of(5), [])], ["a", "b", "c"])
    cache.is_cached(["a", "b", "c"])  # not a query of the cache's contents for stats
    delta = cache.make_stats(delta=True)
    assert delta == CacheInfo(hits=2, total=3, size_bytes=35)
    assert delta.hit_ratio == pytest.approx(2 / 3)
    assert cache.make_stats() == CacheInfo(hits=2, total=5, size_bytes=35)


# -- locking -----------------------------------------------------------------------------


class _LoggedItem(MultiModalKwargsItem):
    """An item that logs when the cache measures it and can hold the measuring thread."""

    def setup(self, name: str, log: list[str], gate: threading.Event | None = None) -> _LoggedItem:
        self.name, self.log, self.gate, self.entered = name, log, gate, threading.Event()
        return self

    @property
    def nbytes(self) -> int:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(30), "test gate never opened"
        self.log.append(self.name)
        return 8


def test_a_batch_is_atomic_with_respect_to_other_threads() -> None:
    cache = MultiModalProcessorSenderCache(budget(1000))
    log: list[str] = []
    gate = threading.Event()
    first_a = _LoggedItem().setup("A1", log, gate)
    second_a = _LoggedItem().setup("A2", log)
    other = _LoggedItem().setup("B", log)

    thread_a = threading.Thread(
        target=cache.get_and_update, args=([(first_a, []), (second_a, [])], ["a1", "a2"])
    )
    thread_b = threading.Thread(target=cache.get_and_update, args=([(other, [])], ["b"]))
    thread_a.start()
    assert first_a.entered.wait(30)  # A is halfway through its batch, holding it open
    thread_b.start()
    thread_b.join(timeout=1.0)  # without the lock, B would finish here, ahead of A
    gate.set()
    thread_a.join(timeout=30)
    thread_b.join(timeout=30)

    assert not thread_a.is_alive() and not thread_b.is_alive()
    assert log == ["A1", "A2", "B"]
    assert cache.cached_hashes() == {"a1", "a2", "b"}
