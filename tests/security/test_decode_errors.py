"""The decode error surface: the client's failures are 422/413 naming the item; the server's are not.

A decoder's ``ValueError`` (a corrupt payload) is a 422 and a :class:`MediaTooLargeError` (a cap
refused at decode) a 413, both naming the modality and the item's index. Anything else the
decoder raises is the server's fault: it is logged with the item's position, propagates as
itself, is never turned into a client error, and (see test_mediaref_decode_failures.py) is not
remembered, so the same request can succeed when sent again.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading

import pytest
from PIL import Image

from _image_samples import encode, gradient_rgb
from _instrumented_decoding import image_bytes, image_prompt, make_processor
from mediaref.exceptions import MediaTooLargeError, VLLMUnprocessableEntityError
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.media.decode import (
    MediaDecodeJob,
    collect_media_decodes,
    collect_media_decodes_async,
    submit_media_decodes,
    unprocessable_media_error,
)
from mediaref.media.image import ImageMediaIO


def failing_ref(exc: BaseException) -> MediaRef[object]:
    def decoder() -> object:
        raise exc

    return MediaRef(b"x", decoder, DecodeSpec())


def ok_ref(value: object = "ok") -> MediaRef[object]:
    return MediaRef(b"y", lambda: value, DecodeSpec())


def run_jobs(pool: concurrent.futures.Executor, *refs: MediaRef[object]) -> list[MediaDecodeJob]:
    jobs: list[MediaDecodeJob] = []
    submit_media_decodes([("image", i, ref) for i, ref in enumerate(refs)], jobs, executor=pool)
    return jobs


# --- the mapping ------------------------------------------------------------------------------


def test_a_value_error_is_a_422_naming_the_item() -> None:
    error = unprocessable_media_error("audio", 2, ValueError("Failed to decode audio: bad"))
    assert isinstance(error, VLLMUnprocessableEntityError) and error.status_code == 422
    assert (error.modality, error.index) == ("audio", 2)
    assert str(error) == "audio media at index 2 could not be decoded: Failed to decode audio: bad"


def test_a_cap_refused_at_decode_is_a_413_naming_the_item() -> None:
    cap = MediaTooLargeError("image of 40x26 = 1040 pixels exceeds the 1000-pixel limit")
    error = unprocessable_media_error("image", 1, cap)
    assert type(error) is MediaTooLargeError and error.status_code == 413
    assert (error.modality, error.index) == ("image", 1)
    assert str(error).startswith("image media at index 1 is too large to decode: image of 40x26")


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(MemoryError(), id="MemoryError"),
        pytest.param(TypeError("a bug"), id="TypeError"),
        pytest.param(RuntimeError("boom"), id="RuntimeError"),
        pytest.param(OSError(28, "No space left on device"), id="OSError"),
    ],
)
def test_a_server_side_failure_propagates_as_itself_and_is_logged(
    pool: concurrent.futures.Executor, failure: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = run_jobs(pool, ok_ref(), failing_ref(failure))
    with (
        caplog.at_level(logging.ERROR, logger="mediaref.media.decode"),
        pytest.raises(type(failure)) as caught,
    ):
        collect_media_decodes(jobs)
    assert caught.value is failure
    assert not isinstance(caught.value, VLLMUnprocessableEntityError)
    (record,) = caplog.records
    assert "image media at index 1" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[1] is failure


def test_a_server_failure_after_a_client_failure_is_still_logged(
    pool: concurrent.futures.Executor, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = run_jobs(pool, failing_ref(ValueError("corrupt")), failing_ref(MemoryError()))
    with (
        caplog.at_level(logging.ERROR, logger="mediaref.media.decode"),
        pytest.raises(VLLMUnprocessableEntityError, match="index 0"),
    ):
        collect_media_decodes(jobs)
    assert [r.getMessage() for r in caplog.records] == [
        "decoding image media at index 1 failed on the server's side"
    ]


@pytest.mark.parametrize(
    "interrupt", [KeyboardInterrupt(), SystemExit(3)], ids=["KeyboardInterrupt", "SystemExit"]
)
def test_an_interrupt_in_a_decode_propagates(
    pool: concurrent.futures.Executor, interrupt: BaseException
) -> None:
    jobs = run_jobs(pool, failing_ref(interrupt))
    with pytest.raises(type(interrupt)):
        collect_media_decodes(jobs)


async def test_the_async_collect_sorts_failures_the_same_way(
    pool: concurrent.futures.Executor,
) -> None:
    with pytest.raises(MemoryError):
        await collect_media_decodes_async(run_jobs(pool, failing_ref(MemoryError())))
    with pytest.raises(MediaTooLargeError, match="index 0 is too large"):
        await collect_media_decodes_async(run_jobs(pool, failing_ref(MediaTooLargeError("cap"))))
    with pytest.raises(VLLMUnprocessableEntityError, match="index 0 could not be decoded"):
        await collect_media_decodes_async(run_jobs(pool, failing_ref(ValueError("bad"))))


# --- through the processor ---------------------------------------------------------------------


def test_a_pixel_cap_refused_at_decode_reaches_the_client_as_a_413(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refs = [ImageMediaIO().load_bytes_ref(image_bytes(i, 56)) for i in (40, 41)]
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000")  # lowered between fetch and decode
    processor = make_processor()
    with pytest.raises(MediaTooLargeError) as caught:
        processor.apply(processor.build_inputs(image_prompt(2), {"image": refs}))
    error = caught.value
    assert error.status_code == 413 and (error.modality, error.index) == ("image", 0)
    assert "56x56 = 3136 pixels exceeds the 1000-pixel limit" in str(error)
    # A cap is not a verdict on the payload: with the setting restored, the same refs decode.
    monkeypatch.delenv("VLLM_MAX_IMAGE_PIXELS")
    out = processor.apply(processor.build_inputs(image_prompt(2), {"image": refs}))
    assert len(out["mm_placeholders"]["image"]) == 2


def test_a_transient_decoder_failure_is_not_a_422_and_the_retry_succeeds() -> None:
    data = image_bytes(42)
    attempts: list[int] = []

    def decoder() -> Image.Image:
        attempts.append(1)
        if len(attempts) == 1:
            raise MemoryError
        return ImageMediaIO().load_bytes(data)

    ref = MediaRef(data, decoder, ImageMediaIO().get_decode_spec())
    processor = make_processor()
    with pytest.raises(MemoryError):
        processor.apply(processor.build_inputs(image_prompt(1), {"image": [ref]}))
    out = processor.apply(processor.build_inputs(image_prompt(1), {"image": [ref]}))
    assert len(out["mm_placeholders"]["image"]) == 1 and len(attempts) == 2


def test_a_corrupt_image_is_still_a_422_naming_its_index() -> None:
    good = ImageMediaIO().load_bytes_ref(encode(gradient_rgb(28, 28), "PNG"))
    corrupt = ImageMediaIO().load_bytes_ref(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    processor = make_processor()
    with pytest.raises(VLLMUnprocessableEntityError, match=r"^image media at index 1 ") as caught:
        processor.apply(processor.build_inputs(image_prompt(2), {"image": [good, corrupt]}))
    assert caught.value.status_code == 422


def test_a_blocked_sibling_is_drained_before_a_server_failure_propagates(
    pool: concurrent.futures.Executor,
) -> None:
    gate = threading.Event()
    finished = threading.Event()

    def slow() -> object:
        assert gate.wait(10)
        finished.set()
        return "slow"

    jobs = run_jobs(pool, failing_ref(MemoryError()), MediaRef(b"z", slow, DecodeSpec()))
    outcome: list[bool] = []

    def collect() -> None:
        try:
            collect_media_decodes(jobs)
        except MemoryError:
            outcome.append(finished.is_set())

    collector = threading.Thread(target=collect)
    collector.start()
    collector.join(0.2)
    assert collector.is_alive()
    gate.set()
    collector.join(10)
    assert outcome == [True]
