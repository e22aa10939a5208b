"""Files only their owner may read — tokens and credentials — written so a crash never
leaves half of one: a temporary file, fsync, then a rename over the old one.

Shared by the agent (its node credential), the CLI (its login) and the server (the
bootstrap admin token); it imports nothing of gpufleet, so every layer may use it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def ensure_private_dir(path: Path) -> None:
    """Create `path` (and parents) mode 700; an existing directory is left as it is."""
    if path.is_dir():
        return
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask


def write_private_file(path: Path, text: str) -> None:
    """Atomically replace `path` with `text`, readable by the owner only."""
    ensure_private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
