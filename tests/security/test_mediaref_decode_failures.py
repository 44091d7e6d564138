"""What a memoized decode remembers: verdicts on the payload, never the server's trouble.

One transient failure (``MemoryError`` while other requests held the memory, a request's budget
refusal, an interrupt) must not make a payload undecodable for every later request that shares
its ref. Pinned here for ``MediaRef`` itself, for its forks and mapped refs, and for the image
decoder's closure, which must be able to run again after a failure that was not remembered.
"""

from __future__ import annotations

import threading

import pytest

from _image_samples import encode, gradient_rgb
from mediaref.exceptions import MediaTooLargeError, VLLMUnprocessableEntityError
from mediaref.media import image as image_module
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.image import ImageMediaIO


class FailingThenOk:
    """Raises each of ``failures`` on successive calls, then returns ``value``."""

    def __init__(self, *failures: BaseException, value: object = "decoded") -> None:
        self.failures = list(failures)
        self.value = value
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return self.value


SERVER_SIDE = [
    pytest.param(MemoryError(), id="MemoryError"),
    pytest.param(OSError(24, "Too many open files"), id="OSError"),
    pytest.param(TypeError("bug"), id="TypeError"),
    pytest.param(RuntimeError("pool shut down"), id="RuntimeError"),
    pytest.param(MediaTooLargeError("over the request's decoded-bytes budget"), id="cap"),
    pytest.param(KeyboardInterrupt(), id="KeyboardInterrupt"),
    pytest.param(SystemExit(1), id="SystemExit"),
]


@pytest.mark.parametrize("failure", SERVER_SIDE)
def test_a_failure_that_is_not_a_verdict_propagates_and_is_not_remembered(
    failure: BaseException,
) -> None:
    decoder = FailingThenOk(failure)
    ref = MediaRef(b"payload", decoder, DecodeSpec())
    with pytest.raises(type(failure)) as caught:
        ref.decode()
    assert caught.value is failure  # as itself, not wrapped
    assert not ref.is_decoded and ref.data == b"payload"
    assert ref.decode() == "decoded"  # the next decode tries again, and succeeds
    assert decoder.calls == 2 and ref.is_decoded


@pytest.mark.parametrize(
    "verdict",
    [ValueError("Failed to load image: corrupt"), VLLMUnprocessableEntityError("refused format")],
)
def test_a_verdict_on_the_payload_is_remembered(verdict: ValueError) -> None:
    decoder = FailingThenOk(verdict)
    ref = MediaRef(b"payload", decoder, DecodeSpec())
    for _ in range(3):
        with pytest.raises(ValueError) as caught:
            ref.decode()
        assert caught.value is verdict
    assert decoder.calls == 1


def test_forks_share_the_retry_after_a_transient_failure() -> None:
    decoder = FailingThenOk(MemoryError())
    ref = MediaRef(b"payload", decoder, DecodeSpec())
    sibling = ref.fork()
    with pytest.raises(MemoryError):
        ref.decode()
    assert sibling.decode() == "decoded" and ref.decode() == "decoded"
    assert decoder.calls == 2


def test_a_mapped_ref_retries_its_parent_after_a_transient_failure() -> None:
    decoder = FailingThenOk(MemoryError(), value=2)
    ref = MediaRef(b"payload", decoder, DecodeSpec())
    mapped = ref.map(lambda v: v * 10, times=10)
    with pytest.raises(MemoryError):
        mapped.decode()
    assert mapped.decode() == 20 and ref.decode() == 2
    assert decoder.calls == 2


def test_callers_waiting_on_a_transiently_failing_decode_try_again() -> None:
    gate, started = threading.Event(), threading.Event()
    calls: list[int] = []

    def decoder() -> object:
        calls.append(1)
        started.set()
        if len(calls) == 1:
            assert gate.wait(10)
            raise MemoryError
        return "second try"

    ref = MediaRef(b"payload", decoder, DecodeSpec())
    outcomes: list[object] = []

    def decode() -> None:
        try:
            outcomes.append(ref.decode())
        except MemoryError as exc:
            outcomes.append(exc)

    first = threading.Thread(target=decode)
    first.start()
    assert started.wait(10)
    waiter = threading.Thread(target=decode)  # queues on the decode lock
    waiter.start()
    gate.set()
    first.join(10)
    waiter.join(10)
    assert sorted(map(type, outcomes), key=str) == sorted([MemoryError, str], key=str)
    assert "second try" in outcomes and len(calls) == 2


def test_the_image_closure_reopens_the_payload_after_a_failure_it_did_not_remember(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first attempt fails after the header was opened and closed again; the retry must
    # reopen the bytes rather than reuse a closed file.
    data = encode(gradient_rgb(12, 10), "PNG")
    ref = ImageMediaIO().load_bytes_ref(data)
    real_decode = image_module.decode_first_frame
    attempts: list[int] = []

    def failing_once(*args: object) -> object:
        attempts.append(1)
        if len(attempts) == 1:
            raise MemoryError
        return real_decode(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(image_module, "decode_first_frame", failing_once)
    with pytest.raises(MemoryError):
        ref.decode()
    assert ref.decode().size == (12, 10)
    assert len(attempts) == 2


@pytest.mark.parametrize("image_format", ["PNG", "JPEG", "GIF", "WEBP", "BMP"])
def test_an_image_refused_by_one_requests_budget_decodes_under_the_next(image_format: str) -> None:
    data = encode(gradient_rgb(40, 30), image_format)
    ref = ImageMediaIO().load_bytes_ref(data)
    tight = MediaDecodedBudget(limit_bytes=1000)
    with decode_budget_scope(tight), pytest.raises(MediaTooLargeError, match="decoded media"):
        ref.decode()
    assert tight.used == 0
    roomy = MediaDecodedBudget(limit_bytes=10_000_000)
    with decode_budget_scope(roomy):
        assert ref.decode().size == (40, 30)
    assert roomy.used > 40 * 30 * 4 - 1
