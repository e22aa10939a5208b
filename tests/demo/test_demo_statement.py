"""A statement for the demo's history (issue 16: "a statement for the demo's history"): the
demo's fleet registers, its people, rate card and lifecycle are seeded as `gpufleet demo`
seeds them, an hour passes, and this month's statement prices every charged hour — whole
GPUs, MIG instances, shared fractions and pools, in every environment — and so do the
`gpufleet_cost_*` series on /metrics."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.demo.lifecycle_seed import seed_lifecycle
from gpufleet.demo.rate_card import CURRENCY, seed_rate_card
from gpufleet.demo.runner import try_billing
from gpufleet.demo.seed import seed_people
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.billing.statements import month_window
from tests.api.test_prometheus import scrape
from tests.demo.test_lifecycle_seed import SEED, register, small_spec


@pytest.fixture
def demo(gf, clock):
    """The demo's seeding on a small fleet of every kind, then an hour of holding."""
    register(gf, small_spec())
    assert seed_rate_card(gf)  # after registration, as the demo does
    seed_people(gf, SEED)
    summary = seed_lifecycle(gf, SEED)
    assert summary is not None and summary.complete
    clock.advance(seconds=3600)
    return month_window(clock.now().strftime("%Y-%m"))


def test_every_charged_hour_of_the_demo_is_priced(gf, demo):
    view = gf.billing_statements(SYSTEM, demo, group="flavour")
    assert view.currency == CURRENCY
    total = view.total
    assert total.charged_gpu_hours > 0 and total.reserved_gpu_hours > 0  # pools too
    assert total.unpriced_gpu_hours == 0
    assert Decimal(total.cost) > 0
    flavours = {g.group for row in view.rows for g in row.groups or ()
                if g.totals.charged_gpu_hours}
    assert any("/shared" in f for f in flavours) and any("g." in f for f in flavours)
    for row in view.rows:  # each project that was charged pays for it
        assert row.totals.unpriced_gpu_hours == 0, row.key
        if row.totals.charged_gpu_hours:
            assert Decimal(row.totals.total_cost) > 0, row.key


def test_the_demo_shows_its_cost_on_metrics(api, gf, demo):
    gf.telemetry_upkeep()
    metrics = scrape(api)
    costs = metrics["gpufleet_cost_month_to_date"]
    assert costs and {dict(k)["currency"] for k in costs} == {CURRENCY}
    assert sum(costs.values()) == pytest.approx(
        float(gf.billing_statements(SYSTEM, demo).total.total_cost), abs=0.01 * len(costs))
    assert sum(metrics["gpufleet_cost_unpriced_gpu_hours_month_to_date"].values()) == 0


def test_the_banner_offers_the_statement():
    lines = try_billing("2026-11")
    assert "gpufleet billing statement --month 2026-11" in lines
    assert "gpufleet billing export --month 2026-11 --format csv" in lines
