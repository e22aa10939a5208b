"""The node's own facts for its registration: what no GPU backend knows (NVML and
dcgm-exporter describe only the GPUs). Shared by the `nvml` and `dcgm-exporter` backends."""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostFacts:
    """What registration says about the node itself."""

    machine_id: str
    hostname: str
    cpu_cores: int
    memory_bytes: int
    os_name: str | None = None


def read_host() -> HostFacts:
    """This machine's facts: /etc/machine-id, hostname, CPU count, physical memory."""
    hostname = socket.gethostname()
    try:
        machine_id = Path("/etc/machine-id").read_text().strip() or hostname
    except OSError:
        machine_id = hostname
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return HostFacts(machine_id, hostname, os.cpu_count() or 1, memory,
                     f"{platform.system()} {platform.release()}")
