"""One row of the metric catalogue, and the checks every row must pass when it is declared."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.sources import (
    DcgmSource,
    Encoding,
    NvmlSource,
    PrometheusSource,
)
from gpufleet.domain.telemetry.vocabulary import (
    AcrossSeries,
    Aggregation,
    Architecture,
    MetricClass,
    Scope,
    Source,
    Unit,
)

_NAME = re.compile(r"^(gpu|process)\.[a-z0-9_]+$")
GPUFLEET_PROMETHEUS_PREFIX = "gpufleet_"
PERCENT_STORED_DECIMALS = 4


@dataclass(frozen=True)
class Metric:
    """A metric: canonical name, authoritative unit, class (hence aggregation), scopes, whether it
    exists per MIG instance, extra labels beyond the standard ones (docs/design.md, "Telemetry
    model"), and where its value comes from.

    `prometheus_name` is set only where the exposition name is neither the DCGM field name
    nor gpufleet's own `gpufleet_<name>` (e.g. dcgm-exporter's DCGM_EXP_XID_ERRORS_TOTAL).
    """

    name: str
    unit: Unit
    metric_class: MetricClass
    scopes: tuple[Scope, ...]
    per_mig: bool
    description: str
    nvml: NvmlSource | None = None
    dcgm: DcgmSource | None = None
    prometheus_name: str | None = None
    labels: tuple[str, ...] = ()
    notes: str = ""

    def __post_init__(self) -> None:
        problems = _row_problems(self)
        if problems:
            raise ValueError(f"metric {self.name!r}: " + "; ".join(problems))

    @property
    def aggregation(self) -> Aggregation:
        return self.metric_class.aggregation

    @property
    def stored_decimals(self) -> int | None:
        """Decimal places the embedded store keeps of this metric's values once their hour
        is compacted (None: the value as received, exactly). Percentages keep 4 (1e-4 of
        a percentage point, the precision dcgm-exporter prints a profiling ratio with:
        six decimals of a 0-1 ratio); full-precision doubles would cost the raw tier ~3
        bytes per sample more (docs/telemetry-store.md, "Figures")."""
        return PERCENT_STORED_DECIMALS if self.unit is Unit.PERCENT else None

    @property
    def prometheus(self) -> PrometheusSource:
        if self.prometheus_name is not None:
            return PrometheusSource(self.prometheus_name, self.unit.value, Encoding.FLOAT)
        if self.dcgm is not None:
            names = tuple(name for name, _, link in self.dcgm.fields() if link is not None)
            return PrometheusSource(self.dcgm.field, self.dcgm.raw_unit, self.dcgm.encoding,
                                    self.dcgm.scale, link_names=names)
        own = GPUFLEET_PROMETHEUS_PREFIX + self.name.replace(".", "_")
        return PrometheusSource(own, self.unit.value, Encoding.FLOAT)

    @property
    def architectures(self) -> frozenset[Architecture]:
        """Where at least one value source exists."""
        found: frozenset[Architecture] = frozenset()
        for source in (self.nvml, self.dcgm):
            if source is not None:
                found |= source.architectures
        return found

    def source(self, kind: Source) -> NvmlSource | DcgmSource | PrometheusSource:
        """This metric's source of that kind; InvalidInput when it has none."""
        found = {Source.NVML: self.nvml, Source.DCGM: self.dcgm,
                 Source.PROMETHEUS: self.prometheus}[Source(kind)]
        if found is None:
            raise InvalidInput(f"metric {self.name} has no {Source(kind).value} source",
                               code="metric_source_unavailable",
                               details={"metric": self.name, "source": Source(kind).value})
        return found

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (the CLI's `metrics ls --json`)."""
        return {
            "name": self.name, "unit": self.unit.value, "class": self.metric_class.value,
            "scopes": [s.value for s in self.scopes], "per_mig": self.per_mig,
            "labels": list(self.labels), "description": self.description,
            "over_time": self.aggregation.over_time.value,
            "across_series": self.aggregation.across_series.value,
            "nvml": None if self.nvml is None else {
                "call": self.nvml.call, "constant": self.nvml.constant,
                "constant_id": self.nvml.constant_id, "scale": self.nvml.scale,
                "architectures": _sorted(self.nvml.architectures),
                "per_mig": self.nvml.per_mig},
            "dcgm": None if self.dcgm is None else {
                "field": self.dcgm.field, "field_id": self.dcgm.field_id,
                "scale": self.dcgm.scale, "architectures": _sorted(self.dcgm.architectures),
                "per_mig": self.dcgm.per_mig},
            "prometheus_name": self.prometheus.name,
            "architectures": _sorted(self.architectures),
            "notes": self.notes,
        }


def _sorted(architectures: frozenset[Architecture]) -> list[str]:
    return [a.value for a in Architecture if a in architectures]


def _row_problems(m: Metric) -> list[str]:
    problems = []
    if not _NAME.match(m.name):
        problems.append("names are gpu.<snake_case> or process.<snake_case>")
    if not m.description or not m.scopes:
        problems.append("a row needs a description and a scope")
    if m.unit is Unit.PERCENT and m.aggregation.across_series is AcrossSeries.SUM:
        problems.append("percentages are never summed across series")
    if m.name.startswith("process."):
        if m.scopes != (Scope.PROCESS,):
            problems.append("process metrics have the process scope alone")
    elif Scope.PROCESS in m.scopes or Scope.DEVICE not in m.scopes:
        problems.append("gpu metrics have the device scope (and mig where per-MIG)")
    elif m.per_mig != (Scope.MIG in m.scopes):
        problems.append("per_mig and the mig scope disagree")
    for source in (m.nvml, m.dcgm):
        if source is not None and source.per_mig and not m.per_mig:
            problems.append(f"{source.kind.value} cannot be per-MIG when the metric is not")
    if m.nvml is None and m.dcgm is None and m.prometheus_name is None:
        problems.append("a row needs at least one source")
    per_link = any(s is not None and (s.link_field_ids if isinstance(s, DcgmSource)
                                      else s.link_constant_ids) for s in (m.nvml, m.dcgm))
    if per_link != ("link" in m.labels):
        problems.append("per-link sources and the `link` label go together")
    return problems
