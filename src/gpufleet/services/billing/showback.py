"""Showback in Prometheus (docs/billing.md, "Showback in Prometheus"): this month's
statement per project as `gpufleet_cost_*` gauges on the server's `/metrics`, and the rates
in force now.

A scrape must stay cheap, and a month's statement at 100,000 bindings costs ~10 s of CPU,
so a scrape never computes one: the upkeep loop keeps the current month's statement
(`BillingStatements.warm_showback`) and turns it into a `Showback` — every project's totals
as the statement's JSON gives them (`totals_view`: hours as floats, money rounded once to
the currency's minor unit) — which a scrape only copies into families. Until the first one
exists, and after a month begins until the upkeep has computed it, a scrape has no
per-project cost series at all (never last month's figures as this month's).

Names follow Prometheus' conventions: gauges (a month-to-date figure falls back to 0 when a
month begins, so it is no counter and has no `_total`), the unit in the name
(`_gpu_hours`, `_seconds`, `_per_unit_hour`), money as a float gauge with its currency as a
label since a fleet's currency is data, not a unit Prometheus knows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpufleet.domain.billing.charges import Window
from gpufleet.domain.billing.rates import RateCard
from gpufleet.services.telemetry.server_metrics import Family
from gpufleet.wire.billing import StatementTotals

PROJECT_LABELS = ("project", "organisation", "department", "cost_centre")

# (family suffix, StatementTotals field, help): GPU-hours, no currency.
HOUR_FAMILIES = (
    ("allocated_gpu_hours", "allocated_gpu_hours",
     "GPU-hours held by the project's bindings this month (UTC) so far, a pool's own "
     "included: the funnel's allocated."),
    ("reserved_gpu_hours", "reserved_gpu_hours",
     "GPU-hours of the project's approved pools this month so far, used or not."),
    ("charged_gpu_hours", "charged_gpu_hours",
     "GPU-hours paid for this month so far: reserved + bindings outside pools."),
    ("unpriced_gpu_hours", "unpriced_gpu_hours",
     "Charged GPU-hours this month so far that no rate priced."),
    ("active_gpu_hours", "active_gpu_hours",
     "Allocated GPU-hours this month so far in minutes the funnel counts active."),
    ("idle_gpu_hours", "idle_gpu_hours",
     "Allocated GPU-hours this month so far in minutes the funnel counts idle."),
    ("unknown_gpu_hours", "unknown_gpu_hours",
     "Allocated GPU-hours this month so far with no activity known: never billed as idle."),
)
# (family name, StatementTotals field, help): money, with the currency as a label.
MONEY_FAMILIES = (
    ("gpufleet_cost_month_to_date", "total_cost",
     "What the project's GPUs cost this month (UTC) so far: charged hours at the rate "
     "card's prices, plus the idle adjustment; in the `currency` label's unit."),
    ("gpufleet_cost_idle_month_to_date", "idle_cost",
     "Money spent on idle GPUs this month so far: idle GPU-hours at the price they were "
     "paid at; in the `currency` label's unit."),
    ("gpufleet_cost_idle_adjustment_month_to_date", "idle_adjustment",
     "The rate card's surcharge (or discount, < 0) on idle GPU-hours this month so far; "
     "in the `currency` label's unit."),
)


@dataclass(frozen=True)
class ShowbackRow:
    project: str
    organisation: str | None
    department: str | None
    cost_centre: str | None
    totals: StatementTotals

    def labels(self) -> dict[str, str]:
        return {"project": self.project, "organisation": self.organisation or "",
                "department": self.department or "", "cost_centre": self.cost_centre or ""}


@dataclass(frozen=True)
class Showback:
    """This month's statement, per project, ready for a scrape: `window` is [month start,
    as of) — its end is the minute the figures were computed up to."""

    window: Window
    currency: str | None
    rows: tuple[ShowbackRow, ...]


def families(showback: Showback | None, card: RateCard | None, now: datetime) -> list[Family]:
    """The `gpufleet_cost_*` families: the rates in force at `now` (read at scrape time:
    a few hundred rows at most), and — only when `showback` is this month's — its
    per-project figures and their age."""
    found = [_rates(card, now)]
    if showback is None or showback.window.start.strftime("%Y-%m") != now.strftime("%Y-%m"):
        return found
    computed = Family("gpufleet_cost_computed_timestamp_seconds",
                      "Until when (Unix seconds, a whole minute) the gpufleet_cost_*_month_to"
                      "_date figures are computed: the upkeep recomputes them every "
                      "billing_showback_refresh_s, or sooner when this month's statement "
                      "was asked.", ())
    computed.add(showback.window.end.timestamp())
    found.append(computed)
    for suffix, field, meaning in HOUR_FAMILIES:
        family = Family(f"gpufleet_cost_{suffix}_month_to_date", meaning, PROJECT_LABELS)
        for row in showback.rows:
            family.add(getattr(row.totals, field), **row.labels())
        found.append(family)
    if showback.currency is None:  # no rate card: hours are facts, money is not guessed
        return found
    for name, field, meaning in MONEY_FAMILIES:
        family = Family(name, meaning, (*PROJECT_LABELS, "currency"))
        for row in showback.rows:
            family.add(float(getattr(row.totals, field)), currency=showback.currency,
                       **row.labels())
        found.append(family)
    return found


def _rates(card: RateCard | None, now: datetime) -> Family:
    family = Family("gpufleet_cost_rate_per_unit_hour",
                    "Price of one unit-hour of a flavour in force now, per environment "
                    "(empty: any environment without its own rate); in the `currency` "
                    "label's unit.", ("flavour", "environment", "currency"))
    for rate in () if card is None else card.rates:
        if rate.effective_from <= now and (rate.effective_to is None
                                           or now < rate.effective_to):
            family.add(float(rate.price_per_unit_hour), flavour=rate.key,
                       environment=rate.environment or "", currency=card.currency)
    return family
