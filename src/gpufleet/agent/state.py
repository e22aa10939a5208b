"""The agent's state directory: where the node credential survives restarts.

The credential is the node's `agent` token — whoever reads it can write as this node — so
the file is created mode 600 inside a directory created mode 700, and written atomically
(temporary file, fsync, rename): a crash mid-write leaves the old credential or the new
one, never half of either, which would lock the node out until an operator re-joins it.
"""

from __future__ import annotations

import logging
import stat
from pathlib import Path

from gpufleet.private_files import write_private_file

log = logging.getLogger(__name__)

CREDENTIAL_FILE = "credential"


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
