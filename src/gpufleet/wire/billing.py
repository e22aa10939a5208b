"""Chargeback on the wire: rate cards' rates (docs/billing.md, "Rate cards, stored")."""

from __future__ import annotations

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
