"""The metric catalogue (docs/design.md, "Telemetry model"): every metric gpufleet stores, and its
lookups.

One source of truth: the agent reads what a row names, ingest maps DCGM fields and
Prometheus names to rows, rollups aggregate by a row's class, and docs/metrics.md is
rendered from the rows (`gpufleet metrics docs`). A name not in the catalogue is an
`InvalidInput` (code `unknown_metric`), never a silently new series.
"""

from __future__ import annotations

from functools import cache

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.catalogue_rows import ACTIVITY, MEMORY, POWER, PROCESSES, TRAFFIC
from gpufleet.domain.telemetry.catalogue_rows_health import COUNTERS, SENSORS, STATES
from gpufleet.domain.telemetry.metric import Metric

CATALOGUE: tuple[Metric, ...] = (
    *ACTIVITY, *MEMORY, *POWER, *TRAFFIC, *SENSORS, *STATES, *COUNTERS, *PROCESSES)

# Device metrics whose events may name the MIG instance they hit: on a MIG-enabled GPU,
# NVML attributes an XID event to a GPU instance (nvmlEventData_t.gpuInstanceId), and the
# agent files it under that instance's MIG UUID. Such series sit on the instance's unit;
# a query grouped by GPU sums them with the GPU's own (docs/operations.md, "MIG instances").
MIG_ATTRIBUTED: frozenset[str] = frozenset({"gpu.xid_errors_total"})

# Counters their reader starts at zero, one series born at its first event (an XID code's
# at its first XID): a series first seen inside a window counts its whole value as new.
# Aggregate ECC and NVLink totals persist across reboots, so theirs would not.
COUNTED_FROM_READER_START: frozenset[str] = frozenset({"gpu.xid_errors_total"})

# The core catalogue: what one upload carries per GPU every tick (and what the benchmark's
# "core catalogue of a 10,000-GPU fleet" means): activity, memory, power, heat, clocks and
# the health signals an operator acts on. Device metrics only, one series each.
CORE: tuple[str, ...] = (
    "gpu.utilization",
    "gpu.gr_engine_active",
    "gpu.sm_active",
    "gpu.sm_occupancy",
    "gpu.tensor_active",
    "gpu.dram_active",
    "gpu.memory_used_bytes",
    "gpu.memory_total_bytes",
    "gpu.power_usage_watts",
    "gpu.energy_joules_total",
    "gpu.temperature_celsius",
    "gpu.memory_temperature_celsius",
    "gpu.sm_clock_mhz",
    "gpu.clock_throttle_reasons",
    "gpu.xid_last_code",
    "gpu.ecc_uncorrected_errors_total",
    "gpu.remapped_rows_pending",
    "gpu.remapped_rows_failed",
    "gpu.pcie_replays_total",
)


def _unknown(what: str, name: object) -> InvalidInput:
    return InvalidInput(f"unknown metric {what}: {name}", code="unknown_metric",
                        details={what: name})


@cache
def _indexes() -> tuple[dict[str, Metric], dict[str | int, Metric], dict[str, Metric]]:
    by_name: dict[str, Metric] = {}
    by_dcgm: dict[str | int, Metric] = {}
    by_prometheus: dict[str, Metric] = {}
    for row in CATALOGUE:
        _claim(by_name, row.name, row)
        if row.dcgm is not None:
            for field, field_id, _ in row.dcgm.fields():
                _claim(by_dcgm, field, row)
                _claim(by_dcgm, field_id, row)
            for alias in row.dcgm.aliases:
                _claim(by_dcgm, alias, row)
        for name in row.prometheus.names():
            _claim(by_prometheus, name, row)
    return by_name, by_dcgm, by_prometheus


def _claim(index: dict, key: str | int, row: Metric) -> None:
    if key in index:
        raise ValueError(f"{key!r} belongs to both {index[key].name} and {row.name}")
    index[key] = row


def metric(name: str) -> Metric:
    """The row of a canonical name (`gpu.sm_active`)."""
    try:
        return _indexes()[0][name]
    except KeyError:
        raise _unknown("name", name) from None


def find(name: str) -> Metric | None:
    """The row of a canonical name; None for a name the catalogue does not have (a name
    from outside, where an unknown one is counted rather than refused)."""
    return _indexes()[0].get(name)


def by_dcgm_field(field: str | int) -> Metric:
    """The row a DCGM field feeds, by name (DCGM_FI_PROF_SM_ACTIVE, an older alias, or one
    link's name of a per-link family) or by numeric id (1002)."""
    try:
        return _indexes()[1][field]
    except KeyError:
        raise _unknown("dcgm_field", field) from None


def by_prometheus_name(name: str) -> Metric:
    """The row an exposition name (dcgm-exporter's or gpufleet's agent's) carries."""
    try:
        return _indexes()[2][name]
    except KeyError:
        raise _unknown("prometheus_name", name) from None


def core_metrics() -> tuple[Metric, ...]:
    return tuple(metric(name) for name in CORE)
