"""Chargeback (docs/billing.md): rate cards. Every reader sees the prices; administrators
set and end them (audited). A price is never edited: setting one ends the rate in force."""

from __future__ import annotations

from fastapi import APIRouter, Body, Depends, Path, Query

from gpufleet.api.deps import principal, services
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.base import Time
from gpufleet.wire.billing import RateEnd, RateSet, RateView

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
