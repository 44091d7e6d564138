"""The processor's lazy behaviour on the real Qwen2-VL processor, seen through instrumented refs.

What is pinned: a miss decodes once and the processor's fork of it is released afterwards while
the caller's ref stays usable; a hit never decodes; misses decode concurrently on the media pool;
a corrupt item is a 422 naming its index, raised only after every sibling decode has drained, with
nothing left owned; payloads stay readable through the HF call and are released after it, also
when it raises; phase 2 re-derives the cache state (an evicted hit decodes late from the payload it
kept; a miss that became a hit skips HF); and the two-phase probe.
"""

from __future__ import annotations

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
    InstrumentedDecoder,
    assert_same_output,
    counted_ref,
    image_bytes,
    image_prompt,
    instrumented_ref,
    make_inspecting_processor_class,
    make_processor,
    reference_output,
)
from mediaref.exceptions import VLLMUnprocessableEntityError
from mediaref.media.base import MediaRef
from mediaref.media.image import ImageMediaIO
from mediaref.models.qwen2_vl import Qwen2VLMultiModalProcessor

# -- a miss decodes once; the fork is released, the caller's ref is not -----------------------


@pytest.mark.parametrize("as_list", [True, False], ids=["list-of-refs", "single-ref"])
def test_miss_decodes_once_and_its_fork_is_released_while_the_callers_ref_stays_usable(
    as_list: bool,
) -> None:
    processor = make_processor(make_inspecting_processor_class())
    data = image_bytes(1)
    ref, decoder = instrumented_ref(data)

    mm_data = {"image": [ref] if as_list else ref}
    out = processor.apply(processor.build_inputs(IMAGE_PROMPT, mm_data))

    assert decoder.calls == 1
    assert decoder.thread_names[0].startswith("mediaref-media")
    assert_same_output(out, reference_output([data]))
    (state,) = type(processor).states
    (owned,) = state.owned_refs
    assert owned is not ref  # processing worked on its own fork...
    assert owned.is_released and owned.data == b""  # ...and let go of it
    assert owned.is_decoded  # cleanup leaves the decoded result readable
    assert not ref.is_released and ref.data == data  # the caller's hold is untouched

    # The caller can reuse its ref: decoding is memoized, so it costs no second decode.
    assert ref.decode().size == (56, 56)
    fresh = make_processor()
    again = fresh.apply(fresh.build_inputs(IMAGE_PROMPT, {"image": [ref]}))
    assert_same_output(again, out)
    assert decoder.calls == 1
    assert not ref.is_released


def test_a_miss_payload_is_released_after_the_split_apply_not_before() -> None:
    processor = make_processor()
    ref, decoder = instrumented_ref(image_bytes(2))

    with processor.apply_phase1(processor.build_inputs(IMAGE_PROMPT, {"image": [ref]})) as state:
        (owned,) = state.owned_refs
        state.wait_decodes()
        assert not owned.is_released  # phase 2 still needs it
        processor.apply_phase2(state)
        assert not owned.is_released  # released by the owning context, not by phase 2
    assert owned.is_released
    assert decoder.calls == 1
    assert state.timings.num_misses == 1 and state.timings.num_hits == 0


# -- a hit never decodes ------------------------------------------------------------------------


def test_a_hit_never_decodes_and_serves_the_cached_output() -> None:
    processor = make_processor(make_inspecting_processor_class())
    data = image_bytes(3)
    first_ref, first_decoder = instrumented_ref(data)
    first = processor.apply(processor.build_inputs(IMAGE_PROMPT, {"image": [first_ref]}))
    assert first_decoder.calls == 1

    second_ref, second_decoder = instrumented_ref(data)  # same bytes, fresh ref and decoder
    second = processor.apply(processor.build_inputs(IMAGE_PROMPT, {"image": [second_ref]}))

    assert second_decoder.calls == 0
    assert not second_ref.is_decoded
    assert len(type(processor).hf_calls) == 1  # the hit never reached the HF processor
    assert_same_output(second, first)
    assert second["mm_hashes"] == first["mm_hashes"]
    hit_state = type(processor).states[1]
    assert hit_state.timings.num_hits == 1 and hit_state.timings.num_misses == 0
    (owned,) = hit_state.owned_refs
    assert owned.is_released and not owned.is_decoded
    # The caller's ref was never touched: it still decodes (once) on demand.
    assert second_ref.decode().size == (56, 56)
    assert second_decoder.calls == 1


def test_only_the_misses_of_a_mixed_request_decode() -> None:
    processor = make_processor()
    warm_ref, _ = instrumented_ref(image_bytes(4))
    processor.apply(processor.build_inputs(IMAGE_PROMPT, {"image": [warm_ref]}))

    hit_ref, hit_decoder = instrumented_ref(image_bytes(4))
    miss_ref, miss_decoder = instrumented_ref(image_bytes(5))
    out = processor.apply(processor.build_inputs(image_prompt(2), {"image": [hit_ref, miss_ref]}))

    assert (hit_decoder.calls, miss_decoder.calls) == (0, 1)
    assert_same_output(out, reference_output([image_bytes(4), image_bytes(5)]))


# -- misses decode concurrently -----------------------------------------------------------------


def test_four_misses_decode_concurrently_on_the_media_pool() -> None:
    processor = make_processor()
    # Each decoder waits at the barrier until all four are inside a decoder at the same time; run
    # one after another, the first would wait alone until the timeout and break the barrier.
    barrier = threading.Barrier(4, timeout=WAIT_S)
    datas = [image_bytes(10 + i) for i in range(4)]
    refs, decoders = zip(*(instrumented_ref(data, barrier=barrier) for data in datas), strict=True)

    out = processor.apply(processor.build_inputs(image_prompt(4), {"image": list(refs)}))

    assert not barrier.broken
    assert [d.calls for d in decoders] == [1, 1, 1, 1]
    assert len({d.thread_names[0] for d in decoders}) == 4
    assert_same_output(out, reference_output(datas))


# -- a corrupt item: 422 after its siblings drain, nothing leaked -----------------------------


def _raise_with_a_held_sibling(
    run: Callable[[], object],
    corrupt_decoder: InstrumentedDecoder,
    slow_decoder: InstrumentedDecoder,
    slow_gate: threading.Event,
) -> tuple[BaseException | None, bool]:
    """Run ``run`` on a thread with the slow decode held; release it after the corrupt one failed.

    Returns what ``run`` raised and whether the slow decode had finished when it propagated.
    """

    def run_and_observe() -> tuple[BaseException | None, bool]:
        try:
            run()
        except BaseException as exc:  # the test inspects it
            # What matters is the sibling's state at the moment the error propagates.
            return exc, slow_decoder.finished.is_set()
        return None, slow_decoder.finished.is_set()

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_and_observe)
        assert corrupt_decoder.finished.wait(WAIT_S) and slow_decoder.started.wait(WAIT_S)
        # The corrupt decode has failed; the caller must still be waiting on its sibling. Give an
        # implementation that raised early ample time to show it (a correct one cannot finish).
        with pytest.raises(TimeoutError):
            running.result(timeout=0.5)
        slow_gate.set()
        return running.result(timeout=WAIT_S)


def test_wait_decodes_drains_every_decode_before_raising() -> None:
    processor = make_processor()
    corrupt_ref, corrupt_decoder = instrumented_ref(CORRUPT_IMAGE)
    slow_gate = threading.Event()
    slow_ref, slow_decoder = instrumented_ref(image_bytes(19), gate=slow_gate)

    with processor.apply_phase1(
        processor.build_inputs(image_prompt(2), {"image": [corrupt_ref, slow_ref]})
    ) as state:
        error, sibling_finished_first = _raise_with_a_held_sibling(
            state.wait_decodes, corrupt_decoder, slow_decoder, slow_gate
        )
        assert not any(owned.is_released for owned in state.owned_refs)  # the context's job
    assert isinstance(error, VLLMUnprocessableEntityError)
    assert str(error).startswith("image media at index 0 ")
    assert sibling_finished_first


def test_corrupt_item_is_a_422_raised_only_after_its_slow_sibling_finishes() -> None:
    processor = make_processor(make_inspecting_processor_class())
    corrupt_ref, corrupt_decoder = instrumented_ref(CORRUPT_IMAGE)
    slow_gate = threading.Event()
    slow_ref, slow_decoder = instrumented_ref(image_bytes(20), gate=slow_gate)
    inputs = processor.build_inputs(image_prompt(2), {"image": [corrupt_ref, slow_ref]})

    error, sibling_finished_first = _raise_with_a_held_sibling(
        lambda: processor.apply(inputs), corrupt_decoder, slow_decoder, slow_gate
    )

    assert isinstance(error, VLLMUnprocessableEntityError)
    assert error.status_code == 422
    assert str(error).startswith("image media at index 0")
    assert (error.modality, error.index) == ("image", 0)
    assert error.parameter is None
    assert isinstance(error.__cause__, ValueError)
    assert sibling_finished_first
    assert not slow_decoder.gate_timed_out
    (state,) = type(processor).states
    assert all(job.future.done() for job in state.jobs)
    assert all(owned.is_released for owned in state.owned_refs)
    assert type(processor).hf_calls == []  # HF never saw a request with a failed decode
    assert not corrupt_ref.is_released and not slow_ref.is_released  # the caller's refs


def test_corrupt_item_keeps_its_request_index_when_cached_siblings_are_skipped() -> None:
    processor = make_processor()
    warm = [ImageMediaIO().load_bytes_ref(image_bytes(i)) for i in (21, 22)]
    processor.apply(processor.build_inputs(image_prompt(2), {"image": warm}))

    refs = [ImageMediaIO().load_bytes_ref(image_bytes(i)) for i in (21, 22)]
    corrupt_ref, _ = instrumented_ref(CORRUPT_IMAGE)
    with pytest.raises(VLLMUnprocessableEntityError, match=r"^image media at index 2 ") as info:
        processor.apply(processor.build_inputs(image_prompt(3), {"image": [*refs, corrupt_ref]}))
    assert info.value.index == 2


# -- bytes during and after the HF call -------------------------------------------------------


@pytest.mark.parametrize("hf_raises", [False, True], ids=["hf-succeeds", "hf-raises"])
def test_payloads_are_readable_during_the_hf_call_and_released_after_it(hf_raises: bool) -> None:
    processor_cls = make_inspecting_processor_class()
    processor = make_processor(processor_cls)
    assert processor.supports_two_phase_apply  # overriding a stage keeps the split apply
    datas = [image_bytes(30), image_bytes(31)]
    refs = [instrumented_ref(data)[0] for data in datas]
    if hf_raises:
        processor_cls.hf_error = RuntimeError("the HF processor blew up")

    inputs = processor.build_inputs(image_prompt(2), {"image": refs})
    if hf_raises:
        with pytest.raises(RuntimeError, match="blew up"):
            processor.apply(inputs)
    else:
        assert_same_output(processor.apply(inputs), reference_output(datas))

    (call,) = processor_cls.hf_calls
    assert call.num_images == 2
    assert call.owned_payloads == datas  # the payloads were still held during the call
    assert call.released == [False, False]
    (state,) = processor_cls.states
    assert all(owned.is_released for owned in state.owned_refs)
    assert [ref.data for ref in refs] == datas  # the caller's refs keep theirs


# -- phase 2 re-derives the cache state --------------------------------------------------------


def test_an_evicted_hit_decodes_late_from_its_retained_payload() -> None:
    processor_cls = make_inspecting_processor_class()
    processor = make_processor(processor_cls)
    data = image_bytes(40)
    warm_ref = ImageMediaIO().load_bytes_ref(data)
    processor.apply(processor.build_inputs(IMAGE_PROMPT, {"image": [warm_ref]}))
    ref, decoder = instrumented_ref(data)

    with processor.apply_phase1(processor.build_inputs(IMAGE_PROMPT, {"image": [ref]})) as state:
        assert decoder.calls == 0  # a hit in phase 1: nothing submitted
        (owned,) = state.owned_refs
        assert not owned.is_released and owned.data == data  # kept for exactly this race
        processor.cache.clear_cache()  # another request's phases evicted it meanwhile
        state.wait_decodes()
        out = processor.apply_phase2(state)

    assert decoder.calls == 1
    assert len(processor_cls.hf_calls) == 2
    assert state.timings.num_misses == 1 and state.timings.num_hits == 0
    assert owned.is_released
    assert_same_output(out, reference_output([data]))


def test_an_evicted_hit_that_fails_to_decode_late_is_still_a_422() -> None:
    # The cache is keyed by the hash, so a corrupt payload can be a "hit" when its key was cached:
    # an EXIF-style identity collision, modelled here by reusing the key of a cached image.
    processor = make_processor()
    good = ImageMediaIO().load_bytes_ref(image_bytes(41))
    processor.apply(processor.build_inputs(IMAGE_PROMPT, {"image": [good]}))
    _, corrupt_decoder = instrumented_ref(CORRUPT_IMAGE)
    corrupt = MediaRef(
        CORRUPT_IMAGE, corrupt_decoder, good.spec, key=good.key, hash_view=good.hash_view
    )

    inputs = processor.build_inputs(IMAGE_PROMPT, {"image": [corrupt]})
    with processor.apply_phase1(inputs) as state:
        processor.cache.clear_cache()
        state.wait_decodes()
        with pytest.raises(VLLMUnprocessableEntityError, match=r"^image media at index 0 "):
            processor.apply_phase2(state)
    assert corrupt_decoder.calls == 1
    assert all(owned.is_released for owned in state.owned_refs)


def test_a_miss_that_became_a_hit_between_the_phases_skips_hf() -> None:
    processor_cls = make_inspecting_processor_class()
    processor = make_processor(processor_cls)
    data = image_bytes(42)
    ref, decoder = instrumented_ref(data)

    with processor.apply_phase1(processor.build_inputs(IMAGE_PROMPT, {"image": [ref]})) as state:
        # Between this request's phases, another request processes the same image.
        other = processor.apply(
            processor.build_inputs(IMAGE_PROMPT, {"image": [ImageMediaIO().load_bytes_ref(data)]})
        )
        assert len(processor_cls.hf_calls) == 1
        state.wait_decodes()
        out = processor.apply_phase2(state)

    assert len(processor_cls.hf_calls) == 1  # phase 2 found it cached
    assert state.timings.num_hits == 1 and state.timings.num_misses == 0
    assert decoder.calls == 1  # decoded in phase 1 (it was a miss then); never again
    assert_same_output(out, other)


# -- the two-phase probe -------------------------------------------------------------------------


def _probe_classes() -> dict[str, type[Any]]:
    """Fresh classes each call: the probe logs once per class, process-wide."""

    # vLLM's signatures: a model file's override of these hooks runs unchanged.
    class OverridesApply(Qwen2VLMultiModalProcessor):
        def apply(self, inputs: Any, timing_ctx: Any = None) -> Any:
            return super().apply(inputs, timing_ctx)

    class OverridesCachedApply(Qwen2VLMultiModalProcessor):
        def _cached_apply_hf_processor(self, inputs: Any, timing_ctx: Any) -> Any:
            return super()._cached_apply_hf_processor(inputs, timing_ctx)

    class OverridesApplyHf(Qwen2VLMultiModalProcessor):
        def _apply_hf_processor(self, inputs: Any, timing_ctx: Any) -> Any:
            return super()._apply_hf_processor(inputs, timing_ctx)

    class OverridesTwo(OverridesApply):
        def _apply_hf_processor(self, inputs: Any, timing_ctx: Any) -> Any:
            return super()._apply_hf_processor(inputs, timing_ctx)

    return {
        "apply": OverridesApply,
        "_cached_apply_hf_processor": OverridesCachedApply,
        "_apply_hf_processor": OverridesApplyHf,
        "apply, _apply_hf_processor": OverridesTwo,
    }


@pytest.mark.parametrize("overridden", list(_probe_classes()), ids=lambda s: s.replace(", ", "+"))
def test_overriding_a_composed_method_disables_the_split_and_logs_once(
    overridden: str, caplog: pytest.LogCaptureFixture
) -> None:
    processor_cls = _probe_classes()[overridden]
    processor = make_processor(processor_cls)
    with caplog.at_level(logging.DEBUG, logger="mediaref.processing.processor"):
        assert processor.supports_two_phase_apply is False
        assert processor.supports_two_phase_apply is False
        assert make_processor(processor_cls).supports_two_phase_apply is False

    records = [r for r in caplog.records if r.name == "mediaref.processing.processor"]
    assert len(records) == 1
    assert records[0].levelno == logging.DEBUG
    message = records[0].getMessage()
    assert f"{processor_cls.__name__} overrides {overridden};" in message
    # An overriding processor still processes correctly through its own apply.
    out = processor.apply(processor.build_inputs(IMAGE_PROMPT, {"image": [counted_ref(50)]}))
    assert_same_output(out, reference_output([image_bytes(50)]))


def test_the_base_processor_and_stage_overrides_keep_the_split(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="mediaref.processing.processor"):
        assert make_processor().supports_two_phase_apply is True
        assert make_processor(make_inspecting_processor_class()).supports_two_phase_apply is True
    assert not [r for r in caplog.records if r.name == "mediaref.processing.processor"]
