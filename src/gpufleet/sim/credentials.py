"""Node credentials of a simulated fleet: one private file instead of one per node.

A real agent keeps its credential in `<state-dir>/credential`; thousands of simulated
agents in one process keep theirs in `<state-dir>/credentials.json` (mode 600), keyed by
machine id — the node's identity, which changes with the seed while hostnames do not —
so one fsync'd write covers hundreds of registrations, and a restarted fleet re-registers
with its credentials instead of spending new join tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet.private_files import write_private_file

CREDENTIALS_FILE = "credentials.json"


class CredentialFileError(ValueError):
    pass


class FleetCredentials:
    def __init__(self, state_dir: str | Path):
        self.path = Path(state_dir) / CREDENTIALS_FILE
        self._nodes: dict[str, dict[str, str]] = {}
        self._unsaved = 0
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            self._nodes = {machine_id: {"hostname": str(entry["hostname"]),
                                        "credential": str(entry["credential"])}
                           for machine_id, entry in data["nodes"].items()}
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CredentialFileError(
                f"{self.path} is not a credentials file ({exc}); move it away to let every "
                f"node join again with new join tokens") from None

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def unsaved(self) -> int:
        """Changes since the last save."""
        return self._unsaved

    def get(self, machine_id: str) -> str | None:
        entry = self._nodes.get(machine_id)
        return entry["credential"] if entry else None

    def set(self, machine_id: str, hostname: str, credential: str) -> None:
        self._nodes[machine_id] = {"hostname": hostname, "credential": credential}
        self._unsaved += 1

    def forget(self, machine_id: str) -> None:
        if self._nodes.pop(machine_id, None) is not None:
            self._unsaved += 1

    def save(self) -> None:
        if not self._unsaved:
            return
        write_private_file(self.path, json.dumps({"version": 1, "nodes": self._nodes},
                                                 indent=0, sort_keys=True))
        self._unsaved = 0
