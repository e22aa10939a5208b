"""Charge lines: intervals × rate card × window → exact GPU-hours and cost (docs/billing.md).

What is charged: a pool from approval to end, count × unit weight, used or not; a binding
outside any pool for exactly the seconds it was held. A binding of a pool's own request adds
usage to its pool but no cost, so nothing is charged twice. Every interval is cut at the
window's edges, at every rate change and (for monthly statements) at month starts, so the
lines of any partition sum to the whole.

Figures are `Fraction`s — exact, whatever the weights (1/7 of a GPU) and seconds; a statement
rounds its totals once (rates.round_money).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from fractions import Fraction
from itertools import pairwise

from gpufleet.domain.billing.rates import Quote, RateCard, flavour_parts
from gpufleet.domain.errors import InvalidInput

SECONDS_PER_HOUR = 3600
MICROS_PER_HOUR = SECONDS_PER_HOUR * 10**6


@dataclass(frozen=True)
class Window:
    """[start, end): the period a statement covers."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise InvalidInput("a billing window needs time zones", code="invalid_window")
        if self.end <= self.start:
            raise InvalidInput("a billing window must end after it starts",
                               code="invalid_window")


@dataclass(frozen=True)
class BindingInterval:
    """Who held one unit, from when to when (open: still held). `weight` is what the unit
    holds of its GPU as its binding recorded; `pool_id` is set when its request drew on a pool."""

    binding_id: int
    project: str
    flavour: str
    environment: str
    weight: Fraction
    start: datetime
    end: datetime | None = None
    pool_id: int | None = None
    gpu: str | None = None


@dataclass(frozen=True)
class PoolInterval:
    """A pool: `count` units of a flavour reserved from approval to end (open: still active)."""

    pool_id: int
    project: str
    flavour: str
    count: int
    unit_weight: Fraction
    approved_at: datetime
    ended_at: datetime | None = None
    environment: str | None = None


class LineKind(StrEnum):
    BINDING = "binding"      # held outside pools: charged
    POOL = "pool"            # reserved capacity: charged
    POOL_USAGE = "pool_usage"  # a pool's own binding: usage, no cost


@dataclass(frozen=True)
class ChargeLine:
    """One piece of an interval with one price. `cost` is None when no rate prices it."""

    kind: LineKind
    source_id: int
    project: str
    flavour: str
    environment: str | None
    start: datetime
    end: datetime
    units: int
    weight: Fraction
    quote: Quote | None

    @property
    def micros(self) -> int:
        """Exact, as an integer (timedelta.total_seconds() is a float)."""
        held = self.end - self.start
        return (held.days * 86400 + held.seconds) * 10**6 + held.microseconds

    @property
    def seconds(self) -> Fraction:
        return Fraction(self.micros, 10**6)

    @property
    def unit_hours(self) -> Fraction:
        return Fraction(self.units * self.micros, MICROS_PER_HOUR)

    @property
    def gpu_hours(self) -> Fraction:
        return self.weight * self.unit_hours

    @property
    def cost(self) -> Fraction | None:
        if self.kind is LineKind.POOL_USAGE:
            return Fraction(0)
        if self.quote is None:
            return None
        return self.unit_hours * self.quote.price_per_unit_hour

    @property
    def model(self) -> str:
        return flavour_parts(self.flavour)[0]

    @property
    def profile(self) -> str | None:
        return flavour_parts(self.flavour)[1]


def month_starts(window: Window) -> set[datetime]:
    """The first instants (UTC) of every month that begins inside the window."""
    found: set[datetime] = set()
    start = window.start.astimezone(UTC)
    year, month = start.year, start.month
    while True:
        month += 1
        if month == 13:
            year, month = year + 1, 1
        moment = datetime(year, month, 1, tzinfo=UTC)
        if moment >= window.end:
            return found
        found.add(moment)


def _pieces(start: datetime, end: datetime | None, window: Window,
            cuts: list[datetime]) -> Iterator[tuple[datetime, datetime]]:
    lo = max(start, window.start)
    hi = window.end if end is None else min(end, window.end)
    if hi <= lo:
        return
    inner = [c for c in cuts if lo < c < hi]
    edges = [lo, *inner, hi]
    yield from pairwise(edges)


def _check(start: datetime, end: datetime | None, what: str) -> None:
    if start.tzinfo is None or (end is not None and end.tzinfo is None):
        raise InvalidInput(f"{what}: times need time zones", code="invalid_interval")
    if end is not None and end < start:
        raise InvalidInput(f"{what}: ends before it starts", code="invalid_interval")


def _quotes(card: RateCard) -> Callable[[str, str | None, datetime, Fraction],
                                         Quote | None]:
    """`card.rate_at`, asked once per flavour, environment, weight and stretch between two
    of the card's boundaries: no price changes inside such a stretch, and a statement asks
    for one per line (100,000s)."""
    boundaries = sorted(card.boundaries())
    found: dict[tuple, Quote | None] = {}

    def quote(flavour: str, environment: str | None, at: datetime,
              weight: Fraction) -> Quote | None:
        # The weight's integers: hashing a Fraction is slow (a modular inverse).
        key = (flavour, environment, weight.numerator, weight.denominator,
               bisect_right(boundaries, at))
        if key not in found:
            found[key] = card.rate_at(flavour, environment, at, weight)
        return found[key]

    return quote


def charge_lines(bindings: Iterable[BindingInterval], pools: Iterable[PoolInterval],
                 card: RateCard, window: Window, *, monthly: bool = False) -> list[ChargeLine]:
    """Every charge line of the window, cut at rate changes (and month starts if `monthly`).

    A binding whose `pool_id` names a pool in `pools` is pool usage: GPU-hours, no cost. A
    binding naming a pool that was not given is refused: charging it would bill twice what
    the pool already pays for, and dropping it would hide the usage.
    """
    return [ChargeLine(*fields)
            for fields in line_fields(bindings, pools, card, window, monthly=monthly)]


LineFields = tuple[LineKind, int, str, str, str | None, datetime, datetime, int, Fraction,
                   Quote | None]


def line_fields(bindings: Iterable[BindingInterval], pools: Iterable[PoolInterval],
                card: RateCard, window: Window, *, monthly: bool = False
                ) -> Iterator[LineFields]:
    """`charge_lines`' lines as plain tuples, in `ChargeLine`'s field order: a statement
    sums 100,000s of lines and needs no line object unless it keeps them."""
    cuts = sorted(card.boundaries() | (month_starts(window) if monthly else set()))
    quote = _quotes(card)
    pools = list(pools)
    pool_ids = {pool.pool_id for pool in pools}
    for pool in pools:
        _check(pool.approved_at, pool.ended_at, f"pool {pool.pool_id}")
        for lo, hi in _pieces(pool.approved_at, pool.ended_at, window, cuts):
            yield (LineKind.POOL, pool.pool_id, pool.project, pool.flavour, pool.environment,
                   lo, hi, pool.count, pool.unit_weight,
                   quote(pool.flavour, pool.environment, lo, pool.unit_weight))
    for binding in bindings:
        _check(binding.start, binding.end, f"binding {binding.binding_id}")
        in_pool = binding.pool_id is not None
        if in_pool and binding.pool_id not in pool_ids:
            raise InvalidInput(f"binding {binding.binding_id} draws on pool "
                               f"{binding.pool_id}, which was not given",
                               code="missing_pool")
        kind = LineKind.POOL_USAGE if in_pool else LineKind.BINDING
        for lo, hi in _pieces(binding.start, binding.end, window, cuts):
            yield (kind, binding.binding_id, binding.project, binding.flavour,
                   binding.environment, lo, hi, 1, binding.weight,
                   None if in_pool else quote(binding.flavour, binding.environment, lo,
                                              binding.weight))
