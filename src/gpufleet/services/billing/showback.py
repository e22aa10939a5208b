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

The names, labels and units, and why they are so, are domain/billing/showback.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpufleet.domain.billing.charges import Window
from gpufleet.domain.billing.rates import RateCard
from gpufleet.domain.billing.showback import COMPUTED, HOURS, MONEY, RATE, CostSeries
from gpufleet.services.telemetry.server_metrics import Family
from gpufleet.wire.billing import StatementTotals


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
    computed = _family(COMPUTED)
    computed.add(showback.window.end.timestamp())
    found.append(computed)
    for series in HOURS:
        family = _family(series)
        for row in showback.rows:
            family.add(getattr(row.totals, series.field), **row.labels())
        found.append(family)
    if showback.currency is None:  # no rate card: hours are facts, money is not guessed
        return found
    for series in MONEY:
        family = _family(series)
        for row in showback.rows:
            family.add(float(getattr(row.totals, series.field)), currency=showback.currency,
                       **row.labels())
        found.append(family)
    return found


def _family(series: CostSeries) -> Family:
    return Family(series.name, series.help, series.labels)


def _rates(card: RateCard | None, now: datetime) -> Family:
    family = _family(RATE)
    for rate in () if card is None else card.rates:
        if rate.effective_from <= now and (rate.effective_to is None
                                           or now < rate.effective_to):
            family.add(float(rate.price_per_unit_hour), flavour=rate.key,
                       environment=rate.environment or "", currency=card.currency)
    return family
