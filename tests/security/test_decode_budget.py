"""The per-request decoded-bytes budget (``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES``).

A few kilobytes of encoded media can declare gigabytes of pixels, and per-item caps do not bound
a request of many items. Pinned here: ``charge``/``reserve``/``settle`` semantics and their thread
safety; which budget a decode charges (explicit, else the scope of the running request, scoped per
thread, else a per-item check); that the image decoder charges before it rasterizes; and that a
request whose items each fit but together do not fails through the processor with a 413.
"""

from __future__ import annotations

import concurrent.futures
import threading

import pytest
from PIL import Image

from _image_samples import encode, gradient_rgb
from _instrumented_decoding import image_bytes, image_prompt, make_processor
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.media.decode import (
    MediaDecodeJob,
    collect_media_decodes,
    submit_media_decodes,
)
from mediaref.media.decode_budget import (
    MediaDecodedBudget,
    charge_decoded_bytes,
    current_decode_budget,
    decode_budget_scope,
    request_decode_limit_bytes,
)
from mediaref.media.image import ImageMediaIO
from mediaref.media.image._pixels import decoded_image_bytes
from mediaref.processing.processor import MultiModalApplyState

WAIT_S = 10.0
SETTING = "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES"


@pytest.fixture(autouse=True)
def _default_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SETTING, raising=False)


# --- the limit ---------------------------------------------------------------------------------


def test_the_default_limit_is_vllms(monkeypatch: pytest.MonkeyPatch) -> None:
    assert request_decode_limit_bytes() == 715_827_880 == MediaDecodedBudget().limit_bytes
    monkeypatch.setenv(SETTING, "0")
    assert request_decode_limit_bytes() is None and MediaDecodedBudget().limit_bytes is None
    monkeypatch.setenv(SETTING, "-5")
    assert request_decode_limit_bytes() is None


def test_a_budget_reads_the_limit_once_when_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SETTING, "100")
    budget = MediaDecodedBudget()
    monkeypatch.setenv(SETTING, "1000000")
    with pytest.raises(MediaTooLargeError):
        budget.charge(101)


# --- charge ------------------------------------------------------------------------------------


def test_charge_counts_until_the_limit_then_refuses_without_counting() -> None:
    budget = MediaDecodedBudget(limit_bytes=100)
    budget.charge(60)
    budget.charge(40)
    assert budget.used == 100
    with pytest.raises(MediaTooLargeError, match=r"101 bytes, over the 100-byte limit") as caught:
        budget.charge(1)
    assert caught.value.status_code == 413 and SETTING in str(caught.value)
    assert budget.used == 100


def test_charge_ignores_nothing_and_an_unlimited_budget_counts_nothing() -> None:
    budget = MediaDecodedBudget(limit_bytes=10)
    budget.charge(0)
    budget.charge(-5)
    assert budget.used == 0
    unlimited = MediaDecodedBudget(limit_bytes=0)
    unlimited.charge(10**15)
    assert unlimited.limit_bytes is None


def test_concurrent_charges_never_overshoot_and_lose_no_count() -> None:
    budget = MediaDecodedBudget(limit_bytes=1000)
    barrier = threading.Barrier(16)
    refused = []

    def charge_many() -> None:
        barrier.wait(WAIT_S)
        for _ in range(50):
            try:
                budget.charge(7)
            except MediaTooLargeError:
                refused.append(1)

    threads = [threading.Thread(target=charge_many) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert budget.used == 7 * (1000 // 7)  # every charge that fit, and no more
    assert len(refused) == 16 * 50 - 1000 // 7


# --- reserve and settle ------------------------------------------------------------------------


def test_reserve_holds_then_settle_counts_what_was_used() -> None:
    budget = MediaDecodedBudget(limit_bytes=100)
    held = budget.reserve(80)
    assert held == 80 and budget.used == 0
    budget.settle(held, 30)
    assert budget.used == 30
    assert budget.reserve(100) == 70  # only what is left, when no other reservation could free more


def test_settle_refuses_more_than_was_reserved_and_releases_the_reservation() -> None:
    budget = MediaDecodedBudget(limit_bytes=100)
    held = budget.reserve(10)
    with pytest.raises(MediaTooLargeError):
        budget.settle(held, 11)
    assert budget.used == 0
    assert budget.reserve(100) == 100  # the failed reservation no longer stands in the way


def test_reserve_refuses_when_nothing_is_left() -> None:
    budget = MediaDecodedBudget(limit_bytes=10)
    budget.charge(10)
    with pytest.raises(MediaTooLargeError):
        budget.reserve(1)


def test_reserve_waits_for_another_reservation_to_settle() -> None:
    budget = MediaDecodedBudget(limit_bytes=100)
    first = budget.reserve(100)
    second_held: list[int] = []
    waiter = threading.Thread(target=lambda: second_held.append(budget.reserve(60)))
    waiter.start()
    waiter.join(0.1)
    assert waiter.is_alive() and second_held == []  # blocked: only a reservation is in the way
    budget.settle(first, 40)
    waiter.join(WAIT_S)
    assert second_held == [60]


def test_charge_waits_only_when_reservations_alone_stand_in_the_way() -> None:
    budget = MediaDecodedBudget(limit_bytes=100)
    held = budget.reserve(90)
    with pytest.raises(MediaTooLargeError):
        budget.charge(101)  # over the limit on its own: refused at once, no waiting
    charged = threading.Event()
    charger = threading.Thread(target=lambda: (budget.charge(50), charged.set()))
    charger.start()
    assert not charged.wait(0.1)
    budget.settle(held, 20)
    assert charged.wait(WAIT_S)
    assert budget.used == 70


# --- which budget a decode charges -------------------------------------------------------------


def test_without_a_scope_each_item_alone_must_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SETTING, "1000")
    assert current_decode_budget() is None
    charge_decoded_bytes(1000)
    charge_decoded_bytes(1000)  # nothing accumulates offline
    with pytest.raises(MediaTooLargeError, match="1001 bytes"):
        charge_decoded_bytes(1001)
    monkeypatch.setenv(SETTING, "0")
    charge_decoded_bytes(10**15)


def test_a_scope_is_per_thread_and_nests() -> None:
    outer, inner = MediaDecodedBudget(limit_bytes=100), MediaDecodedBudget(limit_bytes=100)
    seen_elsewhere: list[object] = []
    with decode_budget_scope(outer):
        other = threading.Thread(target=lambda: seen_elsewhere.append(current_decode_budget()))
        other.start()
        other.join(WAIT_S)
        with decode_budget_scope(inner):
            charge_decoded_bytes(30)
        charge_decoded_bytes(10)
        assert current_decode_budget() is outer
    assert current_decode_budget() is None
    assert seen_elsewhere == [None]
    assert (outer.used, inner.used) == (10, 30)


def test_an_explicit_budget_wins_over_the_scope() -> None:
    scoped, explicit = MediaDecodedBudget(limit_bytes=100), MediaDecodedBudget(limit_bytes=100)
    with decode_budget_scope(scoped):
        charge_decoded_bytes(25, explicit)
    assert (scoped.used, explicit.used) == (0, 25)


def test_submitted_decodes_charge_the_requests_budget_on_the_worker_threads() -> None:
    budget = MediaDecodedBudget(limit_bytes=1000)

    def decoder() -> str:
        charge_decoded_bytes(300)
        return threading.current_thread().name

    refs = [MediaRef(bytes([i]), decoder, DecodeSpec()) for i in range(4)]
    jobs: list[MediaDecodeJob] = []
    with concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="pool") as pool:
        submit_media_decodes(
            [("image", i, ref) for i, ref in enumerate(refs)], jobs, executor=pool, budget=budget
        )
        with pytest.raises(MediaTooLargeError, match=r"^image media at index \d is too large"):
            collect_media_decodes(jobs)
    assert budget.used == 900  # three fit; the fourth, whichever it was, was refused
    assert sum(job.future.exception() is not None for job in jobs) == 1
    assert current_decode_budget() is None


def test_the_apply_state_owns_one_budget_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SETTING, "12345")
    processor = make_processor()
    refs = [ImageMediaIO().load_bytes_ref(image_bytes(60))]
    with processor.apply_phase1(processor.build_inputs(image_prompt(1), {"image": refs})) as one:
        assert isinstance(one, MultiModalApplyState)
        with processor.apply_phase1(
            processor.build_inputs(image_prompt(1), {"image": refs})
        ) as two:
            assert one.decoded_budget is not two.decoded_budget
            assert one.decoded_budget.limit_bytes == 12345


# --- the image decoder -------------------------------------------------------------------------


def test_the_image_decoder_charges_its_raster_before_allocating_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = encode(gradient_rgb(200, 100), "PNG")
    cost = decoded_image_bytes((200, 100))
    assert cost == 200 * 100 * 4 + 8 * 200
    ref = ImageMediaIO().load_bytes_ref(data)
    tight = MediaDecodedBudget(limit_bytes=cost - 1)
    cores_before = Image.core.get_stats()["new_count"]  # type: ignore[attr-defined]
    with decode_budget_scope(tight), pytest.raises(MediaTooLargeError):
        ref.decode()
    assert Image.core.get_stats()["new_count"] == cores_before  # type: ignore[attr-defined]
    exact = MediaDecodedBudget(limit_bytes=cost)
    with decode_budget_scope(exact):
        assert ref.decode().size == (200, 100)
    assert exact.used == cost


def test_a_tall_thin_image_is_charged_for_its_rows() -> None:
    # Pillow keeps a pointer per row: 1 x N pixels costs 12 bytes a pixel, not 4.
    assert decoded_image_bytes((1, 1_000_000)) == 12_000_000
    assert decoded_image_bytes((1_000_000, 1)) == 12_000_000  # an EXIF turn makes it tall


def test_image_decoded_budget_argument_wins_and_stays_out_of_the_spec() -> None:
    data = encode(gradient_rgb(10, 10), "PNG")
    own = MediaDecodedBudget(limit_bytes=10**6)
    media_io = ImageMediaIO(decoded_budget=own)
    assert media_io.get_decode_spec() == ImageMediaIO().get_decode_spec()
    assert media_io.load_bytes_ref(data).key == ImageMediaIO().load_bytes_ref(data).key
    scoped = MediaDecodedBudget(limit_bytes=10**6)
    with decode_budget_scope(scoped):
        media_io.load_bytes(data)
    assert (own.used, scoped.used) == (decoded_image_bytes((10, 10)), 0)


def test_image_decoded_budget_is_vllms_keyword() -> None:
    budget = MediaDecodedBudget(limit_bytes=10)
    assert ImageMediaIO("RGB", decoded_budget=budget).decoded_budget is budget


# --- through the processor ---------------------------------------------------------------------


def test_a_request_over_the_budget_fails_with_413_though_each_item_fits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    per_item = decoded_image_bytes((56, 56))
    monkeypatch.setenv(SETTING, str(2 * per_item + per_item // 2))  # room for two and a half
    datas = [image_bytes(i) for i in (61, 62, 63)]
    for data in datas:  # each alone fits, in a request of its own
        processor = make_processor()
        processor.apply(
            processor.build_inputs(
                image_prompt(1), {"image": [ImageMediaIO().load_bytes_ref(data)]}
            )
        )
    processor = make_processor()
    refs = [ImageMediaIO().load_bytes_ref(data) for data in datas]
    with pytest.raises(MediaTooLargeError) as caught:
        processor.apply(processor.build_inputs(image_prompt(3), {"image": refs}))
    error = caught.value
    assert error.status_code == 413 and error.modality == "image" and error.index in (0, 1, 2)
    assert str(error).startswith(f"image media at index {error.index} is too large to decode")
    assert SETTING in str(error)
    # The refusal is the request's, not the payload's: the same refs decode in smaller requests.
    for ref in refs:
        processor = make_processor()
        processor.apply(processor.build_inputs(image_prompt(1), {"image": [ref]}))


def test_a_webp_is_charged_before_pillow_opens_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # libwebp reserves the whole canvas when Pillow opens a WebP: the charge must come first.
    from PIL import WebPImagePlugin

    opened: list[object] = []
    real_open = WebPImagePlugin.WebPImageFile._open
    monkeypatch.setattr(
        WebPImagePlugin.WebPImageFile,
        "_open",
        lambda self: (opened.append(self), real_open(self))[1],
    )
    ref = ImageMediaIO().load_bytes_ref(encode(gradient_rgb(64, 64), "WEBP", lossless=True))
    assert opened == []
    with (
        decode_budget_scope(MediaDecodedBudget(limit_bytes=1000)),
        pytest.raises(MediaTooLargeError),
    ):
        ref.decode()
    assert opened == []
    budget = MediaDecodedBudget(limit_bytes=10**6)
    with decode_budget_scope(budget):
        assert ref.decode().size == (64, 64)
    assert budget.used == decoded_image_bytes((64, 64)) and len(opened) == 1
