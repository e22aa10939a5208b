"""Charge lines by hand: one worked example per rule."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from gpufleet.domain.billing.charges import (
    BindingInterval,
    LineKind,
    PoolInterval,
    Window,
    charge_lines,
    month_starts,
)
from gpufleet.domain.billing.rates import Rate, RateCard
from gpufleet.domain.errors import InvalidInput

JAN = datetime(2026, 1, 1, tzinfo=UTC)
FEB = datetime(2026, 2, 1, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)
H = timedelta(hours=1)
CARD = RateCard("EUR", (Rate("H100-80GB", Decimal("4.00"), JAN, FEB),
                        Rate("H100-80GB", Decimal("3.00"), FEB)))
Q1 = Window(JAN, datetime(2026, 4, 1, tzinfo=UTC))


def binding(start, end, *, binding_id=1, project="vision", flavour="H100-80GB",
            weight=Fraction(1), pool_id=None, environment="lab"):
    return BindingInterval(binding_id, project, flavour, environment, weight, start, end,
                           pool_id)


def test_a_binding_is_charged_for_exactly_the_seconds_it_was_held():
    # 90 minutes and 1 second of a whole H100 at 4.00/h: 1.5002777… GPU-hours, 6.00111… EUR.
    [line] = charge_lines([binding(JAN + 2 * H, JAN + 3.5 * H + timedelta(seconds=1))], [],
                          CARD, Q1)
    assert line.kind is LineKind.BINDING
    assert line.gpu_hours == Fraction(5401, 3600)
    assert line.cost == Fraction(5401, 3600) * 4


def test_microseconds_count_exactly():
    [line] = charge_lines([binding(JAN, JAN + timedelta(microseconds=1800))], [], CARD, Q1)
    assert line.gpu_hours == Fraction(1800, 10**6 * 3600)


def test_a_binding_across_a_rate_change_is_cut_and_priced_on_each_side():
    # 2 h before 1 Feb at 4.00 and 1 h after at 3.00: 3 GPU-hours, 11.00 EUR.
    lines = charge_lines([binding(FEB - 2 * H, FEB + H)], [], CARD, Q1)
    assert [(line.gpu_hours, line.cost) for line in lines] == [(2, 8), (1, 3)]


def test_the_window_clips_and_an_open_binding_runs_to_the_windows_end():
    window = Window(JAN + 10 * H, JAN + 20 * H)
    lines = charge_lines([binding(JAN, JAN + 12 * H),
                          binding(JAN + 18 * H, None, binding_id=2)], [], CARD, window)
    assert [line.gpu_hours for line in lines] == [2, 2]
    assert charge_lines([binding(JAN, JAN + 10 * H)], [], CARD, window) == []


def test_monthly_statements_cut_at_month_starts_even_without_a_rate_change():
    flat = RateCard("EUR", (Rate("H100-80GB", Decimal("4.00"), JAN),))
    lines = charge_lines([binding(FEB - H, FEB + 3 * H)], [], flat, Q1, monthly=True)
    assert [(line.start, line.end) for line in lines] == [(FEB - H, FEB), (FEB, FEB + 3 * H)]
    assert month_starts(Q1) == {FEB, MAR}


def test_a_mig_binding_is_charged_by_its_weight():
    # 1g.10gb = 1/7 of an H100 at 7.00: 7 hours held = 1 GPU-hour, 7.00 EUR.
    seven = RateCard("EUR", (Rate("H100-80GB", Decimal("7.00"), JAN),))
    [line] = charge_lines([binding(JAN, JAN + 7 * H, flavour="H100-80GB/1g.10gb",
                                   weight=Fraction(1, 7))], [], seven, Q1)
    assert (line.gpu_hours, line.cost) == (1, 7)


def test_a_pool_is_paid_from_approval_to_end_used_or_not_and_its_own_bindings_are_free():
    # 4 H100s reserved for 10 h at 4.00 = 160.00; a binding of the pool's request adds 3
    # GPU-hours of usage and no cost; a binding outside the pool is charged on its own.
    pool = PoolInterval(7, "vision", "H100-80GB", 4, Fraction(1), JAN, JAN + 10 * H)
    lines = charge_lines([binding(JAN + H, JAN + 4 * H, pool_id=7),
                          binding(JAN + H, JAN + 2 * H, binding_id=2)], [pool], CARD, Q1)
    by_kind = {line.kind: line for line in lines}
    assert (by_kind[LineKind.POOL].gpu_hours, by_kind[LineKind.POOL].cost) == (40, 160)
    assert (by_kind[LineKind.POOL_USAGE].gpu_hours, by_kind[LineKind.POOL_USAGE].cost) == (3, 0)
    assert (by_kind[LineKind.BINDING].gpu_hours, by_kind[LineKind.BINDING].cost) == (1, 4)


def test_a_binding_of_a_pool_that_was_not_given_is_refused():
    with pytest.raises(InvalidInput, match="pool 9") as refused:
        charge_lines([binding(JAN, JAN + H, pool_id=9)], [], CARD, Q1)
    assert refused.value.code == "missing_pool"


def test_time_no_rate_prices_has_no_cost_rather_than_a_guess():
    [line] = charge_lines([binding(JAN, JAN + H, flavour="A100-80GB")], [], CARD, Q1)
    assert line.quote is None and line.cost is None and line.gpu_hours == 1


@pytest.mark.parametrize(("make", "problem"), [
    (lambda: Window(FEB, JAN), "end after"),
    (lambda: Window(datetime(2026, 1, 1), FEB), "time zones"),
    (lambda: charge_lines([binding(FEB, JAN)], [], CARD, Q1), "ends before"),
])
def test_bad_windows_and_intervals_are_refused(make, problem):
    with pytest.raises(InvalidInput, match=problem):
        make()
