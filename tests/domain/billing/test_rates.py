"""Rate cards by hand: periods, fallbacks, validation and the one rounding."""

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest

from gpufleet.domain.billing.rates import Rate, RateCard, round_money, unit_weight
from gpufleet.domain.errors import InvalidInput

JAN = datetime(2026, 1, 1, tzinfo=UTC)
FEB = datetime(2026, 2, 1, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)


def card(*rates: Rate, currency: str = "EUR") -> RateCard:
    return RateCard(currency, rates)


def test_a_rate_is_in_force_from_its_start_until_just_before_its_end():
    h100 = card(Rate("H100-80GB", Decimal("4.00"), JAN, FEB),
                Rate("H100-80GB", Decimal("3.50"), FEB))
    assert h100.rate_at("H100-80GB", "lab", JAN).price_per_unit_hour == 4
    assert h100.rate_at("H100-80GB", "lab", FEB).price_per_unit_hour == Fraction("3.5")
    assert h100.rate_at("H100-80GB", "lab", datetime(2025, 12, 31, tzinfo=UTC)) is None


def test_an_environment_rate_wins_over_the_rate_for_any_environment():
    both = card(Rate("H100-80GB", Decimal("4.00"), JAN),
                Rate("H100-80GB", Decimal("9.80"), JAN, environment="aws"))
    assert both.rate_at("H100-80GB", "aws", JAN).price_per_unit_hour == Fraction("9.8")
    assert both.rate_at("H100-80GB", "lab", JAN).price_per_unit_hour == 4
    assert both.rate_at("H100-80GB", None, JAN).price_per_unit_hour == 4


def test_a_mig_profile_without_a_price_pays_its_model_price_times_its_weight():
    # 1g.10gb on an H100: max(1/7 compute, 1/8 memory) = 1/7 of 7.00 = 1.00 an hour.
    h100 = card(Rate("H100-80GB", Decimal("7.00"), JAN))
    quote = h100.rate_at("H100-80GB/1g.10gb", "lab", JAN)
    assert unit_weight("H100-80GB/1g.10gb") == Fraction(1, 7)
    assert quote.price_per_unit_hour == 1 and quote.derived == "mig-weight"


def test_an_explicit_mig_price_wins_over_the_weight():
    priced = card(Rate("H100-80GB", Decimal("7.00"), JAN),
                  Rate("H100-80GB/1g.10gb", Decimal("1.25"), JAN))
    quote = priced.rate_at("H100-80GB/1g.10gb", "lab", JAN)
    assert quote.price_per_unit_hour == Fraction("1.25") and quote.derived == "explicit"


def test_a_shared_unit_pays_the_model_price_or_the_shared_price_times_its_milli():
    l40s = card(Rate("L40S-48GB", Decimal("2.00"), JAN))
    assert l40s.rate_at("L40S-48GB/shared", "lab", JAN, Fraction(250, 1000)) \
        .price_per_unit_hour == Fraction(1, 2)
    cheaper = card(Rate("L40S-48GB", Decimal("2.00"), JAN),
                   Rate("L40S-48GB/shared", Decimal("1.60"), JAN))
    assert cheaper.rate_at("L40S-48GB/shared", "lab", JAN, Fraction(1, 2)) \
        .price_per_unit_hour == Fraction("0.8")


def test_overlapping_periods_for_one_flavour_and_environment_are_refused():
    with pytest.raises(InvalidInput, match="overlap") as refused:
        card(Rate("H100-80GB", Decimal("4"), JAN, MAR), Rate("H100-80GB", Decimal("5"), FEB))
    assert refused.value.code == "overlapping_rates"
    with pytest.raises(InvalidInput, match="overlap"):
        card(Rate("H100-80GB", Decimal("4"), JAN), Rate("H100-80GB", Decimal("5"), FEB, MAR))


def test_adjacent_periods_and_other_environments_do_not_overlap():
    card(Rate("H100-80GB", Decimal("4"), JAN, FEB), Rate("H100-80GB", Decimal("5"), FEB),
         Rate("H100-80GB", Decimal("9"), JAN, environment="aws"))


@pytest.mark.parametrize(("make", "problem"), [
    (lambda: RateCard("euro"), "ISO 4217"),
    (lambda: Rate("H100-80GB", Decimal("1"), JAN, idle_adjustment=Decimal("-1.5")),
     "at most 100 %"),
    (lambda: Rate("H200-141GB/9g.99gb", Decimal("1"), JAN), "no MIG profile"),
    (lambda: Rate("NoSuchGPU", Decimal("1"), JAN), "unknown GPU model"),
    (lambda: Rate("H100-80GB", Decimal("-1"), JAN), "≥ 0"),
    (lambda: Rate("H100-80GB", 4.0, JAN), "Decimal"),
    (lambda: Rate("H100-80GB", Decimal("4"), FEB, JAN), "after"),
    (lambda: Rate("H100-80GB", Decimal("4"), datetime(2026, 1, 1)), "time zone"),
])
def test_bad_rates_and_cards_are_refused_naming_the_problem(make, problem):
    with pytest.raises(InvalidInput, match=problem):
        make()


def test_money_rounds_half_even_to_the_currencys_minor_unit_once():
    assert round_money(Fraction("0.125"), "EUR") == Decimal("0.12")
    assert round_money(Fraction("0.135"), "EUR") == Decimal("0.14")
    assert round_money(Fraction(1, 3), "USD") == Decimal("0.33")
    assert round_money(Fraction("2.5"), "JPY") == Decimal("2")
    assert round_money(Fraction("1.0005"), "KWD") == Decimal("1.000")
    assert str(round_money(Fraction(0), "EUR")) == "0.00"
