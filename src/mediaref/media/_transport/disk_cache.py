"""The on-disk download cache for http(s) payloads, safe for several processes sharing a directory.

One file per key, named by the key's sha256, holding a fixed header (magic, payload length, blake3
digest of the payload) and the payload. File times carry the bookkeeping, so no index file needs
locking: the modification time is when the entry was stored (the TTL runs from it) and the access
time is when it was last served (least-recently-used order), both set explicitly with ``utime``.

Writes go to a temporary file in the same directory and are renamed over the entry, so readers
see a whole entry or none; a reader that opened an entry keeps reading it even if another process
replaces or evicts it meanwhile. After each write the directory is scanned (cost linear in the
number of entries): expired entries go first, then the least recently used, until the total fits,
and never the entry just written. An entry larger than the whole budget is served but not stored.
A vanished, expired, truncated or corrupt entry is a miss, never an error.

The cache stores and serves bytes by key and judges nothing. What makes serving an entry safe is
the key: ``http_download`` keys an entry by the requested URL together with the fingerprint of the
policy it was fetched under (addresses, allowed domains, redirects), so an entry is only ever
served to a request whose policy would have fetched it the same way (see ``http_download``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import struct
import tempfile
import time
from collections.abc import Callable

import blake3

from mediaref.media._transport.errors import TooLargeError

_MAGIC = b"mrdlc\x00\x00\x01"
_HEADER = struct.Struct(">8sQ32s")  # magic, payload length, blake3 digest of the payload
ENTRY_SUFFIX = ".media"
_TMP_PREFIX = ".tmp-"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
# A temporary file this old belongs to a writer that died; live writers finish in far less.
_ABANDONED_TMP_SECONDS = 3600.0


def _digest(data: bytes) -> bytes:
    return blake3.blake3(data).digest()


class DiskCache:
    """Payloads by key in ``directory``, within ``max_bytes``, each for ``ttl_seconds``.

    ``ttl_seconds <= 0`` keeps entries until they are evicted for space. ``clock`` gives the time
    written into file times (tests substitute a controllable one).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int,
        ttl_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = os.fspath(directory)
        self.max_bytes = max_bytes
        self.ttl_seconds = ttl_seconds
        self._clock = clock

    def entry_path(self, key: str) -> str:
        name = hashlib.sha256(key.encode("utf-8")).hexdigest() + ENTRY_SUFFIX
        return os.path.join(self.directory, name)

    def _is_expired(self, stored_at: float, now: float) -> bool:
        return self.ttl_seconds > 0 and now - stored_at >= self.ttl_seconds

    def get(self, key: str, *, max_bytes: int | None = None) -> bytes | None:
        """The payload stored for ``key``, or None on a miss (absent, expired or corrupt).

        An entry over ``max_bytes`` raises ``TooLargeError`` before its payload is read.
        """
        path = self.entry_path(key)
        try:
            # Non-blocking: something other than an entry at this path (a FIFO) must not hang us.
            fd = os.open(path, os.O_RDONLY | _CLOEXEC | _NONBLOCK)
        except FileNotFoundError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None
            now = self._clock()
            payload = None
            if not self._is_expired(info.st_mtime, now):
                payload = self._read_entry(fd, info.st_size, max_bytes)
            if payload is None:
                self._discard(path, info.st_ino)
                return None
            # Record the access on the file that was read, even if the path was replaced since.
            os.utime(fd, (now, info.st_mtime))
        finally:
            os.close(fd)
        return payload

    @staticmethod
    def _read_entry(fd: int, file_size: int, max_bytes: int | None) -> bytes | None:
        with open(fd, "rb", closefd=False) as file:
            header = file.read(_HEADER.size)
            if len(header) != _HEADER.size:
                return None
            magic, length, digest = _HEADER.unpack(header)
            # The length must match the file before anything is allocated for it: a damaged
            # header could claim exabytes.
            if magic != _MAGIC or length != file_size - _HEADER.size:
                return None
            if max_bytes is not None and length > max_bytes:
                raise TooLargeError(f"payload of {length} bytes exceeds the {max_bytes}-byte limit")
            payload = file.read(length + 1)
        if len(payload) != length or _digest(payload) != digest:
            return None
        return payload

    def _discard(self, path: str, inode: int) -> None:
        # Only if the path still holds the entry that was judged bad: another process may have
        # just renamed a fresh entry over it.
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == inode:
                os.unlink(path)

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` for ``key`` atomically, then evict down to the budget."""
        if _HEADER.size + len(data) > self.max_bytes:
            return
        os.makedirs(self.directory, exist_ok=True)
        path = self.entry_path(key)
        fd, tmp_path = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=self.directory)
        try:
            with open(fd, "wb") as file:
                file.write(_HEADER.pack(_MAGIC, len(data), _digest(data)))
                file.write(data)
            now = self._clock()
            os.utime(tmp_path, (now, now))
            os.replace(tmp_path, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)
            raise
        self._evict(keep=path)

    def _evict(self, keep: str) -> None:
        now = self._clock()
        total = 0
        candidates: list[tuple[float, str, int]] = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # another process evicted it mid-scan
                    continue
                if entry.name.startswith(_TMP_PREFIX):
                    # Wall time on purpose: temporary files are not stamped by the cache's clock.
                    if time.time() - info.st_mtime > _ABANDONED_TMP_SECONDS:
                        self._unlink_quietly(entry.path)
                    continue
                if not entry.name.endswith(ENTRY_SUFFIX):
                    continue
                if entry.path != keep and self._is_expired(info.st_mtime, now):
                    self._unlink_quietly(entry.path)
                    continue
                total += info.st_size
                if entry.path != keep:
                    candidates.append((info.st_atime, entry.path, info.st_size))
        if total <= self.max_bytes:
            return
        candidates.sort()  # least recently served first
        for _, path, size in candidates:
            if total <= self.max_bytes:
                break
            self._unlink_quietly(path)
            total -= size

    @staticmethod
    def _unlink_quietly(path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


__all__ = ["ENTRY_SUFFIX", "DiskCache"]
