"""The `gpufleet_cost_*` series of the server's `/metrics` (docs/billing.md, "Showback in
Prometheus"): names, labels, units and meanings, in one place, so the service that fills
them (services/billing/showback.py) and the reference that documents them (docs/metrics.md,
rendered by domain/telemetry/catalogue_markdown.py) cannot disagree.

Prometheus' conventions: every one is a gauge (a month-to-date figure falls back to 0 when
a month begins, so it is no counter and has no `_total`); the unit is in the name
(`_gpu_hours`, `_timestamp_seconds`, `_per_unit_hour`); money is a float gauge with its
currency as a label, since a fleet's currency is data, not a unit Prometheus knows.
"""

from __future__ import annotations

from dataclasses import dataclass

PROJECT_LABELS = ("project", "organisation", "department", "cost_centre")
MONEY_LABELS = (*PROJECT_LABELS, "currency")
RATE_LABELS = ("flavour", "environment", "currency")


@dataclass(frozen=True)
class CostSeries:
    """One gauge family: `field` is the statement totals' field it carries (None: not a
    per-project figure)."""

    name: str
    labels: tuple[str, ...]
    unit: str
    help: str
    field: str | None = None


RATE = CostSeries(
    "gpufleet_cost_rate_per_unit_hour", RATE_LABELS, "currency per unit-hour",
    "Price of one unit-hour of a flavour in force now, per environment (empty: any "
    "environment without its own rate); in the `currency` label's unit.")
COMPUTED = CostSeries(
    "gpufleet_cost_computed_timestamp_seconds", (), "Unix seconds",
    "Until when (a whole minute) the *_month_to_date figures are computed: the upkeep "
    "recomputes them every billing_showback_refresh_s, or sooner when this month's "
    "statement is asked for.")


def _hours(term: str, meaning: str) -> CostSeries:
    return CostSeries(f"gpufleet_cost_{term}_gpu_hours_month_to_date", PROJECT_LABELS,
                      "GPU-hours", meaning, f"{term}_gpu_hours")


HOURS = (
    _hours("allocated", "GPU-hours held by the project's bindings this month (UTC) so far, "
           "a pool's own included: the funnel's allocated."),
    _hours("reserved", "GPU-hours of the project's approved pools this month so far, used "
           "or not."),
    _hours("charged", "GPU-hours paid for this month so far: reserved + bindings outside "
           "pools."),
    _hours("unpriced", "Charged GPU-hours this month so far that no rate priced."),
    _hours("active", "Allocated GPU-hours this month so far in minutes the funnel counts "
           "active."),
    _hours("idle", "Allocated GPU-hours this month so far in minutes the funnel counts "
           "idle."),
    _hours("unknown", "Allocated GPU-hours this month so far with no activity known: "
           "never billed as idle."),
)
MONEY = (
    CostSeries("gpufleet_cost_month_to_date", MONEY_LABELS, "currency",
               "What the project's GPUs cost this month (UTC) so far: charged hours at the "
               "rate card's prices, plus the idle adjustment; in the `currency` label's "
               "unit.", "total_cost"),
    CostSeries("gpufleet_cost_idle_month_to_date", MONEY_LABELS, "currency",
               "Money spent on idle GPUs this month so far: idle GPU-hours at the price "
               "they were paid at; in the `currency` label's unit.", "idle_cost"),
    CostSeries("gpufleet_cost_idle_adjustment_month_to_date", MONEY_LABELS, "currency",
               "The rate card's surcharge (or discount, < 0) on idle GPU-hours this month "
               "so far; in the `currency` label's unit.", "idle_adjustment"),
)
SERIES = (RATE, COMPUTED, *MONEY, *HOURS)
