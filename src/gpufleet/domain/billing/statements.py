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
    charge_lines,
)
from gpufleet.domain.billing.rates import RateCard, round_money
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


def sum_totals(items: Iterable[Totals]) -> Totals:
    total = Totals()
    for item in items:
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
_Bucket = tuple[str, Group, LineKind, Fraction, Fraction | None, bool]


def _bucket(line: ChargeLine) -> _Bucket:
    priced = line.quote is not None
    price = line.quote.price_per_unit_hour if priced else None
    return (line.project, Group(line.flavour, line.environment), line.kind, line.weight,
            price, priced)


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


def _idle_prices(lines: list[ChargeLine]) -> tuple[Fraction, Fraction]:
    """What one idle GPU-hour of these lines costs, and what their rates' idle adjustments
    add to it: averages over the lines' GPU-hours (a binding may span a rate change)."""
    hours = sum((line.gpu_hours for line in lines), ZERO)
    if not hours:
        return ZERO, ZERO
    cost = adjustment = ZERO
    for line in lines:
        if line.quote is None:
            continue
        line_cost = line.cost or ZERO
        cost += line_cost
        adjustment += line_cost * Fraction(line.quote.rate.idle_adjustment)
    return cost / hours, adjustment / hours


def _activity_fields(binding: BindingInterval, own: list[ChargeLine], paid: list[ChargeLine],
                     known: Activity) -> dict[str, Fraction]:
    allocated = binding.weight * Fraction(sum(line.micros for line in own), MICROS_PER_HOUR)
    active, idle = Fraction(known.active_gpu_hours), Fraction(known.idle_gpu_hours)
    if active < 0 or idle < 0 or active + idle > allocated:
        raise InvalidInput(f"binding {binding.binding_id}: active + idle GPU-hours "
                           f"({float(active + idle):.3f}) exceed its allocated "
                           f"{float(allocated):.3f} in the window", code="invalid_activity")
    price, adjustment = _idle_prices(paid) if idle else (ZERO, ZERO)
    return {"active_gpu_hours": active, "idle_gpu_hours": idle, "idle_cost": idle * price,
            "idle_adjustment": idle * adjustment}


def _add(into: dict[str, Fraction], found: dict[str, Fraction]) -> None:
    for name, value in found.items():
        into[name] = into.get(name, ZERO) + value


def statements(bindings: Iterable[BindingInterval], pools: Iterable[PoolInterval],
               card: RateCard, window: Window, projects: Mapping[str, ProjectInfo],
               activity: Mapping[int, Activity] | None = None, *,
               monthly: bool = False) -> dict[str, Statement]:
    """One statement per project in `projects` (an empty one where it held nothing).

    `activity` maps binding ids to their known activity in the window; a binding without
    an entry is all unknown.
    """
    bindings, pools = list(bindings), list(pools)
    lines = charge_lines(bindings, pools, card, window, monthly=monthly)
    buckets: dict[_Bucket, int] = defaultdict(int)
    project_lines: dict[str, list[ChargeLine]] = defaultdict(list)
    by_source: dict[tuple[LineKind, int], list[ChargeLine]] = defaultdict(list)
    for line in lines:
        if line.project not in projects:
            raise InvalidInput(f"project '{line.project}' has charges but no project record",
                               code="unknown_project", details={"project": line.project})
        buckets[_bucket(line)] += line.units * line.micros
        project_lines[line.project].append(line)
        by_source[(line.kind, line.source_id)].append(line)
    fields_by_group: dict[str, dict[Group, dict[str, Fraction]]] = \
        defaultdict(lambda: defaultdict(dict))
    for (project, group, kind, weight, price, priced), micros in buckets.items():
        _add(fields_by_group[project][group],
             _bucket_totals(kind, weight, price, priced, micros))
    _add_activity(fields_by_group, bindings, by_source, activity or {})
    return {name: Statement(info, window, card.currency,
                            {group: _totals(found)
                             for group, found in fields_by_group.get(name, {}).items()},
                            tuple(project_lines.get(name, ())))
            for name, info in projects.items()}


def _add_activity(fields_by_group: dict[str, dict[Group, dict[str, Fraction]]],
                  bindings: list[BindingInterval],
                  by_source: dict[tuple[LineKind, int], list[ChargeLine]],
                  activity: Mapping[int, Activity]) -> None:
    by_id = {binding.binding_id: binding for binding in bindings}
    for binding_id, known in activity.items():
        binding = by_id.get(binding_id)
        if binding is None:
            raise InvalidInput(f"activity for binding {binding_id}, which was not given",
                               code="invalid_activity")
        kind = LineKind.BINDING if binding.pool_id is None else LineKind.POOL_USAGE
        own = by_source.get((kind, binding_id), [])
        paid = own if binding.pool_id is None else by_source.get((LineKind.POOL,
                                                                  binding.pool_id), [])
        if not known.active_gpu_hours and not known.idle_gpu_hours:
            continue  # all unknown: nothing to add
        found = _activity_fields(binding, own, paid, known)
        if own:
            _add(fields_by_group[binding.project][Group(binding.flavour, binding.environment)],
                 found)


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
