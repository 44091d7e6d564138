"""vLLM 0.33's ``vllm.multimodal.cache`` surface at ``mediaref.cache``: base, lru, factories.

(The shared-memory pair is in test_cache_shm.py; LRU order, budgets and batching in test_cache.py
and test_cache_mirror.py.)
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from mediaref.cache import (
    BaseMultiModalProcessorCache,
    BaseMultiModalReceiverCache,
    CacheInfo,
    LruKeyReplicatedReceiverCache,
    LruKeyReplicatedSenderCache,
    MultiModalCache,
    MultiModalCacheMissError,
    MultiModalProcessorCacheItem,
    MultiModalProcessorCacheItemMetadata,
    MultiModalProcessorOnlyCache,
    engine_receiver_cache_from_config,
    processor_cache_from_config,
    processor_only_cache_from_config,
    worker_receiver_cache_from_config,
)
from mediaref.cache.base import MultiModalCacheValue
from mediaref.inputs import (
    MultiModalBatchedField,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
)
from mediaref.processing.context import ModelConfig

GiB = 1 << 30


def item_of(nbytes: int, fill: int = 0) -> MultiModalKwargsItem:
    data = torch.full((nbytes,), fill, dtype=torch.uint8)
    return MultiModalKwargsItem({"x": MultiModalFieldElem(data, MultiModalBatchedField())})


def model_config(gb: float, cache_type: str = "lru", **extra: Any) -> Any:
    """A vLLM-shaped model config: multimodal settings behind get_multimodal_config()."""
    mm = SimpleNamespace(mm_processor_cache_gb=gb, mm_processor_cache_type=cache_type, **extra)
    return SimpleNamespace(get_multimodal_config=lambda: mm, supports_multimodal_inputs=True)


def vllm_config(gb: float = 1.0, cache_type: str = "lru", **parallel: Any) -> Any:
    settings = {"world_size": 1, "data_parallel_size": 1, "_api_process_count": 1, **parallel}
    return SimpleNamespace(
        model_config=model_config(gb, cache_type), parallel_config=SimpleNamespace(**settings)
    )


# --- sizes ----------------------------------------------------------------------------------------


def test_multimodal_cache_sizes_values_by_their_tensors() -> None:
    item = item_of(100)
    assert MultiModalCache.get_item_size(item) == 100
    assert MultiModalCache.get_item_size(MultiModalKwargsItems({"image": [item, item]})) == 200
    assert (
        MultiModalCache.get_item_size({"a": torch.zeros(4, dtype=torch.int32), "b": [item]}) == 116
    )
    assert MultiModalCache.get_leaf_size(MultiModalProcessorCacheItemMetadata(item, ["u"])) == 100
    assert MultiModalCache.get_item_size(item, debug=True) == 100
    assert MultiModalCache.get_item_complexity({"a": [1, 2], "b": (3,)}) == 3
    value: MultiModalCacheValue = item
    assert MultiModalCache.get_leaf_size(value) == 100


def test_get_lru_cache_budgets_by_item_size() -> None:
    lru = MultiModalCache.get_lru_cache(250 / GiB, MultiModalKwargsItem)
    assert lru.maxsize == 250
    assert lru.put_if_fits("a", item_of(100)) and lru.put_if_fits("b", item_of(100))
    assert lru.put_if_fits("c", item_of(100))  # evicts a
    assert "a" not in lru and "c" in lru
    assert not lru.put_if_fits("huge", item_of(251))
    assert lru.getsizeof(item_of(7)) == 7


def test_cache_if_fits_warns_once_and_keeps_serving(caplog: pytest.LogCaptureFixture) -> None:
    cache = LruKeyReplicatedReceiverCache(100 / GiB)
    lru = MultiModalCache.get_lru_cache(100 / GiB, MultiModalKwargsItem)
    with caplog.at_level(logging.WARNING, logger="mediaref.cache._base"):
        assert not cache.cache_if_fits(lru, "big", item_of(200))
        assert not cache.cache_if_fits(lru, "bigger", item_of(300))
        assert cache.cache_if_fits(lru, "small", item_of(10))
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "--mm-processor-cache-gb" in caplog.text


def test_cache_item_classes_take_vllms_arguments() -> None:
    item = item_of(10)
    metadata = MultiModalProcessorCacheItemMetadata(item, ["u"])
    assert metadata.item_size == 10 and metadata.prompt_updates == ["u"]
    stored = MultiModalProcessorCacheItem(item, ["u"])
    assert stored.item is item and stored.prompt_updates == ["u"]


# --- constructors read vLLM's configs and mediaref's -----------------------------------------------


def test_caches_are_sized_from_a_model_config() -> None:
    assert MultiModalProcessorOnlyCache(model_config(0.5)).capacity_bytes == GiB // 2
    assert LruKeyReplicatedSenderCache(model_config(0.25)).capacity_bytes == GiB // 4
    mediaref_config = ModelConfig(model="unused", mm_processor_cache_gb=0.125)
    assert LruKeyReplicatedReceiverCache(mediaref_config).capacity_bytes == GiB // 8
    assert MultiModalProcessorOnlyCache(2).capacity_bytes == 2 * GiB  # a number is the GiB


# --- the LRU pair ---------------------------------------------------------------------------------


def test_receiver_replaces_a_stored_item_with_what_the_sender_sent() -> None:
    receiver = LruKeyReplicatedReceiverCache(1000 / GiB)
    old, new = item_of(10, fill=1), item_of(10, fill=2)
    receiver.get_and_update_item(old, "h")
    assert receiver.get_and_update_item(new, "h") is new
    assert receiver.get_and_update_item(None, "h") is new
    # A replacement too large to store must not leave the old item behind.
    receiver.get_and_update_item(item_of(2000), "h")
    assert receiver.is_cached(["h"]) == [False]


def test_sender_invalidate_makes_the_next_request_send_the_data() -> None:
    sender = LruKeyReplicatedSenderCache(1000 / GiB)
    item = item_of(10)
    sender.get_and_update_item((item, ["u"]), "h")
    assert sender.get_and_update_item(None, "h") == (None, ["u"])
    sender.invalidate("h")
    sender.invalidate("never-stored")
    assert not sender.is_cached_item("h")
    assert sender.get_and_update_item((item, ["u"]), "h") == (item, ["u"])


def test_miss_error_is_a_runtime_error_carrying_every_hash() -> None:
    receiver = LruKeyReplicatedReceiverCache(1000 / GiB)
    with pytest.raises(RuntimeError) as caught:
        receiver.get_and_update([None, None], ["x", "y"])
    assert isinstance(caught.value, MultiModalCacheMissError)
    assert caught.value.mm_hashes == ["x", "y"]


# --- the base classes, for caches written against vLLM's interface ---------------------------------


class DictSenderCache(BaseMultiModalProcessorCache):
    """A cache written as vLLM's base classes ask: item methods only."""

    def __init__(self) -> None:
        self.store: dict[str, Any] = {}
        self.touched: list[str] = []

    def is_cached_item(self, mm_hash: str) -> bool:
        return mm_hash in self.store

    def get_and_update_item(self, mm_item: Any, mm_hash: str) -> Any:
        if mm_item is None:
            return None, self.store[mm_hash]
        self.store[mm_hash] = mm_item[1]
        return mm_item

    def touch_sender_cache_item(self, mm_hash: str) -> None:
        self.touched.append(mm_hash)

    def clear_cache(self) -> None:
        self.store.clear()

    def make_stats(self, *, delta: bool = False) -> CacheInfo:
        return CacheInfo(0, len(self.store))


def test_a_cache_written_against_the_base_classes_gets_the_batch_methods() -> None:
    cache = DictSenderCache()
    item = item_of(1)
    assert cache.get_and_update([(item, ["u"]), None], ["a", "a"]) == [(item, ["u"]), (None, ["u"])]
    assert cache.is_cached(["a", "b"]) == [True, False]
    with pytest.raises(ValueError, match="2 items but 1 hashes"):
        cache.get_and_update([None, None], ["a"])
    cache.invalidate("a")  # no-ops by default
    cache.close()
    cache.release_sender_touches()
    assert cache.validate_input_item(item, "a") is None


class DictReceiverCache(BaseMultiModalReceiverCache):
    def __init__(self, stored: dict[str, MultiModalKwargsItem]) -> None:
        self.stored = stored
        self.log: list[str] = []

    def get_and_update_item(self, mm_item: Any, mm_hash: str) -> MultiModalKwargsItem:
        self.log.append(f"update {mm_hash}")
        if mm_item is not None:
            self.stored[mm_hash] = mm_item
            return mm_item  # type: ignore[no-any-return]
        if mm_hash not in self.stored:
            raise MultiModalCacheMissError([mm_hash])
        return self.stored[mm_hash]

    def touch_receiver_cache_item(self, mm_hash: str, mm_item: Any = None) -> None:
        self.log.append(f"touch {mm_hash}")

    def clear_cache(self) -> None:
        self.stored.clear()


def test_receiver_base_touches_every_feature_first_and_reports_all_misses() -> None:
    kept = item_of(1)
    cache = DictReceiverCache({"h1": kept})
    features = [
        SimpleNamespace(data=None, identifier="lora:h1", mm_hash="h1"),
        SimpleNamespace(data=None, identifier="gone-1", mm_hash=None),
        SimpleNamespace(data=None, identifier="gone-2", mm_hash=None),
    ]
    with pytest.raises(MultiModalCacheMissError) as caught:
        cache.get_and_update_features(features)
    assert caught.value.mm_hashes == ["gone-1", "gone-2"]
    assert cache.log[:3] == ["touch h1", "touch gone-1", "touch gone-2"]
    assert features[0].data is kept


# --- factories ------------------------------------------------------------------------------------


def test_factories_follow_vllms_cache_type_rules() -> None:
    lru = vllm_config()
    assert isinstance(processor_cache_from_config(lru), LruKeyReplicatedSenderCache)
    assert isinstance(engine_receiver_cache_from_config(lru), LruKeyReplicatedReceiverCache)
    assert worker_receiver_cache_from_config(lru, None) is None
    assert isinstance(processor_only_cache_from_config(lru), MultiModalProcessorOnlyCache)

    # Several API processes, or data parallelism behind an internal balancer: no mirror.
    for parallel in ({"_api_process_count": 2}, {"data_parallel_size": 2}):
        config = vllm_config(**parallel)
        assert type(processor_cache_from_config(config)) is MultiModalProcessorOnlyCache
        assert engine_receiver_cache_from_config(config) is None
    external = vllm_config(data_parallel_size=2, data_parallel_external_lb=True)
    assert isinstance(processor_cache_from_config(external), LruKeyReplicatedSenderCache)

    off = vllm_config(gb=0)
    assert processor_cache_from_config(off) is None
    assert processor_only_cache_from_config(off) is None
    assert engine_receiver_cache_from_config(off) is None
    no_mm = vllm_config()
    no_mm.model_config.supports_multimodal_inputs = False
    assert processor_cache_from_config(no_mm) is None


def test_factories_on_mediarefs_bare_model_config_build_the_processor_only_cache() -> None:
    config = ModelConfig(model="unused", mm_processor_cache_gb=0.5)
    cache = processor_cache_from_config(config)
    assert type(cache) is MultiModalProcessorOnlyCache and cache.capacity_bytes == GiB // 2
    assert engine_receiver_cache_from_config(config) is None
    assert processor_cache_from_config(ModelConfig(model="unused", mm_processor_cache_gb=0)) is None


def test_unknown_cache_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="Unknown cache type: 'disk'"):
        processor_cache_from_config(vllm_config(cache_type="disk"))
