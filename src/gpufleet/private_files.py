"""Files only their owner may read — tokens, credentials, the state and telemetry stores,
spooled batches — whatever the process's umask.

`mkdir(mode=…)` and `open(…, mode)` are filtered by the umask, and most tools create files
0644, so every directory here is chmod-ed to 0700 and every file is created (or tightened)
to 0600 explicitly. Token files are written so a crash never leaves half of one: a
temporary file, fsync, then a rename over the old one.

Shared by the agent (its node credential, its spool), the CLI (its login) and the server
(the bootstrap admin token, the data dir and its stores); it imports nothing of gpufleet,
so every layer may use it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def ensure_private_dir(path: Path, *, tighten: bool = False) -> None:
    """Create `path` (and parents) mode 700. An existing directory is left as it is, unless
    `tighten`: then one this user owns that others may enter is made 700 (never a shared
    sticky directory such as /tmp, nor another user's)."""
    if not path.is_dir():
        path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        os.chmod(path, PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask
        return
    if tighten:
        info = path.stat()
        if (info.st_mode & 0o077 and info.st_uid == os.getuid()
                and not info.st_mode & stat.S_ISVTX):
            log.warning("%s was mode %o: made owner-only (700)", path,
                        stat.S_IMODE(info.st_mode))
            os.chmod(path, PRIVATE_DIR_MODE)


def ensure_private_file(path: Path) -> None:
    """Create `path` empty if missing, and make it mode 600 either way. SQLite gives its
    -wal and -shm files the mode of the database file, so a database made private first
    keeps them private too."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)


def make_private(*paths: Path) -> None:
    """Those of `paths` that exist, made mode 600 (files) or 700 (directories)."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path, PRIVATE_DIR_MODE if path.is_dir() else PRIVATE_FILE_MODE)


def open_private(path: Path, flags: int) -> int:
    """`os.open(path, flags | O_CREAT)` for a file nobody else may read, whatever the umask."""
    fd = os.open(path, flags | os.O_CREAT, PRIVATE_FILE_MODE)
    os.fchmod(fd, PRIVATE_FILE_MODE)
    return fd


def write_private_file(path: Path, text: str) -> None:
    """Atomically replace `path` with `text`, readable by the owner only."""
    ensure_private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = open_private(temporary, os.O_WRONLY | os.O_TRUNC)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
