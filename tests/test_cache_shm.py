"""The shared-memory object-store caches: written by the frontend, read by a worker process.

A real second process (spawned) attaches to the segment by name and reads items through the
handles the sender hands out, as vLLM's workers do (it inherits the segment's name and the secret
through the environment, as they do); eviction, signatures, item MACs, oversize handling and the
orphan rule are checked against the ring itself. The holes an attack found (the secret in the
segment, rewritten items served, SIGKILLed writers' segments leaked) are pinned in
``tests/security/test_shm_cache_trust.py``.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from mediaref.cache import (
    MultiModalCacheMissError,
    ShmObjectStoreReceiverCache,
    ShmObjectStoreSenderCache,
    processor_cache_from_config,
    worker_receiver_cache_from_config,
)
from mediaref.cache._shm_reclaim import current_creator, reclaim_orphans
from mediaref.cache._shm_secret import SECRET_ENV
from mediaref.cache.shm import shm_handle_of
from mediaref.inputs import (
    MultiModalBatchedField,
    MultiModalFieldConfig,
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalKwargsItem,
    build_kwargs_items,
    nested_tensors_equal,
)

GiB = 1 << 30
ENV = "VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME"


def shm_config(capacity_bytes: int = 1 << 20, max_object_mb: int = 128, world_size: int = 1) -> Any:
    model_config = SimpleNamespace(
        mm_processor_cache_gb=capacity_bytes / GiB,
        mm_processor_cache_type="shm",
        mm_shm_cache_max_object_size_mb=max_object_mb,
    )
    parallel = SimpleNamespace(world_size=world_size, data_parallel_size=1, _api_process_count=1)
    return SimpleNamespace(model_config=model_config, parallel_config=parallel)


@pytest.fixture
def fresh_segment_name(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(SECRET_ENV, raising=False)  # the sender exports one; gone afterwards
    yield ""


def sender_for(config: Any) -> ShmObjectStoreSenderCache:
    return ShmObjectStoreSenderCache(config)


def qwen_like_items() -> list[MultiModalKwargsItem]:
    grid = torch.tensor([[1, 2, 2], [1, 2, 3]])
    hf = {
        "pixel_values": torch.randn(10, 6).to(torch.bfloat16),
        "image_grid_thw": grid,
        "meta": [[1, 2], [3]],
    }
    config = {
        "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", grid.prod(-1)),
        "image_grid_thw": MultiModalFieldConfig.batched("image", keep_on_cpu=True),
        "meta": MultiModalFieldConfig.batched("image"),
    }
    return build_kwargs_items(hf, config)["image"]


def blob(nbytes: int, fill: int = 0) -> MultiModalKwargsItem:
    data = torch.full((nbytes,), fill, dtype=torch.uint8)
    return MultiModalKwargsItem({"x": MultiModalFieldElem(data, MultiModalBatchedField())})


def same_item(a: MultiModalKwargsItem, b: MultiModalKwargsItem) -> bool:
    return a.keys() == b.keys() and all(
        nested_tensors_equal(a[k].data, b[k].data) and a[k].field == b[k].field for k in a
    )


# --- a worker process -----------------------------------------------------------------------------


def _worker(name: str, config: Any, lock: Any, requests: Any, replies: Any) -> None:
    os.environ[ENV] = name
    cache = ShmObjectStoreReceiverCache(config, lock)
    while (request := requests.get()) is not None:
        command, mm_hash, item = request
        try:
            if command == "touch":
                cache.touch_receiver_cache_item(mm_hash, item)
                replies.put(("ok", None))
            else:
                replies.put(("ok", cache.get_and_update_item(item, mm_hash)))
        except Exception as error:  # the parent asserts on the error's type and text
            replies.put(("error", f"{type(error).__name__}: {error}"))
    cache.close()


@dataclass
class Worker:
    requests: Any
    replies: Any

    def ask(self, command: str, mm_hash: str, item: Any) -> tuple[str, Any]:
        self.requests.put((command, mm_hash, item))
        return self.replies.get(timeout=120)  # type: ignore[no-any-return]


@pytest.fixture
def worker_pair(fresh_segment_name: str) -> Iterator[tuple[ShmObjectStoreSenderCache, Worker]]:
    config = shm_config()
    sender = sender_for(config)
    context = multiprocessing.get_context("spawn")
    requests, replies, lock = context.Queue(), context.Queue(), context.Lock()
    process = context.Process(
        target=_worker, args=(os.environ[ENV], config, lock, requests, replies), daemon=True
    )
    process.start()
    try:
        yield sender, Worker(requests, replies)
    finally:
        requests.put(None)
        process.join(timeout=60)
        sender.close()


def test_a_worker_process_reads_items_through_the_handles(
    worker_pair: tuple[ShmObjectStoreSenderCache, Worker],
) -> None:
    sender, worker = worker_pair
    items = qwen_like_items()
    handles = [
        sender.get_and_update_item((item, [f"update-{i}"]), f"h{i}") for i, item in enumerate(items)
    ]
    for (handle, updates), i in zip(handles, range(2), strict=True):
        assert set(handle) == {"address", "monotonic_id", "signature"} and updates == [
            f"update-{i}"
        ]
        assert worker.ask("touch", f"h{i}", handle) == ("ok", None)
        status, read = worker.ask("read", f"h{i}", handle)
        assert status == "ok" and same_item(read, items[i])
    # bfloat16 data, flat index tuples, keep_on_cpu and nested lists all survive the trip.
    first = worker.ask("read", "h0", sender.get_and_update_item(None, "h0")[0])[1]
    assert first["pixel_values"].data.dtype == torch.bfloat16
    assert isinstance(first["pixel_values"].field, MultiModalFlatField)
    assert first["pixel_values"].field.slices == [(slice(0, 4),), (slice(4, 10),)]
    assert first["image_grid_thw"].field.keep_on_cpu and first["meta"].data == [1, 2]
    # An item that carries its data passes through a worker untouched.
    plain = blob(3)
    assert same_item(worker.ask("read", "plain", plain)[1], plain)


def test_the_worker_refuses_forged_and_misdirected_handles(
    worker_pair: tuple[ShmObjectStoreSenderCache, Worker],
) -> None:
    sender, worker = worker_pair
    handle, _ = sender.get_and_update_item((blob(64, 7), []), "real")
    forged = MultiModalKwargsItem(dict(handle))
    signature = list(handle["signature"].data)
    signature[0] ^= 1
    forged["signature"] = MultiModalFieldElem(signature, MultiModalBatchedField())
    for mm_hash, item in (("real", forged), ("another-hash", handle)):
        for command in ("touch", "read"):
            status, error = worker.ask(command, mm_hash, item)
            assert status == "error" and "Invalid SHM handle signature" in error
    moved = MultiModalKwargsItem(dict(handle))
    moved["address"] = MultiModalFieldElem(handle["address"].data + 8, MultiModalBatchedField())
    assert worker.ask("read", "real", moved)[0] == "error"


def test_a_stale_handle_fails_once_its_place_is_reused(
    worker_pair: tuple[ShmObjectStoreSenderCache, Worker],
) -> None:
    sender, worker = worker_pair
    stale, _ = sender.get_and_update_item((blob(64, 1), []), "h")
    assert worker.ask("read", "h", stale)[0] == "ok"
    sender.clear_cache()
    fresh, _ = sender.get_and_update_item((blob(64, 2), []), "h")
    assert fresh["address"].data == stale["address"].data  # the same place, reused
    status, error = worker.ask("read", "h", stale)
    assert status == "error" and "has been modified or is invalid" in error
    assert worker.ask("read", "h", fresh)[1]["x"].data[0] == 2


# --- eviction and refusals, one process -----------------------------------------------------------


def test_items_are_freed_oldest_first_once_read(fresh_segment_name: str) -> None:
    config = shm_config(capacity_bytes=4096)
    sender = sender_for(config)
    reader = ShmObjectStoreReceiverCache(config, multiprocessing.Lock())
    try:
        a, _ = sender.get_and_update_item((blob(1500, 1), ["ua"]), "a")
        sender.get_and_update_item((blob(1500, 2), ["ub"]), "b")
        # Full of items no worker has read: the third is served whole, uncached.
        item_c = blob(1500, 3)
        served, updates = sender.get_and_update_item((item_c, ["uc"]), "c")
        assert served is item_c and updates == ["uc"]
        assert sender.is_cached(["a", "b", "c"]) == [True, True, False]
        reader.get_and_update_item(a, "a")  # the worker reads a: a may now go
        served, _ = sender.get_and_update_item((blob(1500, 4), []), "d")
        assert shm_handle_of(served) is not None
        assert sender.is_cached(["a", "b", "d"]) == [False, True, True]
        assert sender.make_stats().total == 4 and sender.make_stats().hits == 0
    finally:
        reader.close()
        sender.close()


def test_a_hit_hands_the_item_out_again_and_a_touch_protects_it(fresh_segment_name: str) -> None:
    config = shm_config(capacity_bytes=4096)
    sender = sender_for(config)
    reader = ShmObjectStoreReceiverCache(config, multiprocessing.Lock())
    try:
        a, _ = sender.get_and_update_item((blob(1500), ["ua"]), "a")
        reader.get_and_update_item(a, "a")
        again, updates = sender.get_and_update_item(None, "a")  # handed out twice, read once
        assert updates == ["ua"] and sender.make_stats().hits == 1
        b, _ = sender.get_and_update_item((blob(1500), []), "b")
        assert shm_handle_of(sender.get_and_update_item((blob(1500), []), "c")[0]) is None
        reader.get_and_update_item(again, "a")
        reader.get_and_update_item(b, "b")
        sender.touch_sender_cache_item("a")  # a request about to use a: not evictable
        assert shm_handle_of(sender.get_and_update_item((blob(1500), []), "c")[0]) is None
        sender.release_sender_touches()
        assert shm_handle_of(sender.get_and_update_item((blob(1500), []), "c")[0]) is not None
        assert sender.is_cached(["a", "b", "c"]) == [False, False, True]
        sender.remove_dangling_items()  # the prompt updates of a and b go with them
        assert set(sender._p0_cache) == {"c"}
    finally:
        reader.close()
        sender.close()


def test_a_request_s_hits_are_not_freed_by_its_own_misses(fresh_segment_name: str) -> None:
    config = shm_config(capacity_bytes=4096)
    sender = sender_for(config)
    reader = ShmObjectStoreReceiverCache(config, multiprocessing.Lock())
    try:
        for name in ("a", "b"):
            handle, _ = sender.get_and_update_item((blob(1500), [name]), name)
            reader.get_and_update_item(handle, name)  # read: both could be freed now
        # A miss listed before a hit of the same request: storing it must not free the hit.
        missed = blob(1500)
        outputs = sender.get_and_update([(missed, ["c"]), None], ["c", "a"])
        assert shm_handle_of(outputs[1][0]) is not None and outputs[1][1] == ["a"]
        # a is the oldest and protected, so the FIFO ring frees nothing: c goes whole.
        assert outputs[0] == (missed, ["c"])
        assert sender.is_cached(["a", "b", "c"]) == [True, True, False]
        with pytest.raises(ValueError, match="2 items but 1 hashes"):
            sender.get_and_update([None, None], ["a"])
    finally:
        reader.close()
        sender.close()


def test_oversize_and_unstorable_items_are_served_uncached(fresh_segment_name: str) -> None:
    sender = sender_for(shm_config(max_object_mb=0))
    try:
        item = blob(8)
        assert sender.get_and_update_item((item, []), "big")[0] is item
        assert not sender.is_cached_item("big")
    finally:
        sender.close()
    sender = sender_for(shm_config())
    try:
        odd = MultiModalKwargsItem({"x": MultiModalFieldElem(object(), MultiModalBatchedField())})  # type: ignore[arg-type]
        assert sender.get_and_update_item((odd, []), "odd")[0] is odd
        with pytest.raises(MultiModalCacheMissError):
            sender.get_and_update_item(None, "never-stored")
    finally:
        sender.close()


def test_validate_input_item_accepts_only_current_handles(fresh_segment_name: str) -> None:
    sender = sender_for(shm_config())
    try:
        handle, _ = sender.get_and_update_item((blob(16), []), "h")
        sender.validate_input_item(handle, "h")
        sender.validate_input_item(blob(4), "h")  # carries its data: nothing to check
        with pytest.raises(ValueError, match="Invalid SHM handle"):
            sender.validate_input_item(handle, "other")
        incomplete = MultiModalKwargsItem({"address": handle["address"]})
        with pytest.raises(ValueError, match="Missing SHM handle signature"):
            sender.validate_input_item(incomplete, "h")
        sender.clear_cache()
        with pytest.raises(ValueError, match="Invalid SHM handle"):
            sender.validate_input_item(handle, "h")
    finally:
        sender.close()


def test_features_without_data_are_left_alone(fresh_segment_name: str) -> None:
    config = shm_config()
    sender = sender_for(config)
    reader = ShmObjectStoreReceiverCache(config, multiprocessing.Lock())
    try:
        handle, _ = sender.get_and_update_item((blob(16, 5), []), "h")
        features = [
            SimpleNamespace(data=handle, identifier="h", mm_hash=None),
            SimpleNamespace(data=None, identifier="gone", mm_hash=None),
        ]
        assert reader.get_and_update_features(features) is features
        assert features[0].data["x"].data[0] == 5 and features[1].data is None
    finally:
        reader.close()
        sender.close()


def test_segment_naming_and_cleanup(fresh_segment_name: str) -> None:
    sender = sender_for(shm_config())
    name = os.environ[ENV]  # named by the sender and exported for the workers
    me = current_creator()
    assert name.startswith(f"mediaref_mm_cache_{me.pid_namespace}_{me.pid}_{me.start_ticks}_")
    assert os.path.exists(f"/dev/shm/{name}")
    sender.close()
    assert not os.path.exists(f"/dev/shm/{name}")


def test_factories_build_the_shm_pair(fresh_segment_name: str) -> None:
    config = shm_config()
    sender = processor_cache_from_config(config)
    try:
        assert isinstance(sender, ShmObjectStoreSenderCache)
        with pytest.raises(ValueError, match="shared_worker_lock"):
            worker_receiver_cache_from_config(config, None)
        reader = worker_receiver_cache_from_config(config, multiprocessing.Lock())
        assert isinstance(reader, ShmObjectStoreReceiverCache)
        reader.close()
    finally:
        assert sender is not None
        sender.close()


# --- the secret and the item MACs -----------------------------------------------------------------


def test_a_reader_needs_the_writer_s_secret(
    fresh_segment_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = shm_config()
    sender = sender_for(config)
    try:
        handle, _ = sender.get_and_update_item((blob(16, 9), []), "h")
        exported = bytes.fromhex(os.environ[SECRET_ENV])
        assert exported == sender._shm_cache._secret  # left for the workers it starts
        with pytest.raises(ValueError, match="not the one shared memory"):
            ShmObjectStoreReceiverCache(
                config, multiprocessing.Lock(), secret=secrets.token_bytes(32)
            )
        monkeypatch.delenv(SECRET_ENV)
        with pytest.raises(ValueError, match="no shared-memory cache secret"):
            ShmObjectStoreReceiverCache(config, multiprocessing.Lock())
        reader = ShmObjectStoreReceiverCache(config, multiprocessing.Lock(), secret=exported)
        assert reader.get_and_update_item(handle, "h")["x"].data[0] == 9
        reader.close()
    finally:
        sender.close()


def test_a_refused_item_still_counts_as_read(fresh_segment_name: str) -> None:
    """A worker that refuses an object consumes its handle, so the FIFO ring is not pinned."""
    config = shm_config(capacity_bytes=4096)
    sender = sender_for(config)
    reader = ShmObjectStoreReceiverCache(config, multiprocessing.Lock())
    try:
        a, _ = sender.get_and_update_item((blob(1500, 1), []), "a")
        b, _ = sender.get_and_update_item((blob(1500, 2), []), "b")
        _, view = sender._shm_cache.ring.payload(a["address"].data)
        with view:
            view[-1] ^= 0xFF  # the last byte of a's tensor
        with pytest.raises(ValueError, match="has been modified or is invalid"):
            reader.get_and_update_item(a, "a")
        # a, the oldest, is freed for c (b, unread, stays): had the refusal not counted, c would
        # be served whole.
        assert shm_handle_of(sender.get_and_update_item((blob(1500, 3), []), "c")[0]) is not None
        assert sender.is_cached(["a", "b", "c"]) == [False, True, True]
        assert reader.get_and_update_item(b, "b")["x"].data[0] == 2
    finally:
        reader.close()
        sender.close()


def test_a_moved_object_fails_its_mac(fresh_segment_name: str) -> None:
    """Bytes that are the writer's, but another key's object, are refused: the MAC binds the key
    and the place, not only the bytes."""
    config = shm_config()
    sender = sender_for(config)
    reader = ShmObjectStoreReceiverCache(config, multiprocessing.Lock())
    try:
        a, _ = sender.get_and_update_item((blob(64, 1), []), "a")
        b, _ = sender.get_and_update_item((blob(64, 2), []), "b")
        ring = sender._shm_cache.ring
        _, source = ring.payload(a["address"].data)
        _, target = ring.payload(b["address"].data)
        with source, target:
            target[4:] = source[4:]  # a's MAC and bytes over b's (b's read count kept)
        with pytest.raises(ValueError, match="has been modified or is invalid"):
            reader.get_and_update_item(b, "b")
    finally:
        reader.close()
        sender.close()


# --- orphaned segments: the rule ------------------------------------------------------------------


def _fake_segment(name: str) -> str:
    path = f"/dev/shm/{name}"
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    return path


@pytest.mark.skipif(not os.path.isdir("/proc/self/ns"), reason="needs /proc (Linux)")
def test_only_segments_of_dead_creators_here_are_reclaimed() -> None:
    me = current_creator()
    tail = secrets.token_hex(8)
    live = _fake_segment(f"mediaref_mm_cache_{me.pid_namespace}_{me.pid}_{me.start_ticks}_{tail}")
    # The same pid, started at another time: the pid was recycled, its writer is gone.
    recycled = _fake_segment(
        f"mediaref_mm_cache_{me.pid_namespace}_{me.pid}_{me.start_ticks + 1}_{tail}"
    )
    # Another pid namespace (a container sharing /dev/shm): its pids cannot be checked here.
    elsewhere = _fake_segment(
        f"mediaref_mm_cache_{me.pid_namespace + 1}_{me.pid}_{me.start_ticks + 1}_{tail}"
    )
    unknown = _fake_segment(f"mediaref_mm_cache_{secrets.token_hex(16)}")  # no creator in it
    try:
        removed = reclaim_orphans()
        assert os.path.basename(recycled) in removed and not os.path.exists(recycled)
        for kept in (live, elsewhere, unknown):
            assert os.path.exists(kept)
    finally:
        for path in (live, recycled, elsewhere, unknown):
            if os.path.exists(path):
                os.unlink(path)
