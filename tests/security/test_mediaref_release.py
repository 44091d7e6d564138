"""Releasing a ref never waits for a decode, and never loses the media that decode produces.

The async renderer closes a request's state on the event loop; when another request's fork of
the same payload was decoding, ``release()`` used to take the decode lock and stall the loop until
that decode ended. Pinned here: ``release()`` returns while a decode is blocked, ``data`` is
``b""`` at once, and the value the running decode produces is still readable through the released
ref afterwards. Every wait is bounded (10 s) so a blocking implementation fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import pytest

from mediaref.media.base import DecodeSpec, MediaRef

WAIT_S = 10.0


class GatedDecoder:
    """Blocks on ``gate`` (bounded), then returns ``value`` or raises ``error``; counts its calls."""

    def __init__(self, value: object = "pixels", error: BaseException | None = None) -> None:
        self.value, self.error = value, error
        self.gate, self.started, self.finished = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        self.started.set()
        try:
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
            if self.error is not None:
                raise self.error
            return self.value
        finally:
            self.finished.set()


def release_on_a_thread(ref: MediaRef[object]) -> threading.Thread:
    releaser = threading.Thread(target=ref.release)
    releaser.start()
    return releaser


def start_decoding(ref: MediaRef[object]) -> threading.Thread:
    def decode() -> None:
        try:
            ref.decode()
        except BaseException:  # some tests make the decode fail on purpose
            pass

    thread = threading.Thread(target=decode)
    thread.start()
    return thread


def test_release_returns_while_a_siblings_decode_is_blocked() -> None:
    decoder = GatedDecoder()
    callers = MediaRef(b"payload", decoder, DecodeSpec())
    request_a, request_b = callers.fork(), callers.fork()
    decoding = start_decoding(request_b)  # another request's decode of the shared payload
    assert decoder.started.wait(WAIT_S)

    releaser = release_on_a_thread(request_a)
    releaser.join(WAIT_S)
    assert not releaser.is_alive(), "release() waited for another ref's decode"
    assert not decoder.gate.is_set()  # it returned while the decode was still blocked
    assert request_a.data == b"" and request_a.is_released and not request_a.is_decoded

    decoder.gate.set()
    decoding.join(WAIT_S)
    assert request_a.decode() == "pixels" and request_a.is_decoded
    assert decoder.calls == 1


def test_release_returns_while_its_own_decode_runs_on_another_thread() -> None:
    decoder = GatedDecoder()
    ref = MediaRef(b"payload", decoder, DecodeSpec())
    decoding = start_decoding(ref)
    assert decoder.started.wait(WAIT_S)
    releaser = release_on_a_thread(ref)
    releaser.join(WAIT_S)
    assert not releaser.is_alive() and not decoder.gate.is_set()
    assert ref.data == b""
    decoder.gate.set()
    decoding.join(WAIT_S)
    assert ref.decode() == "pixels"


async def test_release_on_the_event_loop_does_not_stall_it() -> None:
    decoder = GatedDecoder()
    shared = MediaRef(b"payload", decoder, DecodeSpec())
    mine = shared.fork()
    loop = asyncio.get_running_loop()
    decoding = loop.run_in_executor(None, shared.decode)  # a sibling request's decode
    await loop.run_in_executor(None, decoder.started.wait, WAIT_S)
    # Open the gate from a timer: if release() blocked the loop, the loop would stay blocked
    # until then, and the gate would be seen open below.
    watchdog = threading.Timer(WAIT_S, decoder.gate.set)
    watchdog.start()
    try:
        mine.release()
        assert not decoder.gate.is_set(), "release() blocked the event loop on a decode"
        decoder.gate.set()
        assert await decoding == "pixels"
    finally:
        watchdog.cancel()
    assert mine.decode() == "pixels"


def test_release_after_the_decode_keeps_the_value() -> None:
    decoder = GatedDecoder()
    decoder.gate.set()
    ref = MediaRef(b"payload", decoder, DecodeSpec())
    twin = ref.fork()
    ref.decode()
    twin.release()  # twin never called decode(), but the shared decode had succeeded
    assert twin.decode() == "pixels" and twin.is_decoded and twin.data == b""


def test_release_before_any_decode_started_leaves_the_ref_undecodable() -> None:
    decoder = GatedDecoder()
    decoder.gate.set()
    ref = MediaRef(b"payload", decoder, DecodeSpec())
    twin = ref.fork()
    twin.release()
    assert ref.decode() == "pixels"
    with pytest.raises(RuntimeError, match="released before it was decoded"):
        twin.decode()


def test_a_released_ref_whose_pending_decode_fails_reports_the_release() -> None:
    decoder = GatedDecoder(error=ValueError("Failed to load image: corrupt"))
    ref = MediaRef(b"payload", decoder, DecodeSpec())
    twin = ref.fork()
    decoding = start_decoding(ref)
    assert decoder.started.wait(WAIT_S)
    twin.release()
    decoder.gate.set()
    decoding.join(WAIT_S)
    with pytest.raises(RuntimeError, match="released before it was decoded"):
        twin.decode()
    with pytest.raises(ValueError, match="corrupt"):
        ref.decode()


def test_a_pending_release_does_not_keep_the_released_ref_alive() -> None:
    decoder = GatedDecoder()
    ref = MediaRef(b"payload", decoder, DecodeSpec())
    twin = ref.fork()
    decoding = start_decoding(ref)
    assert decoder.started.wait(WAIT_S)
    twin.release()
    gone = weakref.ref(twin)
    del twin
    gc.collect()
    assert gone() is None  # the running decode holds its listener weakly
    decoder.gate.set()
    decoding.join(WAIT_S)
    assert ref.decode() == "pixels"


def test_many_releases_during_one_decode_all_see_its_value() -> None:
    decoder = GatedDecoder()
    ref = MediaRef(b"payload", decoder, DecodeSpec())
    forks = [ref.fork() for _ in range(32)]
    decoding = start_decoding(ref)
    assert decoder.started.wait(WAIT_S)
    barrier = threading.Barrier(len(forks))

    def release(fork: MediaRef[object]) -> None:
        barrier.wait(WAIT_S)
        fork.release()

    releasers = [threading.Thread(target=release, args=(fork,)) for fork in forks]
    for thread in releasers:
        thread.start()
    decoder.gate.set()  # the decode finishes while the releases race with it
    for thread in (*releasers, decoding):
        thread.join(WAIT_S)
    assert [fork.decode() for fork in forks] == ["pixels"] * len(forks)
    assert decoder.calls == 1
