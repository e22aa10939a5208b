"""Questions asked of the fleet's telemetry (DESIGN.md §3, §4): range queries, the latest
snapshot per GPU, the fleet funnel, idle / idle-held / zombie / unattributed lists.

Ownership comes from the state store's binding intervals, joined at query time.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.clock import Clock
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb import TelemetryStore


class TelemetryQueries:
    def __init__(self, state: StateStore, telemetry: Callable[[], TelemetryStore],
                 settings: Settings, clock: Clock):
        self.state = state
        self._telemetry = telemetry
        self.settings = settings
        self.clock = clock

    @property
    def telemetry(self) -> TelemetryStore:
        return self._telemetry()
