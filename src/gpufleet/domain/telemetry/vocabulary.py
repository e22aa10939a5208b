"""The words of the metric catalogue: units, classes and their aggregation, scopes, sources,
architectures.

Aggregation follows the metric's class (docs/design.md, "Telemetry model"): a percentage is averaged
across GPUs, never summed; a lifetime counter contributes its increase over a window, resets
handled.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from enum import StrEnum


class Unit(StrEnum):
    """The catalogue unit of a metric; authoritative over any source's raw unit."""

    PERCENT = "percent"
    BYTES = "bytes"
    BYTES_PER_SECOND = "bytes_per_second"
    WATTS = "watts"
    JOULES = "joules"
    CELSIUS = "celsius"
    MHZ = "mhz"
    COUNT = "count"
    FLAGS = "flags"  # a bitmask; each bit is a reason
    BOOLEAN = "boolean"  # 0 or 1
    CODE = "code"  # an identifier (an XID number), not a quantity


class Comparison(StrEnum):
    """How a value is compared with a limit (an alert rule's `op`, a store query's value
    filter). `has_any_bits`: the value, a bitmask (gpu.clock_throttle_reasons), has any of
    the limit's bits set."""

    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="
    EQ = "=="
    NE = "!="
    HAS_ANY_BITS = "has_any_bits"

    def holds(self, left: float, right: float) -> bool:
        return _COMPARE[self](left, right)

    @property
    def symbol(self) -> str:
        return {Comparison.GE: "≥", Comparison.LE: "≤", Comparison.NE: "≠",
                Comparison.HAS_ANY_BITS: "&"}.get(self, self.value)


_COMPARE = {Comparison.GT: operator.gt, Comparison.GE: operator.ge,
            Comparison.LT: operator.lt, Comparison.LE: operator.le,
            Comparison.EQ: operator.eq, Comparison.NE: operator.ne,
            Comparison.HAS_ANY_BITS: lambda left, right: (int(left) & int(right)) != 0}


class OverTime(StrEnum):
    """How one series' samples combine over a window."""

    MEAN = "mean"
    INCREASE = "increase"
    LAST = "last"


class AcrossSeries(StrEnum):
    """How several series (GPUs, MIG instances, processes) combine at one time."""

    MEAN = "mean"
    SUM = "sum"
    MAX = "max"
    COUNT = "count"


@dataclass(frozen=True)
class Aggregation:
    over_time: OverTime
    across_series: AcrossSeries
    also_over_time: tuple[OverTime, ...] = ()
    also_across_series: tuple[AcrossSeries, ...] = ()
    note: str = ""


class MetricClass(StrEnum):
    """What kind of quantity a metric is; it decides the aggregation (docs/design.md, "Telemetry
    model" table)."""

    RELATIVE_ACTIVITY = "relative_activity"
    ABSOLUTE_USAGE = "absolute_usage"
    LIFETIME_COUNTER = "lifetime_counter"
    SENSOR = "sensor"
    STATE = "state"

    @property
    def aggregation(self) -> Aggregation:
        return _AGGREGATIONS[self]

    @property
    def over_time(self) -> OverTime:
        return self.aggregation.over_time

    @property
    def across_series(self) -> AcrossSeries:
        return self.aggregation.across_series


_AGGREGATIONS = {
    MetricClass.RELATIVE_ACTIVITY: Aggregation(OverTime.MEAN, AcrossSeries.MEAN),
    MetricClass.ABSOLUTE_USAGE: Aggregation(OverTime.MEAN, AcrossSeries.SUM),
    MetricClass.LIFETIME_COUNTER: Aggregation(
        OverTime.INCREASE, AcrossSeries.SUM, also_over_time=(OverTime.LAST,),
        note="counter resets handled; last gives the total so far"),
    MetricClass.SENSOR: Aggregation(
        OverTime.MEAN, AcrossSeries.MEAN, also_across_series=(AcrossSeries.MAX,)),
    MetricClass.STATE: Aggregation(OverTime.LAST, AcrossSeries.COUNT),
}


class Scope(StrEnum):
    """What a series describes: a whole GPU, one MIG instance, or one process on either."""

    DEVICE = "device"
    MIG = "mig"
    PROCESS = "process"


class Source(StrEnum):
    """Where a value can be read: NVML (gpufleet's agent), DCGM, or a Prometheus exposition
    (dcgm-exporter, or gpufleet's agent, which exposes the same DCGM-compatible names)."""

    NVML = "nvml"
    DCGM = "dcgm"
    PROMETHEUS = "prometheus"


class Architecture(StrEnum):
    """GPU architectures, oldest first (the order `since` relies on)."""

    VOLTA = "volta"
    TURING = "turing"
    AMPERE = "ampere"
    ADA = "ada"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"

    @classmethod
    def since(cls, oldest: Architecture) -> frozenset[Architecture]:
        """This architecture and every newer one."""
        order = list(cls)
        return frozenset(order[order.index(oldest):])


ALL_ARCHITECTURES = frozenset(Architecture)
_ARCHITECTURE_WORD = re.compile(r"^\s*([a-z]+)")


def architecture_of(text: str) -> Architecture | None:
    """The architecture named by a model catalogue string ("Hopper (GH100)",
    "Ada Lovelace (AD102)"), or None for one the catalogue does not know (e.g. Pascal)."""
    match = _ARCHITECTURE_WORD.match(text.lower())
    if match is None:
        return None
    try:
        return Architecture(match.group(1))
    except ValueError:
        return None


def describe_architectures(architectures: frozenset[Architecture]) -> str:
    """`hopper+` for a set that runs to the newest architecture, else the names in order."""
    if not architectures:
        return "none"
    ordered = [a for a in Architecture if a in architectures]
    if architectures == Architecture.since(ordered[0]):
        return f"{ordered[0].value}+"
    return ", ".join(a.value for a in ordered)
