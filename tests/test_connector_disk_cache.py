"""The on-disk download cache: round trip, TTL, eviction order, damage, sharing by processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from _http_server import MediaServer
from _raw_media import RawMediaIO
from mediaref.exceptions import MediaNotAllowedError, MediaNotFoundError, MediaTooLargeError
from mediaref.media._transport.disk_cache import ENTRY_SUFFIX, DiskCache
from mediaref.media._transport.errors import TooLargeError
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.connector import MediaConnector

HEADER_BYTES = 48  # magic, length, digest
PAYLOAD = os.urandom(3000)
MIB = 1024 * 1024


class FakeClock:
    """Starts well ahead of the wall clock, so the kernel's own atime updates (relatime) never
    land after the times the cache writes and cannot stand in for the cache's bookkeeping."""

    def __init__(self) -> None:
        self.now = float(int(time.time()) + 10_000_000)

    def __call__(self) -> float:
        return self.now


def entry_budget(entries: int, size: int = 100) -> int:
    return entries * (HEADER_BYTES + size)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_cache(path: Path, clock: FakeClock, *, entries: int = 3, ttl: float = 1000.0) -> DiskCache:
    return DiskCache(path, max_bytes=entry_budget(entries), ttl_seconds=ttl, clock=clock)


def blob(tag: str) -> bytes:
    return tag.encode().ljust(100, b".")


def test_round_trip_and_miss(tmp_path: Path, clock: FakeClock) -> None:
    cache = make_cache(tmp_path, clock)
    assert cache.get("http://a/1") is None
    cache.put("http://a/1", blob("one"))
    assert cache.get("http://a/1") == blob("one")
    assert cache.get("http://a/2") is None


def test_entries_expire_after_the_ttl(tmp_path: Path, clock: FakeClock) -> None:
    cache = make_cache(tmp_path, clock, ttl=10)
    cache.put("k", blob("k"))
    clock.now += 9
    assert cache.get("k") == blob("k")  # serving does not extend the TTL...
    clock.now += 1
    assert cache.get("k") is None  # ...which runs from when the entry was stored
    assert not os.path.exists(cache.entry_path("k"))


def test_eviction_drops_the_least_recently_served(tmp_path: Path, clock: FakeClock) -> None:
    cache = make_cache(tmp_path, clock, entries=3)
    for key in ("a", "b", "c"):
        cache.put(key, blob(key))
        clock.now += 1
    assert cache.get("a") == blob("a")  # "a" is now the most recently served
    clock.now += 1
    cache.put("d", blob("d"))
    assert [k for k in "abcd" if cache.get(k) is not None] == ["a", "c", "d"]


def test_eviction_drops_expired_entries_first(tmp_path: Path, clock: FakeClock) -> None:
    cache = make_cache(tmp_path, clock, entries=3, ttl=10)
    cache.put("old", blob("old"))
    clock.now += 5
    cache.put("b", blob("b"))
    cache.put("c", blob("c"))
    clock.now += 4
    assert cache.get("old") == blob("old")  # most recently served, but stored first
    clock.now += 2  # "old" has expired; "b" and "c" have not
    cache.put("d", blob("d"))
    assert [k for k in ("old", "b", "c", "d") if cache.get(k) is not None] == ["b", "c", "d"]


def test_the_entry_just_written_is_never_evicted(tmp_path: Path, clock: FakeClock) -> None:
    cache = DiskCache(tmp_path, max_bytes=entry_budget(1, 300), ttl_seconds=0, clock=clock)
    cache.put("small", blob("small"))
    clock.now += 1
    big = os.urandom(250)  # fits alone, not next to "small"
    cache.put("big", big)
    assert cache.get("big") == big
    assert cache.get("small") is None


def test_the_new_entry_survives_even_when_times_tie(tmp_path: Path, clock: FakeClock) -> None:
    # A filesystem with coarse timestamps gives entries written together the same access time;
    # the entry just written must not lose the tie.
    cache = make_cache(tmp_path, clock, entries=1)
    for i in range(12):
        cache.put(f"key-{i}", blob(str(i)))
        assert cache.get(f"key-{i}") == blob(str(i))


def test_an_entry_larger_than_the_budget_is_not_stored(tmp_path: Path, clock: FakeClock) -> None:
    cache = make_cache(tmp_path, clock, entries=1)
    cache.put("keep", blob("keep"))
    cache.put("huge", os.urandom(entry_budget(2)))
    assert cache.get("huge") is None
    assert cache.get("keep") == blob("keep")


def test_a_vanished_entry_is_a_miss(tmp_path: Path, clock: FakeClock) -> None:
    cache = make_cache(tmp_path, clock)
    cache.put("k", blob("k"))
    os.unlink(cache.entry_path("k"))
    assert cache.get("k") is None
    cache.put("k2", blob("k2"))  # eviction's scan copes with the gap too
    assert cache.get("k2") == blob("k2")


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: HEADER_BYTES + 50],  # truncated payload
        lambda raw: raw[:20],  # truncated header
        lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]),  # one flipped bit
        lambda raw: b"garbage!" + raw[8:],  # wrong magic
        lambda raw: raw + b"extra",  # trailing bytes
        # A header claiming an exabyte payload: a miss, not a MemoryError from allocating it.
        lambda raw: raw[:8] + (2**60).to_bytes(8, "big") + raw[16:],
    ],
    ids=[
        "truncated-payload",
        "truncated-header",
        "bit-flip",
        "bad-magic",
        "trailing-bytes",
        "huge-length",
    ],
)
def test_a_corrupt_entry_is_a_miss_and_is_removed(tmp_path: Path, clock: FakeClock, damage) -> None:  # type: ignore[no-untyped-def]
    cache = make_cache(tmp_path, clock)
    cache.put("k", blob("k"))
    path = Path(cache.entry_path("k"))
    path.write_bytes(damage(path.read_bytes()))
    assert cache.get("k") is None
    assert not path.exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_something_else_at_an_entry_path_is_a_miss_without_blocking(
    tmp_path: Path, clock: FakeClock
) -> None:
    cache = make_cache(tmp_path, clock)
    os.mkfifo(cache.entry_path("fifo"))  # opening it for reading would wait for a writer
    os.mkdir(cache.entry_path("dir"))
    assert cache.get("fifo") is None
    assert cache.get("dir") is None


def test_an_entry_over_the_callers_cap_is_refused_before_it_is_read(
    tmp_path: Path, clock: FakeClock
) -> None:
    cache = make_cache(tmp_path, clock)
    cache.put("k", blob("k"))
    with pytest.raises(TooLargeError):
        cache.get("k", max_bytes=99)
    assert cache.get("k", max_bytes=100) == blob("k")


def test_abandoned_temporary_files_are_swept(tmp_path: Path, clock: FakeClock) -> None:
    cache = make_cache(tmp_path, clock)
    stale = tmp_path / ".tmp-dead-writer"
    fresh = tmp_path / ".tmp-live-writer"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(stale, (0, 0))
    cache.put("k", blob("k"))
    assert not stale.exists() and fresh.exists()


# --- through the connector --------------------------------------------------------------------


@pytest.fixture
def cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "media-cache"
    monkeypatch.setenv("VLLM_MEDIA_CACHE", str(directory))
    return directory


def test_cache_is_off_without_a_directory(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    connector.fetch_image(url, RawMediaIO())
    connector.fetch_image(url, RawMediaIO())
    assert media_server.count("/files/a.bin") == 2


def test_second_fetch_is_served_from_the_cache(
    media_server: MediaServer, connector: MediaConnector, cache_env: Path
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    first = connector.fetch_image(url, RawMediaIO())
    second = connector.fetch_image(url, RawMediaIO())
    assert first.key == second.key and second.data == PAYLOAD
    assert media_server.count("/files/a.bin") == 1
    assert len(list(cache_env.glob(f"*{ENTRY_SUFFIX}"))) == 1


def test_failed_downloads_are_not_cached(
    media_server: MediaServer, connector: MediaConnector, cache_env: Path
) -> None:
    with pytest.raises(MediaNotFoundError):
        connector.fetch_image(media_server.url("/status/404"), RawMediaIO())
    assert not list(cache_env.glob(f"*{ENTRY_SUFFIX}"))


def test_cached_entries_still_obey_policy_and_caps(
    media_server: MediaServer, http_client: MediaHTTPClient, cache_env: Path
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    MediaConnector(http_client, allow_private_ips=True).fetch_image(url, RawMediaIO())
    with pytest.raises(MediaNotAllowedError):
        MediaConnector(http_client).fetch_image(url, RawMediaIO())  # loopback refused
    small = RawMediaIO(max_bytes=10)
    with pytest.raises(MediaTooLargeError):
        MediaConnector(http_client, allow_private_ips=True).fetch_image(url, small)
    assert small.bytes_refs == 0  # refused by the transport, not left to the decoder's guard
    assert media_server.count("/files/a.bin") == 1


def test_an_unwritable_cache_does_not_fail_the_fetch(
    media_server: MediaServer,
    connector: MediaConnector,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"")
    monkeypatch.setenv("VLLM_MEDIA_CACHE", str(blocker / "cache"))
    url = media_server.add_file("a.bin", PAYLOAD)
    assert connector.fetch_image(url, RawMediaIO()).data == PAYLOAD


_FETCH_IN_A_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from _raw_media import RawMediaIO
    from mediaref.media.connector import MediaConnector
    ref = MediaConnector(allow_private_ips=True).fetch_image({url!r}, RawMediaIO())
    sys.stdout.write(ref.data.hex())
    """
)

_WRITE_IN_A_CHILD = textwrap.dedent(
    """
    import sys
    from mediaref.media._transport.disk_cache import DiskCache
    cache = DiskCache({directory!r}, max_bytes={budget}, ttl_seconds=3600)
    for i in range(60):
        key = "{name}-%d" % i
        cache.put(key, key.encode().ljust(1000, b"."))
        got = cache.get(key)
        assert got is None or got == key.encode().ljust(1000, b"."), key
    """
)


def run_children(scripts: list[str], env: dict[str, str]) -> list[str]:
    children = [
        subprocess.Popen(
            [sys.executable, "-c", s], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for s in scripts
    ]
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err.decode()
        outputs.append(out.decode())
    return outputs


def test_a_second_process_is_served_from_the_shared_cache(
    media_server: MediaServer, connector: MediaConnector, cache_env: Path
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    connector.fetch_image(url, RawMediaIO())
    script = _FETCH_IN_A_CHILD.format(tests=str(Path(__file__).parent), url=url)
    (output,) = run_children([script], dict(os.environ))
    assert bytes.fromhex(output) == PAYLOAD
    assert media_server.count("/files/a.bin") == 1


def test_processes_writing_and_evicting_concurrently_leave_a_consistent_cache(
    tmp_path: Path,
) -> None:
    budget = 20 * (HEADER_BYTES + 1000)
    scripts = [
        _WRITE_IN_A_CHILD.format(directory=str(tmp_path), budget=budget, name=name)
        for name in ("p1", "p2")
    ]
    run_children(scripts, dict(os.environ))
    names = os.listdir(tmp_path)
    assert names and all(n.endswith(ENTRY_SUFFIX) for n in names)  # no temporary files left
    # Each process evicts to the budget after its own write; the other's last write may land after.
    assert sum(os.path.getsize(tmp_path / n) for n in names) <= budget + HEADER_BYTES + 1000
    cache = DiskCache(tmp_path, max_bytes=budget, ttl_seconds=3600)
    survivors = [
        key
        for key in (f"{p}-{i}" for p in ("p1", "p2") for i in range(60))
        if cache.get(key) is not None
    ]
    assert len(survivors) == len(names)  # every file on disk is a whole, valid entry
