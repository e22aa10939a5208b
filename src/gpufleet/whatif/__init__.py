"""What-if replays: a workload through the live placement engine against any fleet.

`fleets` builds a `FleetState` (an openb node list, a fleet spec, or the live fleet's JSON),
`workloads` reads tasks (openb pods, openb request sequences, gpufleet traces), `replay`
runs them through a `Placer` and `report` measures the outcome. Everything reads only the
files it is given; nothing here touches a database or a server.
"""

from .errors import WhatifError
from .fleets import fleet_from_json, fleet_from_spec, openb_fleet
from .replay import ReplayResult, TaskOutcome, replay
from .report import Report, build_report
from .workloads import Task, load_workload

__all__ = [
    "ReplayResult",
    "Report",
    "Task",
    "TaskOutcome",
    "WhatifError",
    "build_report",
    "fleet_from_json",
    "fleet_from_spec",
    "load_workload",
    "openb_fleet",
    "replay",
]
