"""The agent's side of `gpufleet.tag`: read a process's tag file, and remove the files of
processes that are gone (the file format and naming are in gpufleet/tagging.py).

The spool directory is shared by every user of the node (mode 1777, like /tmp), so a file
is believed only when it is a regular file owned by the process's own real or effective
uid: another user cannot tag a process that is not theirs, even by guessing its name.
Files are opened without following links and without blocking (a FIFO placed there is
refused), and read up to MAX_TAG_FILE_BYTES with the SDK's own parser
(`tagging.parse_tag_file`: the format version checked, every key and value through
`check_tag` again, what fails dropped).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from gpufleet.tagging import (
    MAX_TAG_FILE_BYTES,
    is_temporary_name,
    parse_tag_file,
    parse_tag_file_name,
    tag_file_name,
)

log = logging.getLogger(__name__)

STALE_TEMPORARY_S = 600.0  # a writer's temporary file this old belongs to a crashed writer

TagKey = tuple[int, int, int]  # (pid namespace inode, pid in it, start ticks)


@dataclass(frozen=True)
class LiveProcesses:
    """The processes alive now, as garbage collection needs them. A process whose tag key
    could not be read (another user's pid namespace, for an agent that is not root) is
    known by its start time alone, and every file with that start time is kept."""

    keys: frozenset[TagKey]
    unresolved_starts: frozenset[int] = frozenset()

    def __contains__(self, key: object) -> bool:
        return key in self.keys or (isinstance(key, tuple) and len(key) == 3
                                    and key[2] in self.unresolved_starts)


@dataclass(frozen=True)
class TagFileState:
    """What says a tag file changed: a rename makes a new inode, a rewrite a new mtime."""

    inode: int
    mtime_ns: int
    size: int


class TagSpool:
    """One spool directory of tag files."""

    def __init__(self, directory: Path):
        self.directory = directory

    def path(self, key: TagKey) -> Path:
        return self.directory / tag_file_name(*key)

    def state(self, key: TagKey, uids: Collection[int]) -> TagFileState | None:
        """The file's state when it exists and may be believed for a process of `uids`."""
        try:
            info = os.lstat(self.path(key))
        except OSError:
            return None
        if not _believable(info, uids):
            return None
        return TagFileState(info.st_ino, info.st_mtime_ns, info.st_size)

    def read(self, key: TagKey, uids: Collection[int]) -> dict[str, str]:
        """The tags in the file of `key`; {} when it is missing or not to be believed."""
        path = self.path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return {}
        try:
            if not _believable(os.fstat(fd), uids):
                log.debug("tag file %s: not a regular file of the process's owner; ignored",
                          path.name)
                return {}
            raw = os.read(fd, MAX_TAG_FILE_BYTES + 1)
        except OSError:
            return {}
        finally:
            os.close(fd)
        return parse_tag_file(raw)

    def prepare(self) -> bool:
        """Create the directory writable by all with the sticky bit (as /tmp: each user
        may remove only their own files), when this agent may; False when it may not."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if self.directory.stat().st_uid == os.geteuid():
                os.chmod(self.directory, 0o1777)
        except OSError:
            return False
        return True

    def collect_garbage(self, live: Callable[[], LiveProcesses], *,
                        now_s: float | None = None) -> int:
        """Remove the tag files of processes that are gone and writers' temporary files
        older than STALE_TEMPORARY_S; returns how many were removed. `live` is asked after
        the directory is listed, so a process that writes its first file meanwhile is
        among them. Files of any other name are never touched: the directory is
        configurable and may hold other things."""
        entries = _entries(self.directory)
        if not entries:
            return 0
        alive = live()
        now_s = time.time() if now_s is None else now_s
        removed = 0
        for entry in entries:
            if _is_garbage(entry, alive, now_s):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed += 1
        return removed


def _believable(info: os.stat_result, uids: Collection[int]) -> bool:
    return stat.S_ISREG(info.st_mode) and info.st_uid in uids \
        and info.st_size <= MAX_TAG_FILE_BYTES


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:
        return []


def _is_garbage(entry: os.DirEntry[str], live: LiveProcesses, now_s: float) -> bool:
    key = parse_tag_file_name(entry.name)
    if key is not None:
        return key not in live
    if is_temporary_name(entry.name):
        try:
            return now_s - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMPORARY_S
        except OSError:
            return False
    return False
