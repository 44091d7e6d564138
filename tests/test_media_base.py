"""The media reference model: spec, key, memoized decode, map/fork/release, pickling, no implicit decode."""

from __future__ import annotations

import gc
import hashlib
import io
import logging
import math
import pickle
import sys
import threading
import time
import weakref

import numpy as np
import pytest

from _counting import CountingDecoder
from mediaref.exceptions import MediaClientError, MediaTooLargeError
from mediaref.media.base import DecodeSpec, MediaIO, MediaRef, derive_identity_key, derive_media_key


def make_ref(
    data: bytes = b"payload", value: object = "decoded", **spec: object
) -> tuple[MediaRef, CountingDecoder]:
    decoder = CountingDecoder(value)
    return MediaRef(data, decoder, DecodeSpec(spec or {"modality": "test"})), decoder


# --- DecodeSpec -------------------------------------------------------------------------------


def test_spec_is_canonical_sorted_compact_json() -> None:
    assert DecodeSpec({"b": 1, "a": [1, 2.5, None, True]}).canonical_bytes() == (
        b'{"a":[1,2.5,null,true],"b":1}'
    )


def test_spec_order_independent_and_hashable() -> None:
    one, two = (
        DecodeSpec({"a": 1, "b": {"y": 2, "x": 1}}),
        DecodeSpec({"b": {"x": 1, "y": 2}, "a": 1}),
    )
    assert one == two and hash(one) == hash(two)
    assert one.canonical_bytes() == two.canonical_bytes()


def test_spec_settings_returns_a_fresh_copy() -> None:
    spec = DecodeSpec({"a": [1, 2]})
    spec.settings["a"].append(3)
    spec.settings["new"] = 1
    assert spec.settings == {"a": [1, 2]}


def test_spec_snapshot_is_not_affected_by_caller_mutation() -> None:
    source = {"a": [1, 2]}
    spec = DecodeSpec(source)
    source["a"].append(3)
    assert spec.settings == {"a": [1, 2]}


def test_spec_extend_adds_and_overrides_without_mutating() -> None:
    base = DecodeSpec({"a": 1})
    extended = base.extend(b=2, a=3)
    assert base.settings == {"a": 1}
    assert extended.settings == {"a": 3, "b": 2}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, [1.0, math.nan], {"x": math.inf}])
def test_spec_rejects_non_finite_numbers(bad: object) -> None:
    with pytest.raises(ValueError, match="finite"):
        DecodeSpec({"v": bad})


@pytest.mark.parametrize("bad", [b"bytes", object(), {1, 2}, {1: "int key"}, np.float32(1.0)])
def test_spec_rejects_unsupported_types(bad: object) -> None:
    with pytest.raises(TypeError, match="spec"):
        DecodeSpec({"v": bad})


def test_spec_round_trips_through_canonical_bytes() -> None:
    spec = DecodeSpec({"mode": "RGB", "bg": [255, 255, 255]})
    assert DecodeSpec.from_canonical_bytes(spec.canonical_bytes()) == spec


# --- keys -------------------------------------------------------------------------------------


def test_key_is_stable_sha256_with_length_framing() -> None:
    spec = DecodeSpec({"a": "b"})
    key = derive_media_key(b"x", spec)
    assert key == derive_media_key(b"x", DecodeSpec({"a": "b"}))
    assert len(key) == 32
    # Not the bare digest of the concatenation: every chunk is framed by its length.
    assert key != hashlib.sha256(b"x" + spec.canonical_bytes()).digest()


def test_key_length_prefix_prevents_boundary_shift() -> None:
    # Without framing, b"x" + '{"a":"b"}' vs b"xy" + '{"a":"bc"}' could not be told apart by
    # content boundaries; with framing they must differ.
    assert derive_media_key(b"x", DecodeSpec({"a": "b"})) != derive_media_key(
        b"xy", DecodeSpec({"a": "bc"})
    )


def test_key_depends_on_payload_and_spec() -> None:
    spec = DecodeSpec({"m": "RGB"})
    assert derive_media_key(b"one", spec) != derive_media_key(b"two", spec)
    assert derive_media_key(b"one", spec) != derive_media_key(b"one", DecodeSpec({"m": "L"}))


def test_key_accepts_memoryview_without_changing_identity() -> None:
    spec = DecodeSpec()
    assert derive_media_key(memoryview(b"abc"), spec) == derive_media_key(b"abc", spec)


def test_identity_key_lives_in_its_own_space() -> None:
    spec = DecodeSpec()
    assert derive_identity_key("exif-image-id", b"abc", spec) != derive_media_key(b"abc", spec)
    assert derive_identity_key("a", b"x", spec) != derive_identity_key("b", b"x", spec)


def test_ref_key_is_derived_from_data_and_spec() -> None:
    ref, _ = make_ref(b"payload", mode="RGB")
    assert ref.key == derive_media_key(b"payload", DecodeSpec({"mode": "RGB"}))
    assert ref.spec == DecodeSpec({"mode": "RGB"})


def test_key_and_spec_are_read_only() -> None:
    ref, _ = make_ref()
    with pytest.raises(AttributeError):
        ref.key = b"other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ref.spec = DecodeSpec()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ref.anything = 1  # type: ignore[attr-defined]  # __slots__: no stray attributes


# --- decode -----------------------------------------------------------------------------------


def test_decode_is_memoized() -> None:
    ref, decoder = make_ref()
    assert not ref.is_decoded
    assert ref.decode() == "decoded"
    assert ref.decode() == "decoded"
    assert decoder.calls == 1 and ref.is_decoded


def test_concurrent_decode_runs_decoder_exactly_once() -> None:
    gate = threading.Event()
    decoder = CountingDecoder(object(), gate=gate)
    ref = MediaRef(b"p", decoder, DecodeSpec())
    barrier = threading.Barrier(8)
    results: list[object] = []

    def worker() -> None:
        barrier.wait(5)
        results.append(ref.decode())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    assert decoder.started.wait(5)
    time.sleep(0.05)  # let the other seven reach the lock while the first decode is held open
    gate.set()
    for t in threads:
        t.join(5)
    assert decoder.calls == 1
    assert len(results) == 8 and all(r is decoder.value for r in results)


def test_decoder_exception_propagates_unchanged_and_is_memoized() -> None:
    calls = 0
    failure = ValueError("Failed to decode test: corrupt")

    def decoder() -> object:
        nonlocal calls
        calls += 1
        raise failure

    ref = MediaRef(b"p", decoder, DecodeSpec())
    with pytest.raises(ValueError) as first:
        ref.decode()
    with pytest.raises(ValueError) as second:
        ref.decode()
    assert first.value is failure and second.value is failure
    assert calls == 1
    assert not ref.is_decoded


# --- map --------------------------------------------------------------------------------------


def test_map_without_settings_keeps_key_and_spec_and_shares_bytes() -> None:
    data = b"shared-bytes" * 100
    ref, decoder = make_ref(data, value=2)
    mapped = ref.map(lambda v: v * 10)
    assert mapped.key == ref.key and mapped.spec == ref.spec
    assert mapped.data is ref.data
    assert mapped.decode() == 20
    assert decoder.calls == 1


def test_map_with_settings_derives_key_from_parent_key_without_rereading_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ref, _ = make_ref(b"x" * 1000, value=1)
    digested: list[int] = []
    real_sha256 = hashlib.sha256

    class SpySha:
        def __init__(self) -> None:
            self._h = real_sha256()

        def update(self, chunk: bytes) -> None:
            digested.append(len(chunk))
            self._h.update(chunk)

        def digest(self) -> bytes:
            return self._h.digest()

    monkeypatch.setattr(hashlib, "sha256", SpySha)
    mapped = ref.map(lambda v: v + 1, target_sr=16000)
    assert max(digested) < 1000  # the 1000-byte payload was not digested again
    assert mapped.spec.settings == {"modality": "test", "target_sr": 16000}
    assert mapped.key != ref.key
    monkeypatch.undo()
    assert mapped.key == ref.map(lambda v: v + 1, target_sr=16000).key
    assert mapped.key != ref.map(lambda v: v + 1, target_sr=8000).key
    assert mapped.decode() == 2


def test_map_chain_decodes_parent_once() -> None:
    ref, decoder = make_ref(value=1)
    a = ref.map(lambda v: v + 1, step="a")
    b = a.map(lambda v: v * 3, step="b")
    assert b.decode() == 6 and a.decode() == 2 and ref.decode() == 1
    assert decoder.calls == 1


def test_releasing_mapped_ref_leaves_parent_usable() -> None:
    ref, _ = make_ref(b"parent", value=5)
    mapped = ref.map(lambda v: v + 1, plus=1)
    mapped.release()
    assert ref.data == b"parent" and ref.decode() == 5
    with pytest.raises(RuntimeError, match="released"):
        mapped.decode()


def test_releasing_parent_leaves_mapped_ref_usable() -> None:
    ref, _ = make_ref(b"parent", value=5)
    mapped = ref.map(lambda v: v + 1, plus=1)
    ref.release()
    assert mapped.data == b"parent"
    assert mapped.decode() == 6


def test_map_of_released_undecoded_ref_fails_clearly() -> None:
    ref, _ = make_ref()
    ref.release()
    with pytest.raises(RuntimeError, match="released"):
        ref.map(lambda v: v)


def test_map_of_released_decoded_ref_uses_the_decoded_value() -> None:
    ref, _ = make_ref(value=3)
    ref.decode()
    ref.release()
    assert ref.map(lambda v: v * 2, double=True).decode() == 6


# --- release ----------------------------------------------------------------------------------


def test_release_clears_data_and_keeps_decoded_media_readable() -> None:
    ref, decoder = make_ref(b"payload", value="media")
    assert ref.decode() == "media"
    ref.release()
    assert ref.data == b"" and ref.is_released
    assert ref.decode() == "media" and ref.is_decoded
    assert decoder.calls == 1


def test_release_before_decode_makes_decode_raise_runtime_error() -> None:
    ref, decoder = make_ref()
    ref.release()
    with pytest.raises(RuntimeError, match="released before it was decoded"):
        ref.decode()
    assert decoder.calls == 0


def test_release_frees_payload_and_closure() -> None:
    data = bytes(bytearray(b"z" * 4096))  # a private object whose references we can count

    class Pinned:
        pass

    pinned = Pinned()  # stands in for the header-opened image the closure pins
    pinned_ref = weakref.ref(pinned)

    def decoder(pin: Pinned = pinned) -> object:
        return "value"

    before = sys.getrefcount(data)
    ref = MediaRef(data, decoder, DecodeSpec())
    del decoder, pinned
    assert sys.getrefcount(data) > before
    ref.release()
    gc.collect()
    assert sys.getrefcount(data) == before
    assert pinned_ref() is None


def test_decode_drops_the_closure_but_keeps_bytes_until_release() -> None:
    class Pinned:
        pass

    pinned = Pinned()
    pinned_ref = weakref.ref(pinned)
    ref = MediaRef(b"bytes", lambda pin=pinned: "v", DecodeSpec())
    del pinned
    ref.decode()
    gc.collect()
    assert pinned_ref() is None
    assert ref.data == b"bytes"


def test_release_does_not_wait_for_an_in_flight_decode() -> None:
    # Formerly release() waited for the decode; it must not (tests/security/test_mediaref_release.py).
    gate = threading.Event()
    decoder = CountingDecoder("late", gate=gate)
    ref = MediaRef(b"p", decoder, DecodeSpec())
    decoding = threading.Thread(target=ref.decode)
    decoding.start()
    assert decoder.started.wait(5)
    ref.release()  # returns while the decode is held at the gate
    assert ref.data == b"" and ref.is_released and not ref.is_decoded
    gate.set()
    decoding.join(5)
    assert ref.decode() == "late" and decoder.calls == 1


def test_release_is_idempotent() -> None:
    ref, _ = make_ref()
    ref.release()
    ref.release()
    assert ref.is_released


# --- fork -------------------------------------------------------------------------------------


def test_fork_borrows_decode_bytes_spec_key() -> None:
    ref, decoder = make_ref(b"payload", value="v")
    twin = ref.fork()
    assert twin is not ref
    assert twin.key == ref.key and twin.spec == ref.spec and twin.data is ref.data
    assert twin.decode() == "v" and ref.decode() == "v"
    assert decoder.calls == 1


def test_fork_is_independently_releasable() -> None:
    ref, _ = make_ref(b"payload", value="v")
    twin = ref.fork()
    twin.release()
    assert twin.data == b"" and ref.data == b"payload"
    assert ref.decode() == "v"
    with pytest.raises(RuntimeError):
        twin.decode()  # released before anything decoded


def test_releasing_all_forks_frees_the_payload() -> None:
    data = bytes(bytearray(b"q" * 1024))
    before = sys.getrefcount(data)
    ref = MediaRef(data, lambda: "v", DecodeSpec())
    forks = [ref.fork() for _ in range(3)]
    for r in (ref, *forks):
        r.release()
    gc.collect()
    assert sys.getrefcount(data) == before


# --- pickling ---------------------------------------------------------------------------------


def test_pickle_materializes() -> None:
    ref, decoder = make_ref(b"payload", value={"pixels": [1, 2, 3]}, mode="RGB")
    restored = pickle.loads(pickle.dumps(ref))
    assert decoder.calls == 1
    assert restored.is_decoded
    assert restored.data == b""
    assert restored.key == ref.key and restored.spec == ref.spec
    assert restored.decode() == {"pixels": [1, 2, 3]}


def test_pickle_of_failing_ref_raises_the_decode_error() -> None:
    def bad() -> object:
        raise ValueError("Failed to decode test: nope")

    with pytest.raises(ValueError, match="nope"):
        pickle.dumps(MediaRef(b"p", bad, DecodeSpec()))


# --- no implicit decoding ---------------------------------------------------------------------


def test_no_forwarding_dunders() -> None:
    for name in ("__getattr__", "__iter__", "__getitem__", "__array__", "__len__", "__contains__"):
        assert not hasattr(MediaRef, name), name


def test_repr_str_logging_numpy_membership_iteration_never_decode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ref, decoder = make_ref(value=np.zeros(3))
    assert "MediaRef(" in repr(ref) and "encoded" in str(ref)
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("got %s %r", ref, ref)
    assert "MediaRef(" in caplog.text
    arr = np.asarray(ref, dtype=object)
    assert arr.shape == () and arr.item() is ref
    with pytest.raises(TypeError):
        _ = 0 in ref  # type: ignore[operator]
    with pytest.raises(TypeError):
        iter(ref)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        ref[0]  # type: ignore[index]
    with pytest.raises(AttributeError):
        _ = ref.size  # type: ignore[attr-defined]  # no forwarding to the decoded object
    assert ref in [ref] and ref not in [make_ref()[0]]
    assert f"{ref}"
    assert decoder.calls == 0 and not ref.is_decoded


# --- MediaIO ----------------------------------------------------------------------------------


class UpperIO(MediaIO[bytes]):
    modality = "test"

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.calls = 0

    def load_bytes(self, data: bytes) -> bytes:
        self.calls += 1
        return data.upper()

    def get_decode_spec(self) -> DecodeSpec:
        return DecodeSpec({"modality": "test", "upper": True})

    def get_max_bytes(self) -> int | None:
        return self.max_bytes


def test_media_io_ref_twins_are_lazy_and_agree(tmp_path) -> None:
    io_ = UpperIO()
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    refs = [
        io_.load_bytes_ref(b"abc"),
        io_.load_base64_ref("application/octet-stream", "YWJj"),
        io_.load_file_ref(path),
    ]
    assert io_.calls == 0
    assert {r.key for r in refs} == {derive_media_key(b"abc", io_.get_decode_spec())}
    assert [r.decode() for r in refs] == [b"ABC"] * 3
    assert io_.load_bytes(b"abc") == io_.load_base64("x", "YWJj") == io_.load_file(path) == b"ABC"


def test_media_io_enforces_encoded_size_cap_at_ref_construction() -> None:
    with pytest.raises(MediaTooLargeError, match="test payload of 11 bytes exceeds the 10-byte"):
        UpperIO(max_bytes=10).load_bytes_ref(b"x" * 11)
    assert UpperIO(max_bytes=10).load_bytes_ref(b"x" * 10).decode() == b"X" * 10


@pytest.mark.parametrize("text", ["not base64!!", "YWJ", "YW Jj", "ÿÿÿÿ"])
def test_media_io_rejects_bad_base64_as_a_client_error(text: str) -> None:
    for load in (UpperIO().load_base64_ref, UpperIO().load_base64):
        with pytest.raises(MediaClientError, match="invalid base64 payload for test") as caught:
            load("x", text)
        assert type(caught.value) is MediaClientError and caught.value.status_code == 400


def test_media_io_load_file_reads_bytes_once(tmp_path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(io.BytesIO(b"abc").getvalue())
    ref = UpperIO().load_file_ref(str(path))
    path.unlink()  # the payload is in the ref; the file is no longer needed
    assert ref.decode() == b"ABC"
