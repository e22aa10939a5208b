"""The Billing page: a month's (or any window's) statements and the rate card, from the
service calls `GET /api/v1/billing/statements` and `GET /api/v1/billing/rates` make, with
the viewer's principal — so a member sees only their own projects' costs
(docs/dashboard.md, "Billing"; docs/billing.md, "Statements from the store")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from gpufleet.api.web.bar_chart import Bar, bar_chart
from gpufleet.api.web.page import (
    UI,
    Section,
    Viewer,
    api_url,
    page_status,
    render,
    section,
    services,
    templates,
    viewer,
)
from gpufleet.domain.billing.rates import minor_units
from gpufleet.domain.errors import InvalidInput
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.billing.statements import asked_window, month_window
from gpufleet.wire.billing import STATEMENT_BY, STATEMENT_GROUPS, RateView, StatementRow

NAV = ("billing", "Billing", f"{UI}/billing")
CHART_TOP = 10  # the "cost by project" chart's bars: the costliest projects
BY_LABELS = {"project": "Project", "organisation": "Organisation", "department": "Department",
             "cost_centre": "Cost centre"}


def money(value: Decimal | None, currency: str | None) -> str:
    """An amount as the API rounds it (half-even to the currency's minor unit), with its
    currency; "—" when no rate priced it (no card stored: a price is never guessed)."""
    if value is None:
        return "—"
    if currency is None:
        return f"{value:,f}"
    digits = minor_units(currency)  # a price of 2.5 reads 2.50 EUR; 0.0125 stays exact
    if value.as_tuple().exponent > -digits:
        value = value.quantize(Decimal(1).scaleb(-digits))
    return f"{value:,f} {currency}"


templates.env.filters.setdefault("money", money)


@dataclass(frozen=True)
class Asked:
    """What the page's query string asks for: a month (default: this month, UTC) or a
    window, and the statement endpoint's project / by / group."""

    month: str | None
    start: datetime | None
    end: datetime | None
    project: str | None
    by: str
    group: str | None

    def api_params(self) -> dict:
        """The statement endpoint's query, in the same order the page's link writes it."""
        return {"month": self.month, "start": _iso(self.start), "end": _iso(self.end),
                "project": self.project, "by": self.by if self.by != "project" else None,
                "group": self.group}

    def neighbours(self, now: datetime) -> tuple[str, str | None] | None:
        """The months before and after the asked one (None: not a valid month; no next
        month once it has not begun: a statement of the future is the API's 400)."""
        if self.month is None:
            return None
        try:
            span = month_window(self.month)
        except InvalidInput:
            return None
        first = span.start
        prev = (first.replace(year=first.year - 1, month=12) if first.month == 1
                else first.replace(month=first.month - 1))
        return prev.strftime("%Y-%m"), span.end.strftime("%Y-%m") if span.end <= now else None


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _time(text: str, name: str) -> datetime:
    """A window's edge from the form: ISO 8601; a time without a zone is read as UTC (the
    form's fields say so), as on the GPU page."""
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(f"{name} '{text}' is not a time like 2026-11-02T09:00Z",
                           code="invalid_time", details={name: text}) from None
    return at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)  # the form shows UTC


def asked(now: datetime, month: str, start: str, end: str, project: str, by: str,
          group: str) -> Asked:
    """The page's query read as the API reads it; no month and no window: this month."""
    start_at = _time(start, "start") if start.strip() else None
    end_at = _time(end, "end") if end.strip() else None
    month_text = month.strip() or None
    if month_text is None and start_at is None and end_at is None:
        month_text = now.astimezone(UTC).strftime("%Y-%m")
    return Asked(month_text, start_at, end_at, project.strip() or None,
                 by.strip() or "project", group.strip() or None)


def sort_by_cost(rows: list[StatementRow]) -> list[StatementRow]:
    """Costliest first; unpriced (no card) by charged, then allocated GPU-hours."""
    def key(row: StatementRow):
        t = row.totals
        return (-(t.total_cost if t.total_cost is not None else Decimal(-1)),
                -t.charged_gpu_hours, -t.allocated_gpu_hours, row.key or "")
    return sorted(rows, key=key)


def cost_chart(view) -> str | None:
    """The top projects by cost as bars (None when nothing is priced or spent)."""
    if view.currency is None or view.by != "project":
        return None
    bars = [Bar(row.key or "—", float(row.totals.total_cost or 0),
                money(row.totals.total_cost, view.currency))
            for row in sort_by_cost(view.rows)[:CHART_TOP]
            if row.totals.total_cost]
    if not bars:
        return None
    return bar_chart(f"Cost by project, the {len(bars)} costliest", view.currency, bars)


@dataclass(frozen=True)
class RateCard:
    """The stored rates split as the page shows them, read at `now`."""

    in_force: list[RateView]
    scheduled: list[RateView]
    ended: list[RateView]


def split_rates(rates: list[RateView], now: datetime) -> RateCard:
    in_force, scheduled, ended = [], [], []
    for rate in rates:
        if rate.effective_to is not None and rate.effective_to <= now:
            ended.append(rate)
        elif rate.effective_from > now:
            scheduled.append(rate)
        else:
            in_force.append(rate)
    return RateCard(in_force, scheduled, ended)


def billing_page(gf: Gpufleet, p: Principal, query: Asked) -> dict[str, Section]:
    params = query.api_params()

    def statement():
        window = asked_window(query.month, query.start, query.end, now=gf.clock.now())
        view = gf.billing_statements(p, window, project=query.project, by=query.by,
                                     group=query.group)
        return {"view": view, "rows": sort_by_cost(view.rows), "chart": cost_chart(view)}

    now = gf.clock.now()
    return {
        "statement": section(api_url("billing/statements", **params), statement),
        "csv": Section(api_url("billing/statements", **params, format="csv")),
        "rates": section(api_url("billing/rates"),
                         lambda: split_rates(gf.list_billing_rates(p), now)),
    }


router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/billing")
async def billing(request: Request, month: str = "", start: str = "", end: str = "",
                  project: str = "", by: str = "project", group: str = "",
                  who: Viewer = Depends(viewer)) -> Response:
    gf = services(request)
    try:
        query = asked(gf.clock.now(), month, start, end, project, by, group)
    except InvalidInput as exc:
        return render(request, "error.html", who, exc.http_status, heading="Billing",
                      message=exc.message, back=(f"{UI}/billing", "This month's statement"),
                      current_page="billing")
    sections = await run_in_threadpool(billing_page, gf, who.principal, query)
    return render(request, "billing.html", who, page_status(sections), sections=sections,
                  query=query, months=query.neighbours(gf.clock.now()), by_labels=BY_LABELS,
                  by_choices=STATEMENT_BY, group_choices=STATEMENT_GROUPS,
                  current_page="billing")
