"""Shared-memory segments whose writer is gone: named so that a later writer can tell, and removed.

A writer's segment outlives it when nothing unlinks it: a SIGKILL of its process group takes the
resource tracker (which would unlink it at exit) down too. Each segment therefore records its
**creator**: the writer's pid, that process's start time (``/proc/<pid>/stat``, field 22, in
clock ticks since boot, so a recycled pid is not mistaken for the writer) and the inode of its
pid namespace (the same pid means another process in another container sharing ``/dev/shm``).

- A name this module makes carries the creator: ``mediaref_mm_cache_<ns>_<pid>_<start>_<random>``.
  The name is fixed when the segment is created, so a scan never reads a segment, and never sees
  one whose creator is not yet written.
- Every segment also begins with a small header holding the creator, for names chosen by the
  operator (``VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME``): a writer that finds its name taken removes
  the segment there only if the header names a dead creator.

**The rule.** A segment is removed only when it is a regular file owned by this user, its creator
lived in this process's pid namespace, and no process with that pid and start time exists now
(a zombie counts as alive). Anything else — another user's file, another namespace's, a name
without a creator, a platform without ``/proc`` — is left alone: a missed orphan costs memory, a
wrong removal would cost a live deployment its cache. Removing a name does not unmap it: a reader
still mapping an orphan keeps its pages until it exits.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import stat
from dataclasses import dataclass

logger = logging.getLogger(__name__)

SHM_DIR = "/dev/shm"  # where glibc's shm_open keeps POSIX shared memory on Linux
NAME_PREFIX = "mediaref_mm_cache_"
_NAME = re.compile(NAME_PREFIX + r"(\d{1,20})_(\d{1,10})_(\d{1,20})_[0-9a-f]{16}")

_MAGIC = b"mrshm\x00\x01\x00"  # mediaref shared memory, header version 1
CREATOR_HEADER_BYTES = len(_MAGIC) + 3 * 8


@dataclass(frozen=True)
class Creator:
    """The process that created a segment; 0 in ``pid_namespace``/``start_ticks``: unknown."""

    pid_namespace: int
    pid: int
    start_ticks: int


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot); ``None`` when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            raw = stat_file.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")": split after the
    # last ")"; what follows starts at field 3, so field 22 is the 20th.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return int(fields[19])


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def current_creator() -> Creator:
    """This process as a segment's creator (namespace and start time 0 without ``/proc``)."""
    pid = os.getpid()
    try:
        start = _start_ticks(pid) or 0
    except (OSError, ValueError, IndexError):  # no /proc, or not Linux's: unknown
        start = 0
    return Creator(_pid_namespace(), pid, start)


def is_orphan(creator: Creator) -> bool:
    """Whether ``creator`` is known to be gone: unknown or elsewhere counts as alive."""
    if not creator.pid_namespace or not creator.start_ticks:
        return False
    if creator.pid_namespace != _pid_namespace():
        return False
    try:
        return _start_ticks(creator.pid) != creator.start_ticks
    except (OSError, ValueError, IndexError):  # there but unreadable: not known to be gone
        return False


def segment_name() -> str:
    """A fresh segment name for this process, its creator written into it."""
    creator = current_creator()
    return (
        f"{NAME_PREFIX}{creator.pid_namespace}_{creator.pid}_{creator.start_ticks}_"
        f"{secrets.token_hex(8)}"
    )


def creator_of_name(name: str) -> Creator | None:
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return Creator(*(int(group) for group in match.groups()))


def creator_header(creator: Creator) -> bytes:
    """The bytes a segment starts with: the magic, then the creator."""
    return _MAGIC + b"".join(
        value.to_bytes(8, "little")
        for value in (creator.pid_namespace, creator.pid, creator.start_ticks)
    )


def creator_from_header(raw: bytes) -> Creator | None:
    """The creator a segment's header names; ``None`` when it is not a mediaref header."""
    if len(raw) < CREATOR_HEADER_BYTES or raw[: len(_MAGIC)] != _MAGIC:
        return None
    start = len(_MAGIC)
    ns, pid, ticks = (
        int.from_bytes(raw[start + 8 * i : start + 8 * (i + 1)], "little") for i in range(3)
    )
    return Creator(ns, pid, ticks)


def _own_regular_file(st: os.stat_result) -> bool:
    # /dev/shm is sticky: only the owner may remove a name, and only ours are ours to judge.
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


def _unlink(name: str, creator: Creator, directory: str) -> bool:
    try:
        os.unlink(os.path.join(directory, name))
    except FileNotFoundError:  # another writer reclaimed it first
        return False
    except OSError as error:  # reclaiming is housekeeping: it never stops a writer starting
        logger.warning("could not remove orphaned shared-memory segment %s: %s", name, error)
        return False
    logger.info("removed shared-memory segment %s: its writer (pid %d) is gone", name, creator.pid)
    return True


def reclaim_orphans(directory: str = SHM_DIR) -> list[str]:
    """Remove the segments of this naming scheme whose creator is gone; their names."""
    try:
        entries = list(os.scandir(directory))
    except OSError:  # no /dev/shm (not Linux): nothing to scan
        return []
    removed = []
    for entry in entries:
        creator = creator_of_name(entry.name)
        if creator is None or not is_orphan(creator):
            continue
        try:
            if not _own_regular_file(entry.stat(follow_symlinks=False)):
                continue
        except OSError:
            continue
        if _unlink(entry.name, creator, directory):
            removed.append(entry.name)
    return removed


def reclaim_if_orphaned(name: str, directory: str = SHM_DIR) -> bool:
    """Remove the segment ``name`` if its creator (by name, else by header) is gone."""
    creator = creator_of_name(name)
    path = os.path.join(directory, name)
    if creator is None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not _own_regular_file(os.fstat(fd)):
                return False
            creator = creator_from_header(os.pread(fd, CREATOR_HEADER_BYTES, 0))
        finally:
            os.close(fd)
        if creator is None:
            return False
    else:
        try:
            if not _own_regular_file(os.stat(path, follow_symlinks=False)):
                return False
        except OSError:
            return False
    return is_orphan(creator) and _unlink(name, creator, directory)


__all__ = [
    "CREATOR_HEADER_BYTES",
    "NAME_PREFIX",
    "Creator",
    "creator_from_header",
    "creator_header",
    "creator_of_name",
    "current_creator",
    "is_orphan",
    "reclaim_if_orphaned",
    "reclaim_orphans",
    "segment_name",
]
