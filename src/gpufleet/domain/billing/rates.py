"""Rate cards: what one unit-hour of a flavour costs, where and when (docs/billing.md).

Flavour keys are the lifecycle's (domain/requests.py): `H100-80GB` (a whole GPU),
`H100-80GB/1g.10gb` (a MIG profile), `L40S-48GB/shared` (fractions of a shared GPU). Money
is `Decimal`; a rate is in force from `effective_from` (inclusive) to `effective_to`
(exclusive, or open). A rate's environment `None` applies wherever no rate names the
environment (pools, which belong to no environment, use it too).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from functools import cached_property

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.requests import parse_flavour

# ISO 4217 minor units where they are not 2.
_MINOR_UNITS = {"JPY": 0, "KRW": 0, "ISK": 0, "CLP": 0, "VND": 0,
                "BHD": 3, "KWD": 3, "OMR": 3, "JOD": 3, "TND": 3, "IQD": 3, "LYD": 3}
_CURRENCY = re.compile(r"^[A-Z]{3}$")


def minor_units(currency: str) -> int:
    """Digits after the decimal point in the currency's smallest coin (ISO 4217)."""
    return _MINOR_UNITS.get(currency, 2)


def round_money(amount: Fraction | Decimal, currency: str) -> Decimal:
    """Round half-even to the currency's minor unit: done once, at a statement's totals."""
    exact = Fraction(amount)
    return round_money_ratio(exact.numerator, exact.denominator, currency)


def round_money_ratio(numerator: int, denominator: int, currency: str) -> Decimal:
    """numerator ÷ denominator (> 0), not necessarily reduced, rounded half-even to the
    currency's minor unit — as `round()` rounds a Fraction. One integer division whose
    quotient is the few digits of the amount: cheap even when the two integers have a
    million bits (a month's idle cost summed over projects), where reducing is not."""
    digits = minor_units(currency)
    whole, rest = divmod(numerator * 10 ** digits, denominator)
    if rest * 2 > denominator or (rest * 2 == denominator and whole % 2):
        whole += 1
    return Decimal(whole).scaleb(-digits)


def flavour_parts(key: str) -> tuple[str, str | None]:
    """`H100-80GB/1g.10gb` → (`H100-80GB`, `1g.10gb`); `L40S-48GB/shared` → (…, `shared`)."""
    model_key, _, rest = key.partition("/")
    return model_key, rest or None


def unit_weight(key: str, milli: int = 1000) -> Fraction:
    """What a unit of the flavour holds of its GPU (docs/design.md, "Funnel and activity":
    Weights), exactly.

    Whole: 1. MIG: max(compute share, memory share) from the catalogue's geometry. Shared:
    milli ÷ 1000.
    """
    model_key, rest = flavour_parts(key)
    if rest is None:
        return Fraction(1)
    if rest == "shared":
        return Fraction(milli, 1000)
    found = catalogue_model(model_key)
    profile = found.mig.profile_named(rest) if found and found.mig else None
    if found is None or found.mig is None or profile is None:
        raise InvalidInput(f"unknown MIG flavour '{key}'", code="unknown_mig_profile",
                           details={"flavour": key})
    geometry = found.mig
    return max(Fraction(profile.compute_slices, geometry.compute_slices_total),
               Fraction(profile.memory_slices, geometry.memory_slices_total))


@dataclass(frozen=True)
class Rate:
    """Price of one unit-hour of a flavour in an environment, for a period.

    For a shared flavour the price is for a whole GPU's worth (1000 milli-hours); a unit
    pays it × milli ÷ 1000.
    """

    key: str
    price_per_unit_hour: Decimal
    effective_from: datetime
    effective_to: datetime | None = None
    environment: str | None = None
    # A surcharge (> 0) or discount (< 0, at least -1) on the cost of the idle-allocated
    # GPU-hours this rate priced, as a fraction of it: what an idle GPU-hour costs on top.
    idle_adjustment: Decimal = Decimal(0)

    def __post_init__(self) -> None:
        canonical = parse_flavour(self.key).key
        if canonical != self.key:
            raise InvalidInput(f"rate for '{self.key}': write the flavour as '{canonical}'",
                               code="invalid_rate", details={"flavour": self.key})
        if not isinstance(self.price_per_unit_hour, Decimal):
            raise InvalidInput(f"rate for '{self.key}': price must be a Decimal",
                               code="invalid_rate")
        if self.price_per_unit_hour < 0 or not self.price_per_unit_hour.is_finite():
            raise InvalidInput(f"rate for '{self.key}': price must be a finite amount ≥ 0",
                               code="invalid_rate")
        for moment in (self.effective_from, self.effective_to):
            if moment is not None and moment.tzinfo is None:
                raise InvalidInput(f"rate for '{self.key}': dates must carry a time zone",
                                   code="invalid_rate")
        if self.effective_to is not None and self.effective_to <= self.effective_from:
            raise InvalidInput(f"rate for '{self.key}': effective_to must be after "
                               "effective_from", code="invalid_rate")
        if not isinstance(self.idle_adjustment, Decimal) or not self.idle_adjustment.is_finite() \
                or self.idle_adjustment < -1:
            raise InvalidInput(f"rate for '{self.key}': the idle adjustment must be a "
                               "fraction ≥ -1 (a discount of at most 100 %)",
                               code="invalid_rate")

    def in_force(self, at: datetime) -> bool:
        return self.effective_from <= at and (self.effective_to is None or at < self.effective_to)

    def overlaps(self, other: Rate) -> bool:
        ends_before = self.effective_to is not None and self.effective_to <= other.effective_from
        starts_after = other.effective_to is not None and other.effective_to <= self.effective_from
        return not (ends_before or starts_after)


@dataclass(frozen=True)
class Quote:
    """A price found for a unit-hour, and the rate it came from (for the statement's lines)."""

    price_per_unit_hour: Fraction
    rate: Rate
    derived: str  # "explicit", "mig-weight" or "shared-milli"


@dataclass(frozen=True)
class RateCard:
    """Every rate of one currency. Each rate carries its own idle adjustment, so a change
    to it is a new rate from then on and a past month keeps the adjustment it had."""

    currency: str
    rates: tuple[Rate, ...] = ()

    def __post_init__(self) -> None:
        if not _CURRENCY.match(self.currency):
            raise InvalidInput(f"currency '{self.currency}' is not an ISO 4217 code",
                               code="invalid_currency")
        seen: dict[tuple[str, str | None], list[Rate]] = {}
        for rate in self.rates:
            same = seen.setdefault((rate.key, rate.environment), [])
            clash = next((r for r in same if r.overlaps(rate)), None)
            if clash is not None:
                where = rate.environment or "any environment"
                raise InvalidInput(f"rates for '{rate.key}' in {where} overlap: "
                                   f"{clash.effective_from.isoformat()} and "
                                   f"{rate.effective_from.isoformat()}",
                                   code="overlapping_rates",
                                   details={"flavour": rate.key, "environment": rate.environment})
            same.append(rate)

    def boundaries(self) -> set[datetime]:
        """Every moment a price may change: where an interval must be cut."""
        found = {rate.effective_from for rate in self.rates}
        found |= {rate.effective_to for rate in self.rates if rate.effective_to is not None}
        return found

    @cached_property
    def _periods(self) -> dict[tuple[str, str | None], tuple[list[datetime], list[Rate]]]:
        """Each key and environment's rates, oldest first, with their starts: a statement
        asks a price per line (100,000s), so the rate in force is found by bisection, not
        by scanning the card. Rates of one key and environment never overlap (validated
        above), so the last one starting at or before a moment is the only candidate."""
        found: dict[tuple[str, str | None], list[Rate]] = {}
        for rate in self.rates:
            found.setdefault((rate.key, rate.environment), []).append(rate)
        periods = {}
        for where, rates in found.items():
            rates.sort(key=lambda r: r.effective_from)
            periods[where] = ([r.effective_from for r in rates], rates)
        return periods

    def _in_force(self, key: str, environment: str | None, at: datetime) -> Rate | None:
        period = self._periods.get((key, environment))
        if period is None:
            return None
        starts, rates = period
        index = bisect_right(starts, at) - 1
        if index < 0 or not rates[index].in_force(at):
            return None
        return rates[index]

    def _explicit(self, key: str, environment: str | None, at: datetime) -> Rate | None:
        """The environment's own rate for the key, else the rate for any environment."""
        exact = self._in_force(key, environment, at)
        if exact is not None or environment is None:
            return exact
        return self._in_force(key, None, at)

    def rate_at(self, key: str, environment: str | None, at: datetime,
                weight: Fraction | None = None) -> Quote | None:
        """The price of one unit-hour of `key` at `at`; None when the card prices it nowhere.

        Fallbacks: an explicit rate for the key; else a MIG profile pays its model's price ×
        its weight, a shared unit its model's price (or the `/shared` rate) × milli ÷ 1000.
        `weight` is the unit's recorded weight; MIG defaults to the catalogue's, shared to 1.
        """
        model_key, rest = flavour_parts(key)
        if rest == "shared":
            share = weight if weight is not None else Fraction(1)
            rate = self._explicit(key, environment, at)
            derived = "shared-milli"
            if rate is None:
                rate = self._explicit(model_key, environment, at)
            if rate is None:
                return None
            return Quote(Fraction(rate.price_per_unit_hour) * share, rate, derived)
        rate = self._explicit(key, environment, at)
        if rate is not None:
            return Quote(Fraction(rate.price_per_unit_hour), rate, "explicit")
        if rest is None:
            return None
        rate = self._explicit(model_key, environment, at)
        if rate is None:
            return None
        share = weight if weight is not None else unit_weight(key)
        return Quote(Fraction(rate.price_per_unit_hour) * share, rate, "mig-weight")
