"""Rate cards in the state store (docs/billing.md, "Rate cards, stored").

A price is never edited in place, so a statement for a past month finds the rates in force
then: setting a price at T ends the open rate of that flavour and environment at T and adds
a new one from T. Every change is audited; the domain's `RateCard` validates every change
(overlaps are 409s naming them) and is what the statements are computed with.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action, AuditSubject
from gpufleet.domain.billing.rates import Rate, RateCard
from gpufleet.domain.errors import Conflict, InvalidInput, NotFound
from gpufleet.domain.requests import parse_flavour
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.store.tables import BillingRate, Environment
from gpufleet.store.types import plain_decimal
from gpufleet.wire.billing import RateEnd, RateSet, RateView


def list_rates(session: Session, principal: Principal, *, flavour: str | None = None,
               environment: str | None = None, at: datetime | None = None) -> list[RateView]:
    """Every stored rate, oldest first per flavour and environment. `environment` keeps
    that environment's rates and the rates for any environment (both may price there);
    `at` keeps the rates in force at that moment."""
    principal.require(Action.READ_BILLING_RATES)
    query = select(BillingRate).order_by(BillingRate.flavour, BillingRate.environment,
                                         BillingRate.effective_from, BillingRate.id)
    if flavour is not None:
        parse_flavour(flavour)  # a 400 naming an unknown model or profile
        query = query.where(BillingRate.flavour == flavour)
    if environment is not None:
        query = query.where(or_(BillingRate.environment == environment,
                                BillingRate.environment.is_(None)))
    if at is not None:
        query = query.where(BillingRate.effective_from <= at,
                            or_(BillingRate.effective_to.is_(None),
                                BillingRate.effective_to > at))
    return [_view(row) for row in session.scalars(query)]


def rate_card(session: Session) -> RateCard | None:
    """Every stored rate as the domain's card; None while no rate is stored."""
    rows = list(session.scalars(select(BillingRate).order_by(BillingRate.id)))
    if not rows:
        return None
    return RateCard(rows[0].currency, tuple(_rate(row) for row in rows))


def set_rate(session: Session, principal: Principal, body: RateSet, now: datetime) -> RateView:
    """Price `body.flavour` in `body.environment` from `effective_from` (default now). An
    open rate that began before then ends there; any other overlap is a 409."""
    principal.require(Action.MANAGE_BILLING_RATES)
    start = body.effective_from or now
    new = Rate(key=body.flavour, price_per_unit_hour=plain_decimal(body.price_per_unit_hour),
               effective_from=start, effective_to=body.effective_to,
               environment=body.environment,
               idle_adjustment=plain_decimal(body.idle_adjustment))
    if body.environment is not None and session.scalars(
            select(Environment.id).where(Environment.name == body.environment)).first() is None:
        raise NotFound(f"no environment {body.environment!r}: `gpufleet env ls` lists them, "
                       "or leave it out to price any environment",
                       code="environment_not_found", details={"environment": body.environment})
    _check_currency(session, body.currency)
    same = list(session.scalars(
        select(BillingRate).where(BillingRate.flavour == new.key,
                                  _same_environment(new.environment))
        .order_by(BillingRate.effective_from).with_for_update()))
    replaced = next((row for row in same if row.effective_to is None
                     and row.effective_from < start and new.effective_to is None), None)
    kept = [_rate(row, effective_to=start if row is replaced else row.effective_to)
            for row in same]
    _validated(body.currency, (*kept, new))
    if replaced is not None:
        _end(session, principal, replaced, start, now, reason="a new price from then")
    row = BillingRate(flavour=new.key, environment=new.environment,
                      price_per_unit_hour=new.price_per_unit_hour, currency=body.currency,
                      effective_from=new.effective_from, effective_to=new.effective_to,
                      idle_adjustment=new.idle_adjustment,
                      created_by=principal.actor, created_at=now)
    session.add(row)
    session.flush()
    audit.record(session, at=now, actor=principal.actor, action="billing_rate.set",
                 subject_kind=AuditSubject.BILLING_RATE, subject=str(row.id),
                 flavour=row.flavour, environment=row.environment,
                 price_per_unit_hour=str(row.price_per_unit_hour), currency=row.currency,
                 effective_from=row.effective_from.isoformat(),
                 effective_to=row.effective_to.isoformat() if row.effective_to else None,
                 idle_adjustment=str(row.idle_adjustment),
                 replaces=replaced.id if replaced is not None else None)
    return _view(row)


def end_rate(session: Session, principal: Principal, rate_id: int, body: RateEnd,
             now: datetime) -> RateView:
    """Stop an open rate at `body.at` (default now): from then the flavour is unpriced
    there, unless another rate covers it."""
    principal.require(Action.MANAGE_BILLING_RATES)
    row = session.get(BillingRate, rate_id, with_for_update=True)
    if row is None:
        raise NotFound(f"no rate {rate_id}: `gpufleet billing rates ls` lists them",
                       code="rate_not_found", details={"rate": rate_id})
    if row.effective_to is not None:
        raise Conflict(f"rate {rate_id} already ends at {row.effective_to.isoformat()}; "
                       "a price is never edited: set a new rate instead",
                       code="rate_already_ends", details={"rate": rate_id})
    at = body.at or now
    _rate(row, effective_to=at)  # validates: the end must come after the start
    _end(session, principal, row, at, now, reason=None)
    return _view(row)


def _end(session: Session, principal: Principal, row: BillingRate, at: datetime,
         now: datetime, reason: str | None) -> None:
    row.effective_to, row.ended_by, row.ended_at = at, principal.actor, now
    audit.record(session, at=now, actor=principal.actor, action="billing_rate.ended",
                 subject_kind=AuditSubject.BILLING_RATE, subject=str(row.id), reason=reason,
                 flavour=row.flavour, environment=row.environment,
                 price_per_unit_hour=str(row.price_per_unit_hour), currency=row.currency,
                 effective_to=at.isoformat())


def _check_currency(session: Session, currency: str) -> None:
    RateCard(currency)  # a 400 naming a code that is not ISO 4217
    stored = sorted(set(session.scalars(select(BillingRate.currency).distinct())))
    if stored and stored != [currency]:
        raise Conflict(f"the rate card is in {', '.join(stored)}, not {currency}: a fleet "
                       "has one currency", code="currency_mismatch",
                       details={"currency": currency, "stored": stored})


def _validated(currency: str, rates: tuple[Rate, ...]) -> RateCard:
    try:
        return RateCard(currency, rates)
    except InvalidInput as exc:
        if exc.code != "overlapping_rates":
            raise
        raise Conflict(exc.message + ": end the rate in force first, or set the new one "
                       "from a later time", code=exc.code, details=exc.details) from None


def _same_environment(environment: str | None):
    if environment is None:
        return BillingRate.environment.is_(None)
    return BillingRate.environment == environment


_KEEP = object()


def _rate(row: BillingRate, effective_to: datetime | object | None = _KEEP) -> Rate:
    end = row.effective_to if effective_to is _KEEP else effective_to
    return Rate(key=row.flavour, price_per_unit_hour=row.price_per_unit_hour,
                effective_from=row.effective_from, effective_to=end,  # type: ignore[arg-type]
                environment=row.environment, idle_adjustment=row.idle_adjustment)


def _view(row: BillingRate) -> RateView:
    return RateView.model_validate(row)
