"""The agent's options and their defaults, declared once: `gpufleet agent`'s flags
(cli/commands/processes.py), `agent_main.AgentFlags` and the telemetry loop all take them
from here. Standard library only, so the CLI can read the defaults without loading the
agent.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024**2
BACKENDS = ("nvml", "dcgm-exporter", "sim")
DEFAULT_BACKEND = "sim"  # runs anywhere: a first try needs no GPU


@dataclass(frozen=True)
class TelemetryOptions:
    collect_interval_s: float = 10.0
    # Each upload costs the server a fixed share of CPU besides its samples: at 60 s a
    # 100,000-GPU fleet's ingest takes about half a core of the server's one interpreter,
    # at 30 s nearly all of it. The price: `top` and `latest` are up to a minute behind
    # (docs/agent-backends.md, "Upload interval").
    upload_interval_s: float = 60.0
    # A failed upload is first retried this soon (or after one upload interval, if that
    # is shorter): a retry then still lands inside the server's rollup grace (120 s).
    first_retry_s: float = 30.0
    spool_max_bytes: int = 256 * MIB  # the on-disk spool of unacknowledged batches
    # The server's general body limit is 1 MiB; telemetry may be larger, but a batch this
    # size stays cheap to retry and well inside every limit a proxy in front of it may set.
    max_batch_bytes: int = 512 * 1024

    def __post_init__(self) -> None:
        if self.collect_interval_s <= 0 or self.upload_interval_s <= 0 or \
                self.first_retry_s <= 0:
            raise ValueError("collection and upload intervals must be positive")

    @property
    def ticks_per_batch(self) -> int:
        return max(1, round(self.upload_interval_s / self.collect_interval_s))
