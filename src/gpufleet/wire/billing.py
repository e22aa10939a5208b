"""Chargeback on the wire: rate cards' rates (docs/billing.md, "Rate cards, stored") and
statements, as JSON and as CSV (docs/billing.md, "Statements from the store")."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from decimal import Decimal
from typing import Annotated

from pydantic import Field, PlainSerializer, StringConstraints

from gpufleet.wire.base import Name, StrictModel, Time, View

# Money as the store keeps it exactly (store/types.py `Money`): send it as a string
# ("2.45") to be sure no float rounds it on the way.
Price = Annotated[Decimal, Field(max_digits=24, decimal_places=9, allow_inf_nan=False)]
# Out as plain decimal text, never an exponent: "0.000000001", not "1E-9".
PriceOut = Annotated[Decimal, PlainSerializer(lambda d: format(d, "f"), return_type=str,
                                              when_used="json")]
IdleAdjustment = Annotated[Decimal, Field(ge=-1, le=1000, max_digits=24, decimal_places=9,
                                          allow_inf_nan=False)]
FlavourKey = Annotated[str, StringConstraints(min_length=1, max_length=80)]
Currency = Annotated[str, StringConstraints(min_length=1, max_length=8)]


class RateSet(StrictModel):
    """Set a flavour's price from a time on: the open rate in force then ends there."""

    flavour: FlavourKey = Field(description="A flavour key: H100-80GB, H100-80GB/1g.10gb, "
                                            "L40S-48GB/shared.")
    environment: Name | None = Field(default=None, description="None: any environment "
                                     "without its own rate (and pools).")
    price_per_unit_hour: Price
    currency: Currency = Field(description="ISO 4217, e.g. EUR; one currency per fleet.")
    effective_from: Time | None = Field(default=None, description="Default: now.")
    effective_to: Time | None = Field(default=None, description="Default: open.")
    idle_adjustment: IdleAdjustment = Field(default=Decimal(0), description=(
        "A surcharge (> 0) or discount (< 0, at least -1) on the cost of the idle GPU-hours "
        "this rate prices, as a fraction: 0.5 makes an idle GPU-hour cost 1.5 times."))


class RateEnd(StrictModel):
    at: Time | None = Field(default=None, description="When the rate stops; default: now.")


class RateView(View):
    id: int
    flavour: str
    environment: str | None
    price_per_unit_hour: PriceOut
    currency: str
    effective_from: datetime
    effective_to: datetime | None
    created_by: str
    created_at: datetime
    ended_by: str | None
    ended_at: datetime | None
    idle_adjustment: PriceOut


# --- statements (docs/billing.md, "Statements from the store") -----------------------------

STATEMENT_BY = ("project", "organisation", "department", "cost_centre")
STATEMENT_GROUPS = ("model", "profile", "environment", "flavour")
# Money out: rounded once, half-even to the currency's minor unit, as decimal text.
Money = Annotated[Decimal, PlainSerializer(lambda d: format(d, "f"), return_type=str,
                                           when_used="json")]


class StatementTotals(View):
    """GPU-hours as numbers; money as decimal text in the statement's currency (null when
    no rate card is stored: every charged hour is then unpriced)."""

    allocated_gpu_hours: float = Field(description="Weight × time held by bindings, a "
                                       "pool's own included: the funnel's allocated.")
    reserved_gpu_hours: float = Field(description="Pools: count × unit weight × time "
                                      "from approval to end.")
    charged_gpu_hours: float = Field(description="What is paid for: reserved + bindings "
                                     "outside pools.")
    unpriced_gpu_hours: float = Field(description="Charged hours no rate priced.")
    active_gpu_hours: float
    idle_gpu_hours: float
    unknown_gpu_hours: float = Field(description="Allocated, neither active nor idle: "
                                     "never billed as idle.")
    efficiency_percent: float | None = Field(description="Active ÷ (active + idle); null "
                                             "when nothing is known.")
    cost: Money | None
    idle_cost: Money | None = Field(description="Idle GPU-hours × the price they were "
                                    "paid at: money spent on idle GPUs.")
    idle_adjustment: Money | None
    total_cost: Money | None


class StatementGroup(View):
    group: str | None = Field(description="The model, MIG profile, environment or flavour "
                              "(null: no profile, or a pool's any-environment capacity).")
    totals: StatementTotals


class StatementRow(View):
    key: str | None = Field(description="The project, organisation, department or cost "
                            "centre (null: projects without one).")
    organisation: str | None = None
    department: str | None = None
    cost_centre: str | None = None
    totals: StatementTotals
    groups: list[StatementGroup] | None = None


class StatementsView(View):
    window_start: datetime
    window_end: datetime = Field(description="The asked end, or now if that is later: no "
                                 "hour is counted before it happened.")
    currency: str | None = Field(description="The rate card's; null when none is stored.")
    by: str
    group: str | None
    rows: list[StatementRow]
    total: StatementTotals = Field(description="Every row summed (what the caller sees).")


_TOTAL_FIELDS = tuple(StatementTotals.model_fields)
CSV_COLUMNS = ("by", "key", "organisation", "department", "cost_centre", "group_by", "group",
               "window_start", "window_end", "currency", *_TOTAL_FIELDS)


def statements_csv(view: StatementsView) -> str:
    """The statement as CSV (stdlib `csv`): one line per row, or per row and group when
    grouped; the same figures as the JSON, money as its decimal text, hours as Python
    writes a float (read back exactly by `float`), empty for null."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    head = [view.window_start.isoformat(), view.window_end.isoformat(), view.currency or ""]
    for row in view.rows:
        parts = [(g.group, g.totals) for g in row.groups] if row.groups is not None else \
            [(None, row.totals)]
        for group, totals in parts:
            figures = totals.model_dump(mode="json")
            writer.writerow([view.by, _cell(row.key), _cell(row.organisation),
                             _cell(row.department), _cell(row.cost_centre),
                             view.group or "", _cell(group), *head,
                             *(_cell(figures[name]) for name in _TOTAL_FIELDS)])
    return out.getvalue()


def _cell(value: object) -> str:
    return "" if value is None else str(value)
