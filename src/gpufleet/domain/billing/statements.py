"""Statements: a project's charge lines and activity summed, and rolled up (docs/billing.md).

Allocated GPU-hours are the funnel's (weight × time held by bindings, pool usage included);
charged GPU-hours are what is paid for (pools' reserved capacity + bindings outside pools).
Activity comes in per binding for the window (the service feeds the funnel's minute masks):
active and idle GPU-hours; the rest of the binding's time is unknown — never idle, never
billed as idle. Idle cost is idle GPU-hours × the price per GPU-hour the time was paid at; the idle
adjustment adds each paying rate's own surcharge (or discount) on it.
All figures are exact `Fraction`s; `rounded` gives money half-even to the minor unit, once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from decimal import Decimal
from fractions import Fraction

from gpufleet.domain.billing.charges import (
    MICROS_PER_HOUR,
    BindingInterval,
    ChargeLine,
    LineKind,
    PoolInterval,
    Window,
    line_fields,
)
from gpufleet.domain.billing.rates import Quote, RateCard, round_money, round_money_ratio
from gpufleet.domain.errors import InvalidInput

ZERO = Fraction(0)


@dataclass(frozen=True)
class ProjectInfo:
    """What a statement rolls up by: the projects table's organisation, department, cost centre."""

    name: str
    organisation: str
    department: str | None = None
    cost_centre: str | None = None


@dataclass(frozen=True)
class Activity:
    """A binding's known activity in the window, in GPU-hours (weight × hours)."""

    active_gpu_hours: Fraction = ZERO
    idle_gpu_hours: Fraction = ZERO


@dataclass(frozen=True)
class Totals:
    allocated_gpu_hours: Fraction = ZERO
    reserved_gpu_hours: Fraction = ZERO
    charged_gpu_hours: Fraction = ZERO
    unpriced_gpu_hours: Fraction = ZERO
    cost: Fraction = ZERO
    active_gpu_hours: Fraction = ZERO
    idle_gpu_hours: Fraction = ZERO
    unknown_gpu_hours: Fraction = ZERO
    idle_cost: Fraction = ZERO
    idle_adjustment: Fraction = ZERO

    def __add__(self, other: Totals) -> Totals:
        return Totals(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def total_cost(self) -> Fraction:
        """Cost plus the card's idle surcharge (or minus its discount)."""
        return self.cost + self.idle_adjustment

    @property
    def efficiency(self) -> Fraction | None:
        """Active ÷ known allocated GPU-hours; None when nothing is known."""
        known = self.active_gpu_hours + self.idle_gpu_hours
        return self.active_gpu_hours / known if known else None

    def rounded(self, currency: str) -> dict[str, Decimal]:
        """Money rounded half-even to the currency's minor unit — the only rounding."""
        return {"cost": round_money(self.cost, currency),
                "idle_cost": round_money(self.idle_cost, currency),
                "idle_adjustment": round_money(self.idle_adjustment, currency),
                "total_cost": round_money(self.total_cost, currency)}


TOTALS_FIELDS = tuple(f.name for f in fields(Totals))
_MONEY_FIELDS = ("cost", "idle_cost", "idle_adjustment")


@dataclass(frozen=True)
class ExactTotals:
    """Many `Totals` summed exactly but not reduced: a (numerator, denominator) per field.

    What a view of a statement needs (hours as floats, money rounded once) comes from the
    pair without reducing it, and reducing is what costs: a month's idle cost summed over
    200 projects at 100,000 bindings has a denominator of ~1.3 million bits (every binding
    spanning a rate change brings its own), and a GCD of that size takes seconds
    (BENCHMARKS.md, "Billing statements"). `fraction` reduces, for whoever needs one."""

    pairs: Mapping[str, tuple[int, int]]

    @classmethod
    def of(cls, items: Iterable[Totals]) -> ExactTotals:
        items = list(items)
        return cls({name: exact_sum((value.numerator, value.denominator) for item in items
                                    if (value := getattr(item, name)))
                    for name in TOTALS_FIELDS})

    def fraction(self, name: str) -> Fraction:
        if name == "total_cost":
            return self.fraction("cost") + self.fraction("idle_adjustment")
        return Fraction(*self.pairs[name])

    def float(self, name: str) -> float:
        """Correctly rounded, as float(Fraction) is: int ÷ int is, reduced or not."""
        numerator, denominator = self.pairs[name]
        return numerator / denominator

    @property
    def efficiency(self) -> Fraction | None:
        """As `Totals.efficiency` (hours' denominators stay small: reducing them is cheap)."""
        return Totals(active_gpu_hours=self.fraction("active_gpu_hours"),
                      idle_gpu_hours=self.fraction("idle_gpu_hours")).efficiency

    def rounded(self, currency: str) -> dict[str, Decimal]:
        """As `Totals.rounded`, without reducing."""
        found = {name: round_money_ratio(*self.pairs[name], currency)
                 for name in _MONEY_FIELDS}
        total = exact_sum((self.pairs["cost"], self.pairs["idle_adjustment"]))
        return {**found, "total_cost": round_money_ratio(*total, currency)}


def sum_totals(items: Iterable[Totals]) -> Totals:
    """From the first item, not from zero: adding a Fraction to 0 still takes a GCD, and
    a project's idle cost has thousands of digits."""
    items = list(items)
    total = items[0] if items else Totals()
    for item in items[1:]:
        total = total + item
    return total


@dataclass(frozen=True)
class Group:
    """The finest breakdown a statement keeps; model, profile and environment read from it."""

    flavour: str
    environment: str | None

    @property
    def model(self) -> str:
        return self.flavour.partition("/")[0]

    @property
    def profile(self) -> str | None:
        return self.flavour.partition("/")[2] or None


@dataclass(frozen=True)
class Statement:
    project: ProjectInfo
    window: Window
    currency: str
    groups: Mapping[Group, Totals] = field(default_factory=dict)
    lines: tuple[ChargeLine, ...] = ()

    @property
    def totals(self) -> Totals:
        return sum_totals(self.groups.values())

    def by(self, key: Callable[[Group], object]) -> dict[object, Totals]:
        """Totals by any reading of the group: `lambda g: g.model`, `g.profile`, …"""
        found: dict[object, Totals] = defaultdict(Totals)
        for group, totals in self.groups.items():
            found[key(group)] = found[key(group)] + totals
        return dict(found)


# Lines are summed in buckets of one project, group, kind, weight and price, counting whole
# microseconds as integers; each bucket becomes Fractions once. Summing a Fraction per line
# costs a GCD per addition — seconds per 100,000 bindings.
# A bucket is keyed by project, flavour, environment, kind, its weight's integers and its
# quote's id (line_fields asks one quote per flavour, weight and price, and hashing
# Fractions per line is slow); `_Bucketed` keeps the objects.
_Bucket = tuple[str, str, str | None, LineKind, int, int, int]


@dataclass
class _Bucketed:
    weight: Fraction
    quote: object
    unit_micros: int = 0


def _bucket_totals(kind: LineKind, weight: Fraction, price: Fraction | None, priced: bool,
                   unit_micros: int) -> dict[str, Fraction]:
    unit_hours = Fraction(unit_micros, MICROS_PER_HOUR)
    hours = weight * unit_hours
    if kind is LineKind.POOL_USAGE:
        return {"allocated_gpu_hours": hours}
    found = {"charged_gpu_hours": hours,
             "allocated_gpu_hours" if kind is LineKind.BINDING else "reserved_gpu_hours": hours}
    if priced:
        found["cost"] = unit_hours * price
    else:
        found["unpriced_gpu_hours"] = hours
    return found


# Activity is summed the same way: each binding's active and idle GPU-hours, idle cost and
# idle adjustment become integer pairs (numerator, denominator), never reduced per binding;
# a group's pairs are added per denominator and then across denominators (`exact_sum`),
# and become one Fraction per group and field. An idle cost's denominator holds the
# binding's own time held when a rate changes inside it (idle is paid at the average price
# of that time), so these denominators differ binding by binding: a Fraction sum would
# reduce (a GCD) at every addition, seconds per 100,000 bindings.
_Pair = tuple[int, int]


def exact_sum(pairs: Iterable[_Pair]) -> _Pair:
    """Σ numerator ÷ denominator, exactly and unreduced: numerators over one denominator
    are added as integers, then distinct denominators are combined pairwise (a tree, so
    the operands grow together and big products are few). No GCD is taken: reducing is the
    caller's, once (`Fraction(*exact_sum(…))`), or never (`ExactTotals`)."""
    by_denominator: dict[int, int] = defaultdict(int)
    for numerator, denominator in pairs:
        by_denominator[denominator] += numerator
    found = [(n, d) for d, n in by_denominator.items() if n]
    if not found:
        return 0, 1
    while len(found) > 1:
        merged = []
        for (a, b), (c, d) in zip(found[0::2], found[1::2], strict=False):
            merged.append((a + c, b) if b == d else (a * d + c * b, b * d))
        if len(found) % 2:
            merged.append(found[-1])
        found = merged
    return found[0]


@dataclass
class _PaidAt:
    """What the lines paying a binding's time cost, as integer pairs: Σ cost and Σ cost ×
    each rate's idle adjustment, over Σ GPU-hours (the price per GPU-hour idle time is paid
    at is their ratio; a binding may span a rate change, so it is an average)."""

    cost: _Pair = (0, 1)  # Σ price per unit-hour × micros
    adjusted: _Pair = (0, 1)  # the same × the rate's idle adjustment
    gpu_micros: _Pair = (0, 1)  # weight × Σ micros


def _paid_at(lines: list[_Paying], prices: dict[int, tuple[int, int, int, int]]
             ) -> _PaidAt:
    """The sums `_PaidAt` holds for the lines of one source (one binding's, or one pool's:
    one weight and one unit count, so both cancel out of the price per GPU-hour but the
    weight), per docs/billing.md, "Statements": idle cost is idle GPU-hours × the price per
    GPU-hour that time was paid at. `prices` keeps each quote's price and idle adjustment
    as integers (by the quote's id: charge_lines shares one per price)."""
    paid = _PaidAt()
    if not lines:
        return paid
    cost_n, cost_d, adjusted_n, adjusted_d, held = 0, 1, 0, 1, 0
    single = len(lines) == 1
    for line_micros, quote, _ in lines:
        # One line: its price per GPU-hour is its own, whatever its time (1 µs stands for
        # it, and keeps the pairs small and shared by every such binding).
        micros = 1 if single else line_micros
        held += micros
        if quote is None:
            continue
        found = prices.get(id(quote))
        if found is None:
            price, adjustment = quote.price_per_unit_hour, Fraction(quote.rate.idle_adjustment)
            found = prices[id(quote)] = (price.numerator, price.denominator,
                                         price.numerator * adjustment.numerator,
                                         price.denominator * adjustment.denominator)
        pn, pd, an, ad = found
        if pd == cost_d:
            cost_n += pn * micros
        else:
            cost_n, cost_d = cost_n * pd + pn * micros * cost_d, cost_d * pd
        if an:
            if ad == adjusted_d:
                adjusted_n += an * micros
            else:
                adjusted_n, adjusted_d = adjusted_n * ad + an * micros * adjusted_d, \
                    adjusted_d * ad
    weight = lines[0][2]
    paid.cost, paid.adjusted = (cost_n, cost_d), (adjusted_n, adjusted_d)
    paid.gpu_micros = (weight.numerator * held, weight.denominator)
    return paid


def _activity_pairs(binding: BindingInterval, held_micros: int, paid: _PaidAt | None,
                    known: Activity) -> dict[str, _Pair]:
    """A binding's activity, refused when active + idle exceed what it held in the window
    (`held_micros`: the micros of its own lines)."""
    weight = binding.weight
    active, idle = known.active_gpu_hours, known.idle_gpu_hours
    if type(active) is not Fraction or type(idle) is not Fraction:
        active, idle = Fraction(active), Fraction(idle)
    an, ad, inum, iden = active.numerator, active.denominator, idle.numerator, idle.denominator
    # active + idle ≤ weight × held ÷ MICROS_PER_HOUR, multiplied out in integers.
    if an < 0 or inum < 0 or (an * iden + inum * ad) * MICROS_PER_HOUR * weight.denominator \
            > weight.numerator * held_micros * ad * iden:
        allocated = weight * Fraction(held_micros, MICROS_PER_HOUR)
        raise InvalidInput(f"binding {binding.binding_id}: active + idle GPU-hours "
                           f"({float(active + idle):.3f}) exceed its allocated "
                           f"{float(allocated):.3f} in the window", code="invalid_activity")
    found = {"active_gpu_hours": (an, ad), "idle_gpu_hours": (inum, iden)}
    if inum and paid is not None and paid.gpu_micros[0]:
        # idle × Σ cost ÷ Σ GPU-hours; both sums are in unit-micros, so the unit cancels.
        hours_n, hours_d = paid.gpu_micros
        for name, (n, d) in (("idle_cost", paid.cost), ("idle_adjustment", paid.adjusted)):
            found[name] = (inum * n * hours_d, iden * d * hours_n)
    return found


def _add(into: dict[str, Fraction], found: dict[str, Fraction]) -> None:
    for name, value in found.items():
        into[name] = into.get(name, ZERO) + value


def statements(bindings: Iterable[BindingInterval], pools: Iterable[PoolInterval],
               card: RateCard, window: Window, projects: Mapping[str, ProjectInfo],
               activity: Mapping[int, Activity] | None = None, *,
               monthly: bool = False, keep_lines: bool = True) -> dict[str, Statement]:
    """One statement per project in `projects` (an empty one where it held nothing).

    `activity` maps binding ids to their known activity in the window; a binding without
    an entry is all unknown. `keep_lines=False`: the statements' `lines` stay empty (a
    service that keeps totals only saves making 100,000s of line objects).
    """
    bindings, pools = list(bindings), list(pools)
    buckets: dict[_Bucket, _Bucketed] = {}
    project_lines: dict[str, list[ChargeLine]] = defaultdict(list)
    own = _OwnLines()
    for parts in line_fields(bindings, pools, card, window, monthly=monthly):
        kind, source_id, project, flavour, environment, lo, hi, units, weight, quote = parts
        if project not in projects:
            raise InvalidInput(f"project '{project}' has charges but no project record",
                               code="unknown_project", details={"project": project})
        key = (project, flavour, environment, kind, weight.numerator, weight.denominator,
               id(quote))
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = _Bucketed(weight, quote)
        held = hi - lo
        micros = (held.days * 86400 + held.seconds) * 10**6 + held.microseconds
        bucket.unit_micros += units * micros
        if keep_lines:
            project_lines[project].append(ChargeLine(*parts))
        own.add(kind, source_id, (micros, quote, weight))
    fields_by_group: dict[str, dict[Group, dict[str, Fraction]]] = \
        defaultdict(lambda: defaultdict(dict))
    for (project, flavour, environment, kind, *_), bucket in buckets.items():
        priced = bucket.quote is not None
        _add(fields_by_group[project][Group(flavour, environment)],
             _bucket_totals(kind, bucket.weight,
                            bucket.quote.price_per_unit_hour if priced else None, priced,
                            bucket.unit_micros))
    for (project, flavour, environment), pairs in \
            _activity(bindings, own, activity or {}).items():
        _add(fields_by_group[project][Group(flavour, environment)],
             {name: Fraction(*exact_sum(found)) for name, found in pairs.items()})
    return {name: Statement(info, window, card.currency,
                            {group: _totals(found)
                             for group, found in fields_by_group.get(name, {}).items()},
                            tuple(project_lines.get(name, ())))
            for name, info in projects.items()}


# A line as the activity pass needs it: micros, quote, weight.
_Paying = tuple[int, Quote | None, Fraction]


@dataclass
class _OwnLines:
    """Each binding's lines and the micros it held in the window, and each pool's lines:
    what a binding's activity is checked against and its idle time paid at."""

    held_micros: dict[int, int] = field(default_factory=dict)
    bindings: dict[int, list[_Paying]] = field(default_factory=lambda: defaultdict(list))
    pools: dict[int, list[_Paying]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: LineKind, source_id: int, line: _Paying) -> None:
        if kind is LineKind.POOL:
            self.pools[source_id].append(line)
            return
        self.bindings[source_id].append(line)
        self.held_micros[source_id] = self.held_micros.get(source_id, 0) + line[0]


_GroupKey = tuple[str, str, str | None]  # project, flavour, environment


def _activity(bindings: list[BindingInterval], own: _OwnLines,
              activity: Mapping[int, Activity]) -> dict[_GroupKey, dict[str, list[_Pair]]]:
    """Each binding's activity as integer pairs, gathered per project and group."""
    by_id = {binding.binding_id: binding for binding in bindings}
    found: dict[_GroupKey, dict[str, list[_Pair]]] = defaultdict(lambda: defaultdict(list))
    pools_paid: dict[int, _PaidAt] = {}  # a pool's lines pay for each of its bindings
    prices: dict[int, tuple[int, int, int, int]] = {}
    held_micros = own.held_micros
    for binding_id, known in activity.items():
        binding = by_id.get(binding_id)
        if binding is None:
            raise InvalidInput(f"activity for binding {binding_id}, which was not given",
                               code="invalid_activity")
        if not known.active_gpu_hours and not known.idle_gpu_hours:
            continue  # all unknown: nothing to add
        paid = None
        if known.idle_gpu_hours:
            pool_id = binding.pool_id
            if pool_id is None:
                paid = _paid_at(own.bindings.get(binding_id, []), prices)
            else:
                paid = pools_paid.get(pool_id)
                if paid is None:
                    paid = pools_paid[pool_id] = _paid_at(own.pools.get(pool_id, []), prices)
        held = held_micros.get(binding_id, 0)
        pairs = _activity_pairs(binding, held, paid, known)
        if held:
            into = found[(binding.project, binding.flavour, binding.environment)]
            for name, pair in pairs.items():
                into[name].append(pair)
    return found


def _totals(found: dict[str, Fraction]) -> Totals:
    """Unknown is what is allocated and neither active nor idle: never billed as idle."""
    unknown = (found.get("allocated_gpu_hours", ZERO) - found.get("active_gpu_hours", ZERO)
               - found.get("idle_gpu_hours", ZERO))
    return Totals(**found, unknown_gpu_hours=unknown)


ROLL_UP_KEYS = ("organisation", "department", "cost_centre")


def roll_up(project_statements: Iterable[Statement], by: str) -> dict[str | None, Totals]:
    """Totals per organisation, department or cost centre (None: projects without one)."""
    if by not in ROLL_UP_KEYS:
        raise InvalidInput(f"cannot roll up by '{by}' (choose: {', '.join(ROLL_UP_KEYS)})",
                           code="invalid_roll_up")
    found: dict[str | None, Totals] = defaultdict(Totals)
    for statement in project_statements:
        key = getattr(statement.project, by)
        found[key] = found[key] + statement.totals
    return dict(found)
