"""``file:`` URLs, confined to the allowed local media path.

The URL's path is resolved (``..`` and symlinks followed) and must land under the allowed root,
itself resolved once when the connector is built (a relative root is taken against the current
directory then). The file is then opened by walking from the root one component at a time with
``O_NOFOLLOW``, so a symlink planted after the check cannot redirect the read: what is opened is
the path that was validated. Without an allowed root, ``file:`` URLs are refused.
"""

from __future__ import annotations

import errno
import os
import stat
from urllib.parse import urlsplit
from urllib.request import url2pathname

from mediaref.media._transport.errors import RefusedError, TooLargeError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# A FIFO would block open() until a writer appears; non-blocking open lets fstat reject it.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CAN_WALK = os.open in os.supports_dir_fd and bool(_NOFOLLOW and _DIRECTORY)


class LocalMediaRoot:
    """The one directory that ``file:`` URLs may read from."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        resolved = os.path.realpath(path)
        if not os.path.isdir(resolved):
            raise ValueError(
                f"allowed_local_media_path {os.fspath(path)!r} is not an existing directory"
            )
        self.path = resolved

    def resolve(self, url: str) -> str:
        """The real path that ``url`` names, refused unless it lies under the root."""
        split = urlsplit(url)
        if split.netloc not in ("", "localhost"):
            raise RefusedError(f"file: URL names a remote host {split.netloc!r}")
        if split.query or split.fragment:
            raise ValueError("file: URL has a query or fragment (percent-encode '?' and '#')")
        path = url2pathname(split.path)
        if "\x00" in path:
            raise ValueError("file: URL path contains a NUL byte")
        if not os.path.isabs(path):
            raise ValueError("file: URL path is not absolute")
        real = os.path.realpath(path)
        if os.path.commonpath([self.path, real]) != self.path:
            raise RefusedError("the path is outside the allowed local media path")
        return real

    def read(self, real_path: str, max_bytes: int | None) -> bytes:
        """Read a path returned by :meth:`resolve`; a file over ``max_bytes`` is not read at all.

        The descriptor is owned from the moment it is opened: whatever the checks refuse (a
        directory, a FIFO, a device), it is closed, so refused requests cannot leak descriptors.
        """
        fd = self._open(real_path)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory")
            if not stat.S_ISREG(info.st_mode):
                # FIFOs, sockets and devices (/dev/zero never ends) are not media files.
                raise ValueError("not a regular file")
            if max_bytes is not None and info.st_size > max_bytes:
                raise TooLargeError(
                    f"file of {info.st_size} bytes exceeds the {max_bytes}-byte limit"
                )
            # Read to EOF but never past the cap: files under /proc report st_size 0, and a
            # file may grow after fstat.
            with open(fd, "rb", closefd=False) as file:
                data = file.read() if max_bytes is None else file.read(max_bytes + 1)
        finally:
            os.close(fd)
        if max_bytes is not None and len(data) > max_bytes:
            raise TooLargeError(f"file exceeds the {max_bytes}-byte limit")
        return data

    def _open(self, real_path: str) -> int:
        flags = os.O_RDONLY | _CLOEXEC | _NONBLOCK | _NOFOLLOW
        if not _CAN_WALK:
            # No openat() here: open the resolved path itself, still refusing a final symlink.
            return os.open(real_path, flags)
        parts = [p for p in os.path.relpath(real_path, self.path).split(os.sep) if p != "."]
        dir_fd = os.open(self.path, os.O_RDONLY | _CLOEXEC | _DIRECTORY)
        try:
            for part in parts[:-1]:
                next_fd = os.open(
                    part, os.O_RDONLY | _CLOEXEC | _DIRECTORY | _NOFOLLOW, dir_fd=dir_fd
                )
                os.close(dir_fd)
                dir_fd = next_fd
            return os.open(parts[-1] if parts else ".", flags, dir_fd=dir_fd)
        except OSError as exc:
            # The resolved path had no symlinks and only directories above the file; meeting a
            # symlink (ELOOP) or a non-directory (ENOTDIR) now means it changed after the check.
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise RefusedError(
                    "the path changed after it was validated (symlink swap?)"
                ) from exc
            raise
        finally:
            os.close(dir_fd)


__all__ = ["LocalMediaRoot"]
