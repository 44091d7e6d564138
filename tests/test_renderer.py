"""The renderer on its one-worker executor, on the real Qwen2-VL processor.

What is pinned: on the async path another request completes while one request's decode is held
(and on the blocking path it cannot); of A1 -> A2 on one new image A2 waits for A1's claim and
decodes nothing, and past the wait phase 2 re-derives the cache and processes it itself; cancellation, however often repeated, waits for running decodes before anything is
released and never blocks the event loop; the two-phase probe picks the path; warmup shares the
worker and only logs its failures; the sync entry point, UUID-only items and UUID validation.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from _instrumented_decoding import (
    CORRUPT_IMAGE,
    IMAGE_PROMPT,
    WAIT_S,
    assert_same_output,
    counted_ref,
    image_bytes,
    image_prompt,
    instrumented_ref,
    make_inspecting_processor_class,
    make_processor,
    reference_output,
    spy,
)
from mediaref.exceptions import VLLMUnprocessableEntityError, VLLMValidationError
from mediaref.media.image import ImageMediaIO
from mediaref.models.qwen2_vl import Qwen2VLMultiModalProcessor
from mediaref.processing.processor import MultiModalApplyState
from mediaref.renderers.base import BaseRenderer, MultiModalRequest

RendererFactory = Callable[[Any], BaseRenderer]


def image_request(*refs: Any, **kwargs: Any) -> MultiModalRequest:
    return MultiModalRequest(image_prompt(len(refs)), {"image": list(refs)}, **kwargs)


async def wait_event(event: threading.Event) -> bool:
    """Wait for a thread-side event without blocking the loop."""
    return await asyncio.to_thread(event.wait, WAIT_S)


def spy_on_paths(renderer: BaseRenderer) -> list[str]:
    """Record which async path each request takes: "split" (two-phase) or "blocking"."""
    paths: list[str] = []
    renderer._process_multimodal_async = spy(  # type: ignore[method-assign]
        renderer._process_multimodal_async, paths, "split"
    )
    renderer._process_multimodal_blocking_async = spy(  # type: ignore[method-assign]
        renderer._process_multimodal_blocking_async, paths, "blocking"
    )
    return paths


async def still_pending_after_grace(task: asyncio.Task[Any]) -> bool:
    """True if ``task`` is not done after a grace period a wrong implementation would finish in."""
    done, _ = await asyncio.wait({task}, timeout=0.5)
    return not done


# -- other requests run while a decode is held ---------------------------------------------------


async def test_request_b_completes_while_request_as_decode_is_blocked(
    make_renderer: RendererFactory,
) -> None:
    renderer = make_renderer(make_processor())
    gate = threading.Event()
    ref_a, decoder_a = instrumented_ref(image_bytes(100), gate=gate)
    ref_b, decoder_b = instrumented_ref(image_bytes(101))

    task_a = asyncio.create_task(renderer.process_multimodal_async(image_request(ref_a)))
    assert await wait_event(decoder_a.started)
    out_b = await asyncio.wait_for(renderer.process_multimodal_async(image_request(ref_b)), WAIT_S)

    assert not task_a.done()  # A is still held at its decode, yet B went through the worker
    assert_same_output(out_b, reference_output([image_bytes(101)]))
    gate.set()
    out_a = await asyncio.wait_for(task_a, WAIT_S)
    assert_same_output(out_a, reference_output([image_bytes(100)]))
    assert (decoder_a.calls, decoder_b.calls) == (1, 1)
    assert not decoder_a.gate_timed_out


async def held_request(
    renderer: BaseRenderer, image: int
) -> tuple[asyncio.Task[Any], threading.Event, Any]:
    """A request for ``image`` whose decode is held at a gate (so it holds the image's claim):
    its task, the gate that lets it go on, and its decoder."""
    gate = threading.Event()
    ref, decoder = instrumented_ref(image_bytes(image), gate=gate)
    task = asyncio.create_task(renderer.process_multimodal_async(image_request(ref)))
    assert await wait_event(decoder.started)
    return task, gate, decoder


async def test_a1_b_a2_on_one_image_a2_waits_for_a1_and_decodes_nothing(
    make_renderer: RendererFactory,
) -> None:
    processor_cls = make_inspecting_processor_class()
    processor = make_processor(processor_cls)
    renderer = make_renderer(processor)
    ref_a2, decoder_a2 = instrumented_ref(image_bytes(110))  # same image, new ref

    task_a1, gate_a1, decoder_a1 = await held_request(renderer, 110)
    # A2 misses the image too, while A1 holds its claim: it waits instead of decoding it again.
    task_a2 = asyncio.create_task(renderer.process_multimodal_async(image_request(ref_a2)))
    out_b = await asyncio.wait_for(
        renderer.process_multimodal_async(image_request(counted_ref(111))), WAIT_S
    )  # the worker is free for others meanwhile
    assert await still_pending_after_grace(task_a2)

    gate_a1.set()
    out_a1 = await asyncio.wait_for(task_a1, WAIT_S)  # fills the cache, releases the claim
    out_a2 = await asyncio.wait_for(task_a2, WAIT_S)

    assert decoder_a2.calls == 0 and decoder_a1.calls == 1
    assert len(processor_cls.hf_calls) == 2  # A1 and B; A2 found A1's output in the cache
    # (hits, misses) of A1, A2 and B, whichever order their phases 1 ran in: A2 hit.
    counts = sorted((s.timings.num_hits, s.timings.num_misses) for s in processor_cls.states)
    assert counts == [(0, 1), (0, 1), (1, 0)]
    assert out_a2["mm_hashes"] == out_a1["mm_hashes"]
    assert_same_output(out_a2, out_a1)
    assert_same_output(out_b, reference_output([image_bytes(111)]))
    assert all(ref.is_released for state in processor_cls.states for ref in state.owned_refs)
    assert processor.cache.item_claims.held == 0


async def test_a_request_holding_a_claim_never_waits_for_another(
    make_renderer: RendererFactory,
) -> None:
    # A2 misses X (A1's claim) and Y (its own): it decodes both rather than wait while holding Y,
    # so no two requests can ever wait for each other.
    renderer = make_renderer(make_processor())
    ref_x, decoder_x = instrumented_ref(image_bytes(113))
    ref_y, decoder_y = instrumented_ref(image_bytes(114))

    task_a1, gate_a1, _ = await held_request(renderer, 113)
    out_a2 = await asyncio.wait_for(
        renderer.process_multimodal_async(image_request(ref_y, ref_x)), WAIT_S
    )
    assert (decoder_x.calls, decoder_y.calls) == (1, 1) and not task_a1.done()
    assert_same_output(out_a2, reference_output([image_bytes(114), image_bytes(113)]))
    gate_a1.set()
    await asyncio.wait_for(task_a1, WAIT_S)


async def test_a_cancelled_holder_lets_its_waiters_go_on(
    make_renderer: RendererFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mediaref.cache.claims as claims_module

    monkeypatch.setattr(claims_module, "CLAIM_WAIT_S", 10 * WAIT_S)  # only a release ends it
    renderer = make_renderer(make_processor())
    ref_a2, decoder_a2 = instrumented_ref(image_bytes(115))

    task_a1, gate_a1, _ = await held_request(renderer, 115)
    task_a2 = asyncio.create_task(renderer.process_multimodal_async(image_request(ref_a2)))
    assert await still_pending_after_grace(task_a2)  # waiting for A1's claim
    task_a1.cancel()
    gate_a1.set()  # A1's decode ends; its state closes and releases the claim
    out_a2 = await asyncio.wait_for(task_a2, WAIT_S)
    assert decoder_a2.calls == 1  # nothing was stored: A2 processed the image itself
    assert_same_output(out_a2, reference_output([image_bytes(115)]))
    with pytest.raises(asyncio.CancelledError):
        await task_a1


async def test_a_waiter_whose_holder_outlasts_the_wait_processes_the_item_itself(
    make_renderer: RendererFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Waiting is an optimization: past CLAIM_WAIT_S phase 2 finds the item still missing and
    # decodes and processes it itself, as before claims (the re-derived cache state).
    import mediaref.cache.claims as claims_module

    monkeypatch.setattr(claims_module, "CLAIM_WAIT_S", 0.05)
    processor_cls = make_inspecting_processor_class()
    renderer = make_renderer(make_processor(processor_cls))
    ref_a2, decoder_a2 = instrumented_ref(image_bytes(112))

    task_a1, gate_a1, _ = await held_request(renderer, 112)
    out_a2 = await asyncio.wait_for(
        renderer.process_multimodal_async(image_request(ref_a2)), WAIT_S
    )
    assert decoder_a2.calls == 1 and not task_a1.done()
    gate_a1.set()
    out_a1 = await asyncio.wait_for(task_a1, WAIT_S)
    assert_same_output(out_a2, out_a1)
    assert_same_output(out_a1, reference_output([image_bytes(112)]))


async def test_the_blocking_path_holds_the_worker_through_a_decode(
    make_renderer: RendererFactory,
) -> None:
    class OverridesApply(Qwen2VLMultiModalProcessor):
        def apply(self, inputs: Any, timing_ctx: Any = None) -> Any:
            return super().apply(inputs, timing_ctx)

    renderer = make_renderer(make_processor(OverridesApply))
    gate = threading.Event()
    ref_a, decoder_a = instrumented_ref(image_bytes(120), gate=gate)
    task_a = asyncio.create_task(renderer.process_multimodal_async(image_request(ref_a)))
    assert await wait_event(decoder_a.started)
    task_b = asyncio.create_task(renderer.process_multimodal_async(image_request(counted_ref(121))))

    assert await still_pending_after_grace(task_b)  # queued behind A on the one worker
    gate.set()
    out_a, out_b = await asyncio.wait_for(asyncio.gather(task_a, task_b), WAIT_S)
    assert_same_output(out_a, reference_output([image_bytes(120)]))
    assert_same_output(out_b, reference_output([image_bytes(121)]))


# -- errors ----------------------------------------------------------------------------------------


async def test_async_corrupt_item_is_a_422_after_the_sibling_drains(
    make_renderer: RendererFactory,
) -> None:
    processor_cls = make_inspecting_processor_class()
    renderer = make_renderer(make_processor(processor_cls))
    slow_gate = threading.Event()
    corrupt_ref, corrupt_decoder = instrumented_ref(CORRUPT_IMAGE)
    slow_ref, slow_decoder = instrumented_ref(image_bytes(130), gate=slow_gate)

    request = image_request(corrupt_ref, slow_ref)
    task = asyncio.create_task(renderer.process_multimodal_async(request))
    assert await wait_event(corrupt_decoder.finished) and await wait_event(slow_decoder.started)
    assert await still_pending_after_grace(task)
    slow_gate.set()
    with pytest.raises(VLLMUnprocessableEntityError, match=r"^image media at index 0 ") as info:
        await asyncio.wait_for(task, WAIT_S)

    assert info.value.status_code == 422
    assert slow_decoder.finished.is_set() and not slow_decoder.gate_timed_out
    (state,) = processor_cls.states
    assert all(owned.is_released for owned in state.owned_refs)
    assert processor_cls.hf_calls == []
    # The worker is free and the cache unharmed: the good sibling processes fine on its own.
    out = await asyncio.wait_for(renderer.process_multimodal_async(image_request(slow_ref)), WAIT_S)
    assert_same_output(out, reference_output([image_bytes(130)]))


# -- cancellation ----------------------------------------------------------------------------------


async def test_wait_decodes_async_survives_repeated_cancellation() -> None:
    processor = make_processor()
    gate = threading.Event()
    ref, decoder = instrumented_ref(image_bytes(140), gate=gate)
    state = processor.apply_phase1(processor.build_inputs(IMAGE_PROMPT, {"image": [ref]}))
    (owned,) = state.owned_refs
    waiting = asyncio.create_task(state.wait_decodes_async())
    assert await wait_event(decoder.started)

    for _ in range(5):
        waiting.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not waiting.done()  # still draining the held decode

    gate.set()
    await asyncio.wait({waiting}, timeout=WAIT_S)
    assert waiting.cancelled()  # the cancellation is propagated once the drain is over
    assert decoder.finished.is_set() and not decoder.gate_timed_out
    assert not owned.is_released  # releasing is the owning context's job
    state.close()
    assert owned.is_released and owned.is_decoded


async def test_renderer_task_cancelled_repeatedly_during_the_decode_wait(
    make_renderer: RendererFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    processor_cls = make_inspecting_processor_class()
    renderer = make_renderer(make_processor(processor_cls))
    entered_wait = asyncio.Event()
    original_wait = MultiModalApplyState.wait_decodes_async

    async def observed_wait(self: MultiModalApplyState) -> None:
        entered_wait.set()
        await original_wait(self)

    monkeypatch.setattr(MultiModalApplyState, "wait_decodes_async", observed_wait)
    gate = threading.Event()
    ref, decoder = instrumented_ref(image_bytes(141), gate=gate)
    task = asyncio.create_task(renderer.process_multimodal_async(image_request(ref)))
    await asyncio.wait_for(entered_wait.wait(), WAIT_S)
    assert await wait_event(decoder.started)
    (state,) = processor_cls.states
    (owned,) = state.owned_refs

    for _ in range(5):
        task.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not task.done()
        assert not owned.is_released  # a worker is still reading the payload

    gate.set()
    await asyncio.wait({task}, timeout=WAIT_S)
    assert task.cancelled()
    assert decoder.finished.is_set() and not decoder.gate_timed_out
    assert owned.is_released
    assert processor_cls.hf_calls == []  # phase 2 never ran for the cancelled request

    later_ref, _ = instrumented_ref(image_bytes(141))
    later = image_request(later_ref)
    out = await asyncio.wait_for(renderer.process_multimodal_async(later), WAIT_S)
    assert_same_output(out, reference_output([image_bytes(141)]))


async def test_renderer_task_cancelled_during_phase_1_drains_without_blocking_the_loop(
    make_renderer: RendererFactory,
) -> None:
    processor_cls = make_inspecting_processor_class()
    processor_cls.phase1_gate = threading.Event()
    renderer = make_renderer(make_processor(processor_cls))
    gate = threading.Event()
    ref, decoder = instrumented_ref(image_bytes(142), gate=gate)
    task = asyncio.create_task(renderer.process_multimodal_async(image_request(ref)))
    assert await wait_event(processor_cls.phase1_started)

    for _ in range(3):
        task.cancel()
        await asyncio.sleep(0)
        assert not task.done()  # phase 1 is still running on the worker
    processor_cls.phase1_gate.set()
    # Phase 1 now submits the decode and returns to a cancelled caller, which must drain the
    # decode before releasing, without holding up the loop: a caller that blocked the loop in
    # that drain would keep this test from ever opening the gate (the decoder then times out).
    assert await wait_event(decoder.started)
    # The one worker runs this no-op only after phase 1 has returned; the loop iterations after it
    # let the cancelled task act on phase 1's result before the decode may finish.
    await asyncio.get_running_loop().run_in_executor(renderer._mm_executor, lambda: None)
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()
    gate.set()
    await asyncio.wait({task}, timeout=WAIT_S)

    assert task.cancelled()
    assert not decoder.gate_timed_out
    (state,) = processor_cls.states
    assert all(owned.is_released for owned in state.owned_refs)
    out = await asyncio.wait_for(
        renderer.process_multimodal_async(image_request(counted_ref(143))), WAIT_S
    )
    assert_same_output(out, reference_output([image_bytes(143)]))


# -- the probe picks the path ----------------------------------------------------------------------


async def test_a_processor_overriding_apply_takes_the_blocking_path_and_logs_once(
    make_renderer: RendererFactory, caplog: pytest.LogCaptureFixture
) -> None:
    apply_calls: list[str] = []

    class OverridesApply(Qwen2VLMultiModalProcessor):
        def apply(self, inputs: Any, timing_ctx: Any = None) -> Any:
            apply_calls.append("apply")
            return super().apply(inputs, timing_ctx)

    renderer = make_renderer(make_processor(OverridesApply))
    paths = spy_on_paths(renderer)

    with caplog.at_level(logging.DEBUG, logger="mediaref.processing.processor"):
        for variant in (150, 151):
            out = await renderer.process_multimodal_async(image_request(counted_ref(variant)))
            assert_same_output(out, reference_output([image_bytes(variant)]))

    assert paths == ["blocking", "blocking"]
    assert apply_calls == ["apply", "apply"]  # the override is honoured
    records = [r for r in caplog.records if r.name == "mediaref.processing.processor"]
    assert [r.levelno for r in records] == [logging.DEBUG]
    assert "OverridesApply overrides apply;" in records[0].getMessage()


async def test_the_base_processor_takes_the_split_path(make_renderer: RendererFactory) -> None:
    renderer = make_renderer(make_processor())
    paths = spy_on_paths(renderer)
    await renderer.process_multimodal_async(image_request(counted_ref(152)))
    assert paths == ["split"]


# -- warmup ----------------------------------------------------------------------------------------


def test_warmup_runs_on_the_one_mm_worker_and_never_overlaps_a_request(
    make_renderer: RendererFactory,
) -> None:
    processor_cls = make_inspecting_processor_class()
    processor_cls.hf_gate = threading.Event()
    renderer = make_renderer(make_processor(processor_cls))

    warmup = renderer.start_mm_warmup()
    assert renderer.start_mm_warmup() is warmup
    assert processor_cls.hf_started.wait(WAIT_S)  # the warmup is inside the HF call, held there
    with ThreadPoolExecutor(1) as pool:
        request = pool.submit(renderer.process_multimodal, image_request(counted_ref(160)))
        with pytest.raises(TimeoutError):
            request.result(timeout=0.5)
        assert len(processor_cls.hf_calls) == 1  # the request never reached HF beside the warmup
        processor_cls.hf_gate.set()
        out = request.result(timeout=WAIT_S)

    assert warmup.result(timeout=WAIT_S) is None
    assert_same_output(out, reference_output([image_bytes(160)]))
    warmup_call, request_call = processor_cls.hf_calls
    assert warmup_call.num_images == 1  # the dummy inputs
    assert warmup_call.thread_name.startswith("mediaref-mm")
    assert request_call.thread_name == warmup_call.thread_name
    assert not processor_cls.hf_gate_timed_out


def test_a_failing_warmup_only_logs(
    make_renderer: RendererFactory, caplog: pytest.LogCaptureFixture
) -> None:
    processor_cls = make_inspecting_processor_class()
    processor_cls.hf_error = RuntimeError("warmup exploded")
    renderer = make_renderer(make_processor(processor_cls))

    with caplog.at_level(logging.WARNING, logger="mediaref.renderers.base"):
        assert renderer.start_mm_warmup().result(timeout=WAIT_S) is None

    (record,) = [r for r in caplog.records if r.name == "mediaref.renderers.base"]
    assert record.levelno == logging.WARNING
    assert "warmup failed" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    assert processor_cls.hf_calls[0].thread_name.startswith("mediaref-mm")
    processor_cls.hf_error = None
    out = renderer.process_multimodal(image_request(counted_ref(161)))
    assert_same_output(out, reference_output([image_bytes(161)]))


# -- the sync entry point and UUIDs ---------------------------------------------------------------


def test_sync_process_multimodal_runs_on_the_worker_and_serves_hits(
    make_renderer: RendererFactory,
) -> None:
    processor_cls = make_inspecting_processor_class()
    renderer = make_renderer(make_processor(processor_cls))
    ref, decoder = instrumented_ref(image_bytes(170))

    out = renderer.process_multimodal(image_request(ref))
    hit_ref, hit_decoder = instrumented_ref(image_bytes(170))
    hit = renderer.process_multimodal(image_request(hit_ref))

    assert_same_output(out, reference_output([image_bytes(170)]))
    assert_same_output(hit, out)
    assert (decoder.calls, hit_decoder.calls) == (1, 0)
    (call,) = processor_cls.hf_calls
    assert call.thread_name.startswith("mediaref-mm")
    assert all(ref.is_released for state in processor_cls.states for ref in state.owned_refs)


def test_skip_mm_cache_processes_a_cached_image_again(make_renderer: RendererFactory) -> None:
    processor_cls = make_inspecting_processor_class()
    renderer = make_renderer(make_processor(processor_cls))
    renderer.process_multimodal(image_request(counted_ref(171)))
    ref, decoder = instrumented_ref(image_bytes(171))

    out = renderer.process_multimodal(image_request(ref, skip_mm_cache=True))

    assert decoder.calls == 1
    assert len(processor_cls.hf_calls) == 2
    assert_same_output(out, reference_output([image_bytes(171)]))


@pytest.mark.parametrize("entry", ["sync", "async"])
async def test_a_uuid_only_item_is_served_from_the_cache(
    entry: str, make_renderer: RendererFactory
) -> None:
    processor_cls = make_inspecting_processor_class()
    renderer = make_renderer(make_processor(processor_cls))

    async def process(request: MultiModalRequest) -> Any:
        if entry == "sync":
            return await asyncio.to_thread(renderer.process_multimodal, request)
        return await renderer.process_multimodal_async(request)

    ref = ImageMediaIO().load_bytes_ref(image_bytes(180))
    first = await process(image_request(ref, mm_uuids={"image": ["photo-180"]}))
    again = await process(
        MultiModalRequest(IMAGE_PROMPT, {"image": [None]}, mm_uuids={"image": ["photo-180"]})
    )

    assert first["mm_hashes"] == again["mm_hashes"] == {"image": ["photo-180"]}
    assert_same_output(again, first)
    assert len(processor_cls.hf_calls) == 1

    with pytest.raises(VLLMValidationError, match="image item 0 was sent as a UUID only") as info:
        await process(
            MultiModalRequest(IMAGE_PROMPT, {"image": [None]}, mm_uuids={"image": ["unseen"]})
        )
    assert info.value.status_code == 400
    assert not isinstance(info.value, VLLMUnprocessableEntityError)


def test_a_uuid_only_item_without_the_cache_is_a_clear_400(make_renderer: RendererFactory) -> None:
    processor_cls = make_inspecting_processor_class()
    renderer = make_renderer(make_processor(processor_cls))
    ref = ImageMediaIO().load_bytes_ref(image_bytes(181))
    renderer.process_multimodal(image_request(ref, mm_uuids={"image": ["photo-181"]}))
    sibling, sibling_decoder = instrumented_ref(image_bytes(182))

    # Cached, yet skip_mm_cache means nothing may be served from the cache.
    request = MultiModalRequest(
        image_prompt(2),
        {"image": [sibling, None]},
        mm_uuids={"image": ["s", "photo-181"]},
        skip_mm_cache=True,
    )
    with pytest.raises(VLLMValidationError, match="image item 1 was sent as a UUID only") as info:
        renderer.process_multimodal(request)

    assert info.value.status_code == 400
    assert sibling_decoder.calls == 0  # refused in phase 1, before any decode
    assert len(processor_cls.hf_calls) == 1


@pytest.mark.parametrize(
    "mm_uuids",
    [{"image": ["a", "b"]}, {"image": []}, {"video": ["v"]}],
    ids=["too-many", "too-few", "modality-without-items"],
)
async def test_mm_uuids_that_do_not_match_the_items_are_rejected(
    mm_uuids: dict[str, list[str]], make_renderer: RendererFactory
) -> None:
    renderer = make_renderer(make_processor())
    ref, decoder = instrumented_ref(image_bytes(190))
    request = image_request(ref, mm_uuids=mm_uuids)

    with pytest.raises(VLLMValidationError, match=r"multi_modal_uuids\[") as sync_info:
        renderer.process_multimodal(request)
    with pytest.raises(VLLMValidationError, match=r"multi_modal_uuids\[") as async_info:
        await renderer.process_multimodal_async(request)

    assert sync_info.value.parameter == async_info.value.parameter == "multi_modal_uuids"
    assert decoder.calls == 0
