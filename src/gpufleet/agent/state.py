"""The agent's state directory: where the node credential survives restarts.

The credential is the node's `agent` token — whoever reads it can write as this node — so
the file is created mode 600 inside a directory created mode 700, and written atomically
(temporary file, fsync, rename): a crash mid-write leaves the old credential or the new
one, never half of either, which would lock the node out until an operator re-joins it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

CREDENTIAL_FILE = "credential"


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


class AgentState:
    """The files under one agent's `--state-dir`."""

    def __init__(self, state_dir: str | Path):
        self.state_dir = Path(state_dir)

    @property
    def credential_path(self) -> Path:
        return self.state_dir / CREDENTIAL_FILE

    def read_credential(self) -> str | None:
        """The stored credential, or None when the node has not joined yet."""
        try:
            text = self.credential_path.read_text().strip()
            mode = stat.S_IMODE(self.credential_path.stat().st_mode)
        except FileNotFoundError:
            return None
        if mode & 0o077:
            log.warning("%s is readable by other users (mode %o); it should be 600",
                        self.credential_path, mode)
        return text or None

    def save_credential(self, credential: str) -> None:
        write_private_file(self.credential_path, credential + "\n")

    def forget_credential(self) -> None:
        self.credential_path.unlink(missing_ok=True)
