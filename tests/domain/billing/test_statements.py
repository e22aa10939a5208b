"""Statements by hand: allocated vs charged, activity and idle cost, roll-ups."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from gpufleet.domain.billing.charges import BindingInterval, PoolInterval, Window
from gpufleet.domain.billing.rates import Rate, RateCard
from gpufleet.domain.billing.statements import Activity, ProjectInfo, roll_up, statements
from gpufleet.domain.errors import InvalidInput

JAN = datetime(2026, 1, 1, tzinfo=UTC)
H = timedelta(hours=1)
DAY = Window(JAN, JAN + 24 * H)
CARD = RateCard("EUR", (Rate("H100-80GB", Decimal("4.00"), JAN),
                        Rate("H100-80GB", Decimal("6.00"), JAN, environment="aws")))
PROJECTS = {
    "vision": ProjectInfo("vision", "Acme", "Research", "CC-100"),
    "speech": ProjectInfo("speech", "Acme", "Research", "CC-200"),
    "ops": ProjectInfo("ops", "Acme", None, None),
}


def binding(binding_id, project, start, end, *, environment="lab", flavour="H100-80GB",
            weight=Fraction(1), pool_id=None):
    return BindingInterval(binding_id, project, flavour, environment, weight, start, end,
                           pool_id)


def test_allocated_counts_every_binding_and_charged_counts_what_is_paid_for():
    # vision: a 2-unit pool for 10 h (20 GPU-hours, 80.00) used 5 h by one of its bindings,
    # plus 3 h outside the pool in aws at 6.00 (18.00).
    pool = PoolInterval(1, "vision", "H100-80GB", 2, Fraction(1), JAN, JAN + 10 * H)
    result = statements([binding(1, "vision", JAN, JAN + 5 * H, pool_id=1),
                         binding(2, "vision", JAN, JAN + 3 * H, environment="aws")],
                        [pool], CARD, DAY, PROJECTS)
    vision = result["vision"].totals
    assert vision.allocated_gpu_hours == 8
    assert vision.reserved_gpu_hours == 20
    assert vision.charged_gpu_hours == 23
    assert vision.cost == 98
    assert vision.rounded("EUR")["total_cost"] == Decimal("98.00")
    by_environment = result["vision"].by(lambda group: group.environment)
    assert by_environment["aws"].cost == 18


def test_unknown_activity_is_never_billed_as_idle():
    # 10 GPU-hours: 6 active, 2 idle, the rest unknown. Idle cost = 2 × 4.00 = 8.00.
    result = statements([binding(1, "vision", JAN, JAN + 10 * H)], [], CARD, DAY, PROJECTS,
                        {1: Activity(Fraction(6), Fraction(2))})
    totals = result["vision"].totals
    assert (totals.active_gpu_hours, totals.idle_gpu_hours, totals.unknown_gpu_hours) \
        == (6, 2, 2)
    assert totals.idle_cost == 8
    assert totals.efficiency == Fraction(3, 4)


def test_a_binding_without_activity_is_all_unknown_and_has_no_efficiency():
    totals = statements([binding(1, "vision", JAN, JAN + 10 * H)], [], CARD, DAY,
                        PROJECTS)["vision"].totals
    assert totals.unknown_gpu_hours == 10 and totals.idle_cost == 0
    assert totals.efficiency is None


def test_idle_time_inside_a_pool_costs_the_pools_price():
    pool = PoolInterval(1, "vision", "H100-80GB", 1, Fraction(1), JAN, JAN + 10 * H)
    totals = statements([binding(1, "vision", JAN, JAN + 10 * H, pool_id=1)], [pool], CARD,
                        DAY, PROJECTS, {1: Activity(idle_gpu_hours=Fraction(3))})["vision"].totals
    assert totals.cost == 40 and totals.idle_cost == 12


def test_a_rates_idle_surcharge_adds_to_the_total():
    surcharged = RateCard("EUR", tuple(replace(rate, idle_adjustment=Decimal("0.5"))
                                       for rate in CARD.rates))
    totals = statements([binding(1, "vision", JAN, JAN + 10 * H)], [], surcharged, DAY,
                        PROJECTS, {1: Activity(idle_gpu_hours=Fraction(2))})["vision"].totals
    assert (totals.cost, totals.idle_cost, totals.idle_adjustment, totals.total_cost) \
        == (40, 8, 4, 44)


def test_idle_across_a_rate_change_pays_each_rates_own_adjustment():
    """10 h held: 5 h at 4.00 with a 50 % surcharge, 5 h at 6.00 with a 10 % discount. Idle
    is known for the whole window, not per hour, so it is priced at the binding's average:
    (4 + 6) / 2 = 5.00 per idle GPU-hour, and (4 × 0.5 + 6 × -0.1) / 2 = 0.70 added."""
    mid = JAN + 5 * H
    card = RateCard("EUR", (Rate("H100-80GB", Decimal("4.00"), JAN, mid,
                                 idle_adjustment=Decimal("0.5")),
                            Rate("H100-80GB", Decimal("6.00"), mid,
                                 idle_adjustment=Decimal("-0.1"))))
    totals = statements([binding(1, "vision", JAN, JAN + 10 * H)], [], card, DAY, PROJECTS,
                        {1: Activity(idle_gpu_hours=Fraction(4))})["vision"].totals
    assert (totals.cost, totals.idle_cost, totals.idle_adjustment) \
        == (50, 20, Fraction(28, 10))


def test_activity_beyond_the_bindings_time_is_refused():
    with pytest.raises(InvalidInput, match="binding 1") as refused:
        statements([binding(1, "vision", JAN, JAN + H)], [], CARD, DAY, PROJECTS,
                   {1: Activity(Fraction(1), Fraction(1))})
    assert refused.value.code == "invalid_activity"


def test_activity_for_a_binding_that_was_not_given_is_refused():
    with pytest.raises(InvalidInput, match="binding 9"):
        statements([binding(1, "vision", JAN, JAN + H)], [], CARD, DAY, PROJECTS,
                   {9: Activity(Fraction(1))})


def test_activity_outside_the_window_is_refused_not_dropped():
    with pytest.raises(InvalidInput, match="binding 1"):
        statements([binding(1, "vision", JAN - 2 * H, JAN - H)], [], CARD, DAY, PROJECTS,
                   {1: Activity(idle_gpu_hours=Fraction(1))})


def test_a_project_that_held_nothing_gets_an_empty_statement():
    result = statements([binding(1, "vision", JAN, JAN + H)], [], CARD, DAY, PROJECTS)
    assert result["ops"].lines == () and result["ops"].totals.cost == 0


def test_charges_of_a_project_without_a_record_are_refused():
    with pytest.raises(InvalidInput, match="'ghost'"):
        statements([binding(1, "ghost", JAN, JAN + H)], [], CARD, DAY, PROJECTS)


def test_statements_roll_up_by_department_organisation_and_cost_centre():
    result = statements([binding(1, "vision", JAN, JAN + H), binding(2, "speech", JAN, JAN + 2 * H),
                         binding(3, "ops", JAN, JAN + 4 * H)], [], CARD, DAY, PROJECTS)
    by_department = roll_up(result.values(), "department")
    assert {key: totals.cost for key, totals in by_department.items()} \
        == {"Research": 12, None: 16}
    assert roll_up(result.values(), "organisation")["Acme"].allocated_gpu_hours == 7
    assert roll_up(result.values(), "cost_centre")["CC-200"].cost == 8
    with pytest.raises(InvalidInput, match="'team'"):
        roll_up(result.values(), "team")


def test_a_statement_breaks_down_by_model_and_profile():
    seven = RateCard("EUR", (Rate("H100-80GB", Decimal("7.00"), JAN),))
    result = statements([binding(1, "vision", JAN, JAN + 7 * H, flavour="H100-80GB/1g.10gb",
                                 weight=Fraction(1, 7)),
                         binding(2, "vision", JAN, JAN + H)], [], seven, DAY, PROJECTS)
    by_model = result["vision"].by(lambda group: group.model)
    by_profile = result["vision"].by(lambda group: group.profile)
    assert by_model["H100-80GB"].allocated_gpu_hours == 2
    assert by_profile["1g.10gb"].cost == 7 and by_profile[None].cost == 7
