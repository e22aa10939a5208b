"""Chargeback (docs/billing.md): rate cards and statements. Every reader sees the prices;
administrators set and end them (audited). A price is never edited: setting one ends the
rate in force. Statements are scoped: a member sees only their own projects'."""

from __future__ import annotations

from fastapi import APIRouter, Body, Depends, Path, Query, Response

from gpufleet.api.deps import principal, services
from gpufleet.domain.errors import InvalidInput
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.billing.statements import asked_window
from gpufleet.wire.base import Time
from gpufleet.wire.billing import RateEnd, RateSet, RateView, StatementsView, statements_csv

router = APIRouter(prefix="/api/v1/billing", tags=["billing"])


@router.get("/rates", response_model=list[RateView])
def list_rates(flavour: str | None = Query(default=None, max_length=80,
                                           description="Only this flavour's rates."),
               environment: str | None = Query(default=None, max_length=63, description=(
                   "Only rates that may price there: its own and those for any environment.")),
               at: Time | None = Query(default=None, description="Only rates in force then."),
               p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """The rate card, history included: every rate ever set, oldest first per flavour."""
    return gf.list_billing_rates(p, flavour=flavour, environment=environment, at=at)


@router.post("/rates", response_model=RateView, status_code=201)
def set_rate(body: RateSet = Body(examples=[{
                 "flavour": "H100-80GB", "environment": "onprem-hpc",
                 "price_per_unit_hour": "2.45", "currency": "EUR",
                 "effective_from": "2026-12-01T00:00:00Z"}]),
             p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Set a flavour's price from a time on (default now): the open rate for the same
    flavour and environment ends then; any other overlap is a 409 naming it."""
    return gf.set_billing_rate(p, body)


@router.post("/rates/{rate_id}/end", response_model=RateView)
def end_rate(rate_id: int = Path(ge=1), body: RateEnd | None = None,
             p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """End an open rate at `at` (default now)."""
    return gf.end_billing_rate(p, rate_id, body or RateEnd())


@router.get("/statements", response_model=StatementsView,
            responses={200: {"content": {"text/csv": {}},
                             "description": "JSON, or CSV with `format=csv`."}})
def statements(month: str | None = Query(default=None, max_length=7, description=(
                   "A calendar month (UTC), YYYY-MM; or give start (and end). None: this month.")),
               start: Time | None = Query(default=None, description="Window start."),
               end: Time | None = Query(default=None, description=(
                   "Window end (exclusive); cut at now. Without one: until now.")),
               project: str | None = Query(default=None, max_length=63,
                                           description="Only this project's statement."),
               by: str = Query(default="project", max_length=16, description=(
                   "project, organisation, department or cost_centre.")),
               group: str | None = Query(default=None, max_length=16, description=(
                   "Break each row down by model, profile, environment or flavour.")),
               format: str = Query(default="json", max_length=8,
                                   description="json or csv."),
               p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """What each project's GPUs cost over a month or any window: allocated, reserved,
    charged, active, idle and unknown GPU-hours and their cost (docs/billing.md). Members
    see only their own projects, and roll-ups over those only."""
    if format not in ("json", "csv"):
        raise InvalidInput(f"format '{format}' is not one of: json, csv",
                           code="invalid_format", details={"format": format})
    view = gf.billing_statements(p, asked_window(month, start, end, now=gf.clock.now()),
                                 project=project,
                                 by=by, group=group)
    if format == "json":
        return view
    name = f"gpufleet-statement-{month or view.window_start.strftime('%Y%m%dT%H%M%SZ')}"
    return Response(statements_csv(view), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}.csv"'})
