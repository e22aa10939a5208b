"""Property tests over random binding histories (issue 16, "Conservation, tested").

Histories are built GPU by GPU, slot by slot: a whole GPU has one slot of weight 1, a MIG GPU
up to seven 1g.10gb slots of 1/7, a shared GPU slots whose milli sum to at most 1000; each
slot holds a sequence of non-overlapping bindings. So the bindings respect capacity by
construction, as the lifecycle's do.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.billing.charges import (
    BindingInterval,
    LineKind,
    PoolInterval,
    Window,
    charge_lines,
)
from gpufleet.domain.billing.rates import (
    Rate,
    RateCard,
    minor_units,
    round_money,
    round_money_ratio,
)
from gpufleet.domain.billing.statements import (
    ROLL_UP_KEYS,
    TOTALS_FIELDS,
    Activity,
    ExactTotals,
    ProjectInfo,
    roll_up,
    statements,
    sum_totals,
)

T0 = datetime(2026, 1, 20, tzinfo=UTC)
SPAN_S = 60 * 86400  # crosses two month starts
PROJECTS = {name: ProjectInfo(name, "Acme", department)
            for name, department in (("a", "R&D"), ("b", "R&D"), ("c", None))}
ENVIRONMENTS = ("lab", "aws")
POOL_IDS = {name: index for index, name in enumerate(PROJECTS, start=1)}
WINDOW = Window(T0, T0 + timedelta(seconds=SPAN_S))
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None)

moments = st.integers(min_value=-86400, max_value=SPAN_S + 86400)
prices = st.decimals(min_value=0, max_value=50, places=2)


def at(offset_s: int) -> datetime:
    return T0 + timedelta(seconds=offset_s)


@st.composite
def rate_cards(draw) -> RateCard:
    rates: list[Rate] = []
    for key, environment in (("H100-80GB", None), ("H100-80GB", "aws"),
                             ("H100-80GB/1g.10gb", None), ("H100-80GB/shared", "lab")):
        if not draw(st.booleans()):
            continue
        edges = sorted(set(draw(st.lists(moments, min_size=1, max_size=4))))
        open_end = draw(st.booleans())
        for start, end in zip(edges, [*edges[1:], None], strict=True):
            if end is None and not open_end:
                break
            rates.append(Rate(key, draw(prices), at(start),
                              None if end is None else at(end), environment))
    return RateCard("EUR", tuple(rates))


@st.composite
def slot_history(draw, weight: Fraction, flavour: str, gpu: str, environment: str,
                 next_id: list[int]) -> list[BindingInterval]:
    cuts = sorted(set(draw(st.lists(moments, max_size=6))))
    found = []
    for start, end in zip(cuts[0::2], cuts[1::2], strict=False):
        project = draw(st.sampled_from(sorted(PROJECTS)))
        in_pool = draw(st.booleans())
        next_id[0] += 1
        found.append(BindingInterval(next_id[0], project, flavour, environment, weight,
                                     at(start), at(end), POOL_IDS[project] if in_pool else None,
                                     gpu))
    if len(cuts) % 2 == 1 and draw(st.booleans()):  # still held
        next_id[0] += 1
        project = draw(st.sampled_from(sorted(PROJECTS)))
        found.append(BindingInterval(next_id[0], project, flavour, environment, weight,
                                     at(cuts[-1]), None, None, gpu))
    return found


@st.composite
def histories(draw) -> tuple[list[BindingInterval], list[PoolInterval]]:
    bindings: list[BindingInterval] = []
    next_id = [0]
    for index in range(draw(st.integers(min_value=1, max_value=4))):
        gpu, environment = f"gpu-{index}", draw(st.sampled_from(ENVIRONMENTS))
        kind = draw(st.sampled_from(("whole", "mig", "shared")))
        if kind == "whole":
            slots = [(Fraction(1), "H100-80GB")]
        elif kind == "mig":
            slots = [(Fraction(1, 7), "H100-80GB/1g.10gb")] * draw(st.integers(1, 7))
        else:
            milli = draw(st.lists(st.integers(1, 1000), min_size=1, max_size=4)
                         .filter(lambda shares: sum(shares) <= 1000))
            slots = [(Fraction(m, 1000), "H100-80GB/shared") for m in milli]
        for weight, flavour in slots:
            bindings += draw(slot_history(weight, flavour, gpu, environment, next_id))
    pools = []
    for project in PROJECTS:
        start, end = sorted(draw(st.lists(moments, min_size=2, max_size=2)))
        pools.append(PoolInterval(POOL_IDS[project], project, "H100-80GB",
                                  draw(st.integers(1, 8)), Fraction(1), at(start),
                                  draw(st.sampled_from((at(end), None)))))
    return bindings, pools


def sums(lines) -> dict[LineKind, tuple[Fraction, Fraction]]:
    found: dict[LineKind, tuple[Fraction, Fraction]] = defaultdict(lambda: (Fraction(0),) * 2)
    for line in lines:
        hours, cost = found[line.kind]
        found[line.kind] = (hours + line.gpu_hours, cost + (line.cost or 0))
    return dict(found)


def overlap_hours(start: datetime, end: datetime | None, window: Window) -> Fraction:
    lo, hi = max(start, window.start), min(end or window.end, window.end)
    return Fraction(max(0, int((hi - lo).total_seconds())), 3600)


@PROPERTY_SETTINGS
@given(histories(), rate_cards(), st.lists(st.integers(1, SPAN_S - 1), max_size=5),
       st.booleans())
def test_any_partition_of_the_window_sums_to_the_whole(history, card, cuts, monthly):
    bindings, pools = history
    whole = sums(charge_lines(bindings, pools, card, WINDOW))
    edges = [T0, *sorted({at(c) for c in cuts}), WINDOW.end]
    parts: list = []
    for lo, hi in pairwise(edges):
        parts += charge_lines(bindings, pools, card, Window(lo, hi), monthly=monthly)
    assert sums(parts) == whole


@PROPERTY_SETTINGS
@given(histories(), rate_cards())
def test_the_sum_over_projects_is_the_funnels_allocated_gpu_hours(history, card):
    bindings, pools = history
    result = statements(bindings, pools, card, WINDOW, PROJECTS, monthly=True)
    funnel_allocated = sum((b.weight * overlap_hours(b.start, b.end, WINDOW)
                            for b in bindings), Fraction(0))
    reserved = sum((p.count * p.unit_weight * overlap_hours(p.approved_at, p.ended_at, WINDOW)
                    for p in pools), Fraction(0))
    totals = [statement.totals for statement in result.values()]
    assert sum(t.allocated_gpu_hours for t in totals) == funnel_allocated
    assert sum(t.reserved_gpu_hours for t in totals) == reserved
    assert sum(t.unknown_gpu_hours for t in totals) == funnel_allocated  # no activity given


@PROPERTY_SETTINGS
@given(histories(), rate_cards(), st.integers(0, SPAN_S - 3600), st.integers(3600, 7 * 86400))
def test_a_gpus_concurrent_shares_never_exceed_one_gpu_hour_per_hour(history, card, start,
                                                                      length):
    bindings, _ = history
    window = Window(at(start), at(start) + timedelta(seconds=length))
    outside = [replace(b, pool_id=None) for b in bindings]
    per_gpu: dict[str, Fraction] = defaultdict(Fraction)
    for line in charge_lines(outside, [], card, window):
        gpu = next(b.gpu for b in outside if b.binding_id == line.source_id)
        per_gpu[gpu] += line.gpu_hours
    assert all(hours <= Fraction(length, 3600) for hours in per_gpu.values())


@PROPERTY_SETTINGS
@given(histories(), rate_cards())
def test_a_pools_own_usage_is_never_charged_twice(history, card):
    bindings, pools = history
    without_pool_usage = [b for b in bindings if b.pool_id is None]
    everything = statements(bindings, pools, card, WINDOW, PROJECTS)
    charged_only = statements(without_pool_usage, pools, card, WINDOW, PROJECTS)
    line_cost = sum(line.cost or 0 for line in charge_lines(bindings, pools, card, WINDOW))
    assert line_cost == sum(line.cost or 0
                            for line in charge_lines(without_pool_usage, pools, card, WINDOW))
    for name in PROJECTS:
        assert everything[name].totals.cost == charged_only[name].totals.cost
        assert everything[name].totals.charged_gpu_hours \
            == charged_only[name].totals.charged_gpu_hours


@PROPERTY_SETTINGS
@given(histories(), st.integers(1, SPAN_S - 1), prices)
def test_splitting_a_rate_at_any_moment_changes_no_cost(history, split, price):
    bindings, pools = history
    one = RateCard("EUR", (Rate("H100-80GB", price, at(-86400)),))
    two = RateCard("EUR", (Rate("H100-80GB", price, at(-86400), at(split)),
                           Rate("H100-80GB", price, at(split))))
    assert sums(charge_lines(bindings, pools, one, WINDOW)) \
        == sums(charge_lines(bindings, pools, two, WINDOW))


@PROPERTY_SETTINGS
@given(histories(), rate_cards(), st.data())
def test_active_idle_and_unknown_add_up_and_roll_ups_lose_nothing(history, card, data):
    bindings, pools = history
    activity = {}
    for b in bindings:
        held = b.weight * overlap_hours(b.start, b.end, WINDOW)
        active = held * Fraction(data.draw(st.integers(0, 4)), 4)
        idle = (held - active) * Fraction(data.draw(st.integers(0, 4)), 4)
        activity[b.binding_id] = Activity(active, idle)
    result = statements(bindings, pools, card, WINDOW, PROJECTS, activity)
    totals = sum_totals(statement.totals for statement in result.values())
    assert totals.active_gpu_hours + totals.idle_gpu_hours + totals.unknown_gpu_hours \
        == totals.allocated_gpu_hours
    assert totals.unknown_gpu_hours >= 0
    for by in ROLL_UP_KEYS:
        assert sum_totals(roll_up(result.values(), by).values()) == totals


def reference_statements(bindings, pools, card, window, projects, activity):
    """The statements computed the straightforward way, line by line and binding by
    binding in `Fraction`s, with each line's rate found by scanning the card: what the
    bucketed, integer fast path of `statements` must equal exactly."""
    def scanned(key, environment, moment):
        found = [r for r in card.rates if r.key == key and r.in_force(moment)]
        own = [r for r in found if r.environment == environment]
        return (own or [r for r in found if r.environment is None] or [None])[0]

    fields = defaultdict(lambda: defaultdict(Fraction))
    lines = charge_lines(bindings, pools, card, window)
    for line in lines:
        quote = line.quote
        if quote is not None:  # the quote's rate is the one a scan of the card finds
            model = line.flavour.partition("/")[0]
            assert quote.rate in (scanned(line.flavour, line.environment, line.start),
                                  scanned(model, line.environment, line.start))
        into = fields[(line.project, line.flavour, line.environment)]
        into["allocated" if line.kind is not LineKind.POOL else "reserved"] += line.gpu_hours
        if line.kind is not LineKind.POOL_USAGE:
            into["charged"] += line.gpu_hours
            if quote is None:
                into["unpriced"] += line.gpu_hours
            else:
                into["cost"] += line.cost
    for binding in bindings:
        known = activity.get(binding.binding_id)
        own = [line for line in lines if line.source_id == binding.binding_id
               and line.kind is not LineKind.POOL]
        if known is None or not own:
            continue
        paid = own if binding.pool_id is None else [
            line for line in lines if line.kind is LineKind.POOL
            and line.source_id == binding.pool_id]
        hours = sum((line.gpu_hours for line in paid), Fraction(0))
        cost = sum((line.cost for line in paid if line.quote), Fraction(0))
        adjusted = sum((line.cost * Fraction(line.quote.rate.idle_adjustment)
                        for line in paid if line.quote), Fraction(0))
        into = fields[(binding.project, binding.flavour, binding.environment)]
        into["active"] += known.active_gpu_hours
        into["idle"] += known.idle_gpu_hours
        if hours:
            into["idle_cost"] += known.idle_gpu_hours * cost / hours
            into["idle_adjustment"] += known.idle_gpu_hours * adjusted / hours
    return {key: dict(found) for key, found in fields.items()}


def as_reference(result) -> dict:
    names = {"allocated": "allocated_gpu_hours", "reserved": "reserved_gpu_hours",
             "charged": "charged_gpu_hours", "unpriced": "unpriced_gpu_hours",
             "cost": "cost", "active": "active_gpu_hours", "idle": "idle_gpu_hours",
             "idle_cost": "idle_cost", "idle_adjustment": "idle_adjustment"}
    return {(name, group.flavour, group.environment):
            {short: getattr(totals, long) for short, long in names.items()
             if getattr(totals, long)}
            for name, statement in result.items()
            for group, totals in statement.groups.items()}


@PROPERTY_SETTINGS
@given(histories(), rate_cards(), st.data())
def test_the_fast_statement_equals_the_straightforward_sum(history, card, data):
    bindings, pools = history
    card = RateCard(card.currency, tuple(  # each rate with its own idle adjustment
        replace(rate, idle_adjustment=Decimal(data.draw(st.sampled_from(
            ("0", "0.25", "-0.5", "0.125"))))) for rate in card.rates))
    activity = {}
    for b in bindings:
        if data.draw(st.booleans()):
            held = b.weight * overlap_hours(b.start, b.end, WINDOW)
            active = held * Fraction(data.draw(st.integers(0, 7)), 7)
            activity[b.binding_id] = Activity(
                active, (held - active) * Fraction(data.draw(st.integers(0, 3)), 3))
    fast = as_reference(statements(bindings, pools, card, WINDOW, PROJECTS, activity))
    slow = {key: {name: value for name, value in found.items() if value}
            for key, found in reference_statements(bindings, pools, card, WINDOW, PROJECTS,
                                                   activity).items()}
    assert fast == {key: found for key, found in slow.items() if found}
    assert as_reference(statements(bindings, pools, card, WINDOW, PROJECTS, activity,
                                   keep_lines=False)) == fast


@PROPERTY_SETTINGS
@given(histories(), rate_cards(), st.data())
def test_an_unreduced_sum_reads_as_the_reduced_one(history, card, data):
    """Views sum projects as `ExactTotals` (never reduced): floats, rounded money and
    efficiency must be exactly the reduced `sum_totals`'."""
    bindings, pools = history
    activity = {}
    for b in bindings:
        held = b.weight * overlap_hours(b.start, b.end, WINDOW)
        active = held * Fraction(data.draw(st.integers(0, 5)), 5)
        activity[b.binding_id] = Activity(active, (held - active) / 3)
    result = statements(bindings, pools, card, WINDOW, PROJECTS, activity)
    reduced = sum_totals(statement.totals for statement in result.values())
    unreduced = ExactTotals.of(statement.totals for statement in result.values())
    for name in TOTALS_FIELDS:
        assert unreduced.fraction(name) == getattr(reduced, name)
        assert unreduced.float(name) == float(getattr(reduced, name))
    for currency in ("EUR", "JPY", "KWD"):
        assert unreduced.rounded(currency) == reduced.rounded(currency)
    assert unreduced.efficiency == reduced.efficiency


@given(st.integers(-10**30, 10**30), st.integers(1, 10**12), st.integers(1, 10**6),
       st.sampled_from(("EUR", "JPY", "KWD")))
def test_rounding_an_unreduced_ratio_is_rounding_its_fraction(numerator, denominator, scale,
                                                             currency):
    assert round_money_ratio(numerator * scale, denominator * scale, currency) \
        == round_money(Fraction(numerator, denominator), currency)
    half = Fraction(2 * numerator + 1, 2 * 10 ** minor_units(currency))  # a tie
    assert round_money_ratio(half.numerator * scale, half.denominator * scale, currency) \
        == round_money(half, currency)
