"""docs/metrics.md, rendered from the catalogue rows (`gpufleet metrics docs`)."""

from __future__ import annotations

from gpufleet.domain.billing.showback import SERIES as COST_SERIES
from gpufleet.domain.telemetry.catalogue import CATALOGUE, CORE
from gpufleet.domain.telemetry.metric import GPUFLEET_PROMETHEUS_PREFIX, Metric
from gpufleet.domain.telemetry.sources import (
    DCGM_FP64_BLANK,
    DCGM_INT32_BLANK,
    DCGM_INT64_BLANK,
    NVML_MISSING_ERRORS,
    DcgmSource,
    NvmlSource,
)
from gpufleet.domain.telemetry.vocabulary import MetricClass, describe_architectures

_EXAMPLES = {
    MetricClass.RELATIVE_ACTIVITY: "sm_active, gr_engine_active, utilization, tensor_active",
    MetricClass.ABSOLUTE_USAGE: "memory used, power, PCIe / NVLink throughput",
    MetricClass.LIFETIME_COUNTER: "energy, ECC counts, remapped rows, NVLink errors, XIDs",
    MetricClass.SENSOR: "temperature, fan, clocks",
    MetricClass.STATE: "throttle reasons, remap pending / failed, last XID code",
}


def _code(text: str) -> str:
    return f"`{text}`"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _nvml_cell(source: NvmlSource | None) -> str:
    if source is None:
        return "—"
    cell = _code(source.call)
    if source.constant is not None:
        cell += f" {_code(source.constant)} ({source.constant_id}"
        cell += "+2·link)" if source.link_constant_ids else ")"
    return cell


def _dcgm_cell(source: DcgmSource | None) -> str:
    if source is None:
        return "—"
    step = "+2·link" if source.link_field_ids else ""
    return f"{_code(source.field)} ({source.field_id}{step})"


def _architectures_cell(row: Metric) -> str:
    parts = []
    for label, source in (("NVML", row.nvml), ("DCGM", row.dcgm)):
        if source is not None:
            parts.append(f"{label} {describe_architectures(source.architectures)}")
    return "; ".join(parts) or "—"


def _per_mig_cell(row: Metric) -> str:
    if not row.per_mig:
        return "no"
    sources = [label for label, s in (("NVML", row.nvml), ("DCGM", row.dcgm))
               if s is not None and s.per_mig]
    return f"yes ({', '.join(sources)})" if sources else "yes (no per-MIG source verified)"


def _aggregation_section() -> list[str]:
    lines = ["## Aggregation by class", "",
             "Never sum percentages across GPUs: relative activity is averaged.", "",
             "| class | over time | across series | examples |", "|---|---|---|---|"]
    for cls in MetricClass:
        agg = cls.aggregation
        over = agg.over_time.value + "".join(f" (and {x.value})" for x in agg.also_over_time)
        across = agg.across_series.value + "".join(
            f" (and {x.value})" for x in agg.also_across_series)
        if agg.note:
            over += f": {agg.note}"
        lines.append(f"| {cls.value} | {over} | {across} | {_EXAMPLES[cls]} |")
    return [*lines, ""]


def _metrics_section() -> list[str]:
    lines = ["## Metrics", "",
             "| metric | unit | class | scope | per MIG | labels | NVML source | DCGM field (id) "
             "| Prometheus name | architectures |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in CATALOGUE:
        labels = ", ".join(_code(x) for x in row.labels) or "—"
        lines.append(
            f"| {_code(row.name)} | {row.unit.value} | {row.metric_class.value} "
            f"| {', '.join(s.value for s in row.scopes)} | {_per_mig_cell(row)} | {labels} "
            f"| {_nvml_cell(row.nvml)} | {_dcgm_cell(row.dcgm)} "
            f"| {_code(row.prometheus.name)} | {_architectures_cell(row)} |")
    return [*lines, ""]


def _descriptions_section() -> list[str]:
    lines = ["## What each metric means", ""]
    for row in CATALOGUE:
        text = f"- {_code(row.name)} ({row.unit.value}): {row.description}"
        notes = [n for n in (row.notes,
                             row.nvml and row.nvml.notes and f"NVML: {row.nvml.notes}.",
                             row.dcgm and row.dcgm.notes and f"DCGM: {row.dcgm.notes}.") if n]
        lines.append(" ".join([text, *notes]))
    return [*lines, ""]


def _scales_section() -> list[str]:
    lines = [
        "## Scales, sentinels and missing values", "",
        "A raw value × scale = the catalogue value, in the catalogue unit. A series read by a",
        "Prometheus name that is a DCGM field name carries the DCGM field's raw unit (as",
        "dcgm-exporter writes it), so the DCGM scale applies; gpufleet's own names",
        f"(`{GPUFLEET_PROMETHEUS_PREFIX}…`) carry catalogue units.", "",
        "Missing values are stored as missing (null), never as numbers:", "",
        f"- DCGM int64 fields: {DCGM_INT64_BLANK:#x} (DCGM_INT64_BLANK) and above — +1 not "
        "found, +2 not supported, +3 not permissioned; also the 32-bit sentinels "
        f"{DCGM_INT32_BLANK:#x}–{DCGM_INT32_BLANK + 3:#x}, as dcgm-exporter does.",
        f"- DCGM double fields: {DCGM_FP64_BLANK:.1f} (DCGM_FP64_BLANK, 2^47) and above.",
        "- NVML: the error returns " + ", ".join(
            f"{name} ({code})" for name, code in NVML_MISSING_ERRORS.items())
        + "; NVML_VALUE_NOT_AVAILABLE (all bits set) in unsigned results such as a "
        "process's usedGpuMemory. NVML_ERROR_GPU_IS_LOST is a health event, not a missing "
        "value.",
        "- NaN and infinities, from any source.", "",
        "| metric | NVML raw unit | NVML scale | DCGM raw unit | DCGM scale |",
        "|---|---|---|---|---|",
    ]
    for row in CATALOGUE:
        nvml = (row.nvml.raw_unit, _number(row.nvml.scale)) if row.nvml else ("—", "—")
        dcgm = (row.dcgm.raw_unit, _number(row.dcgm.scale)) if row.dcgm else ("—", "—")
        lines.append(f"| {_code(row.name)} | {nvml[0]} | {nvml[1]} | {dcgm[0]} | {dcgm[1]} |")
    return [*lines, ""]


def _precision_section() -> list[str]:
    kept = [row for row in CATALOGUE if row.stored_decimals is not None]
    decimals = sorted({row.stored_decimals for row in kept})
    return ["## Stored precision", "",
            "The embedded store (DuckDB) keeps every value exactly as received, except that "
            "once an hour is compacted (closed and rolled up) its raw samples of these "
            f"metrics are rounded to {', '.join(map(str, decimals))} decimal places "
            "(1e-4 of a percentage point; rollups are folded from the values as received): "
            + ", ".join(_code(row.name) for row in kept) + ".", ""]


def _showback_section() -> list[str]:
    """The server's own `gpufleet_cost_*` gauges (docs/billing.md, "Showback in
    Prometheus"): not stored telemetry, but metrics a user looks for here."""
    lines = [
        "## Showback: `gpufleet_cost_*` on the server's /metrics", "",
        "Not telemetry: the server's own gauges, from the billing statements "
        "(docs/billing.md, \"Showback in Prometheus\"; rendered from "
        "`src/gpufleet/domain/billing/showback.py`). Each `*_month_to_date` series is this "
        "month's (UTC) statement so far, per project, with the same figures as "
        "`GET /api/v1/billing/statements?month=` (hours as numbers, money rounded to the "
        "currency's minor unit). The upkeep loop computes them every "
        "`billing_showback_refresh_s` (default 900 s; 0: none), or takes this month's "
        "statement when a caller kept it fresher; a scrape never computes one. Until the "
        "first computation, and when a month begins until the next, there are no "
        "per-project series (only the rates); `gpufleet_cost_computed_timestamp_seconds` "
        "says how old the figures are. Money series are absent without a rate card, and "
        "their `currency` label is the card's. An empty label is a project without that "
        "column, or a rate for any environment. Who may scrape: as every /metrics family, "
        "admin, operator and viewer tokens; a member's gets 403.", "",
        "| series | labels | unit | meaning |", "|---|---|---|---|"]
    lines += [f"| {_code(s.name)} | {', '.join(s.labels) or '—'} | {s.unit} | {s.help} |"
              for s in COST_SERIES]
    lines += [
        "", "Example PromQL:", "", "```promql",
        "# the 10 projects that spent most on idle GPUs this month",
        "topk(10, gpufleet_cost_idle_month_to_date)",
        "# idle share of each department's cost",
        "sum by (department) (gpufleet_cost_idle_month_to_date)",
        "  / sum by (department) (gpufleet_cost_month_to_date)",
        "# figures older than 30 minutes",
        "time() - gpufleet_cost_computed_timestamp_seconds > 1800",
        "```", ""]
    return lines


def catalogue_markdown() -> str:
    """docs/metrics.md, generated from the catalogue rows."""
    lines = [
        "# Metric catalogue", "",
        "Generated by `gpufleet metrics docs` from `src/gpufleet/domain/telemetry/` (and "
        "`domain/billing/showback.py`); do not edit.", "",
        "Every metric gpufleet stores, with its authoritative unit, its class (which decides "
        "how it aggregates), its scopes, whether it exists per MIG instance, and where its "
        "value comes from: NVML (gpufleet's agent), DCGM, and the Prometheus exposition name "
        "(dcgm-exporter's, which gpufleet's agent also uses). Temperature, power, clocks, "
        "ECC, XID, NVLink and PCIe belong to the parent GPU, never to a MIG instance.", "",
        "Standard labels (not repeated below): `gpu_uuid`, `node`, `environment`, `model`, "
        "`mig_profile`, `parent_uuid`, `allocation`, `project`; process series add `pid`, "
        "`container`, `pod`, `namespace`, `slurm_job`.", "",
    ]
    lines += _aggregation_section()
    lines += ["## Core catalogue", "",
              "What one upload carries per GPU every tick:", "",
              ", ".join(_code(name) for name in CORE) + ".", ""]
    lines += _metrics_section()
    lines += _descriptions_section()
    lines += _scales_section()
    lines += _precision_section()
    lines += _showback_section()
    return "\n".join(lines)
