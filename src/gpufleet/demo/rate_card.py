"""The demo fleet's rate card: what a unit-hour costs in each environment (docs/billing.md).

Cloud GPUs are priced at list price per GPU-hour, on-prem GPUs at an amortised cost (the
purchase over four years, plus power and the hall); a MIG instance is priced by its weight
from its model's price unless it has a price of its own (one does here, to show both), and
a shared GPU's fraction by its milli. The card is in force from the start of 2026, so a
statement for any window of the demo's history is priced.

Set through the rate card service as an administrator, so every rate is audited like one
set with `gpufleet billing rates set`; done once per data dir (a store that already holds a
rate keeps its card).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import select

from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.services.billing.rates import set_rate
from gpufleet.store.tables import BillingRate, Environment
from gpufleet.wire.billing import RateSet

CURRENCY = "USD"
IN_FORCE_FROM = datetime(2026, 1, 1, tzinfo=UTC)

# (flavour, environment or None for any other, USD per unit-hour)
DEMO_RATES: tuple[tuple[str, str | None, str], ...] = (
    # Azure list prices per GPU: ND H100 v5 and NC A100 v4, divided by their GPUs.
    ("H100-80GB", "azure-koreacentral", "12.29"),
    ("A100-80GB", "azure-koreacentral", "3.67"),
    # On-prem, amortised: four years of purchase, power and space per GPU-hour.
    ("H100-80GB", None, "2.10"),
    ("A100-80GB", None, "1.25"),
    ("L40S-48GB", None, "0.85"),
    # The smallest H100 slice costs more than its 1/7 weight: it is the one most asked for.
    ("H100-80GB/1g.10gb", None, "0.40"),
)


def seed_rate_card(gf: Gpufleet) -> int | None:
    """Store the demo's rates (those for environments the fleet has); None when the store
    already has a rate card. Call it once the fleet has registered its environments."""
    now = gf.clock.now()
    with gf.store.write() as session:
        if session.scalar(select(BillingRate.id).limit(1)) is not None:
            return None
        known = set(session.scalars(select(Environment.name)))
        wanted = [rate for rate in DEMO_RATES if rate[1] is None or rate[1] in known]
        for flavour, environment, price in wanted:
            set_rate(session, SYSTEM, RateSet(
                flavour=flavour, environment=environment,
                price_per_unit_hour=Decimal(price), currency=CURRENCY,
                effective_from=IN_FORCE_FROM), now)
    return len(wanted)
