"""Showback on the server's `/metrics` (docs/billing.md, "Showback in Prometheus"): the
`gpufleet_cost_*` series equal this month's statement JSON, appear only once the upkeep has
computed them (a scrape never computes one), follow the /metrics rule on who reads them,
and are recomputed as documented — on SQLite and PostgreSQL, read back with Prometheus' own
parser."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.domain.billing.showback import SERIES
from tests.api.test_prometheus import scrape
from tests.billing_world import grant, statement_world

MONTH = "2026-11"  # tests/conftest.py's clock starts on 2026-11-02
HOURS = ("allocated", "reserved", "charged", "unpriced", "active", "idle", "unknown")
MONEY = {"gpufleet_cost_month_to_date": "total_cost",
         "gpufleet_cost_idle_month_to_date": "idle_cost",
         "gpufleet_cost_idle_adjustment_month_to_date": "idle_adjustment"}


@pytest.fixture
def world(api, gf, clock):
    return statement_world(api, gf, clock)


def statement(api) -> dict:
    response = api.get("/api/v1/billing/statements", params={"month": MONTH})
    assert response.status_code == 200, response.text
    return response.json()


def project_labels(row: dict, **more: str) -> tuple:
    labels = {"project": row["key"], "organisation": row["organisation"] or "",
              "department": row["department"] or "", "cost_centre": row["cost_centre"] or "",
              **more}
    return tuple(sorted(labels.items()))


def cost_series(metrics: dict) -> set[str]:
    return {name for name, samples in metrics.items()
            if name.startswith("gpufleet_cost_") and samples
            and name != "gpufleet_cost_rate_per_unit_hour"}


def test_no_cost_series_before_the_upkeep_computed_them(api, world):
    """A scrape never computes a statement: until the upkeep has, only the rates show."""
    metrics = scrape(api)
    assert cost_series(metrics) == set()
    assert metrics["gpufleet_cost_rate_per_unit_hour"] == {
        (("currency", "EUR"), ("environment", ""), ("flavour", "H100-80GB")): 2.0}


def test_the_series_equal_the_statement_of_the_month(api, gf, world):
    gf.telemetry_upkeep()
    metrics = scrape(api)
    view = statement(api)  # the same month, answered from the kept statement
    assert view["currency"] == "EUR"
    # every series docs/metrics.md documents (rendered from SERIES), and no other
    assert {n for n in metrics if n.startswith("gpufleet_cost_")} == {s.name for s in SERIES}
    rows = {r["key"]: r for r in view["rows"]}
    assert set(rows) == {"vision", "speech", "ledger"}
    for term in HOURS:
        family = metrics[f"gpufleet_cost_{term}_gpu_hours_month_to_date"]
        assert family == {project_labels(row): row["totals"][f"{term}_gpu_hours"]
                          for row in rows.values()}, term
    for name, field in MONEY.items():
        assert metrics[name] == {project_labels(row, currency="EUR"):
                                 float(row["totals"][field]) for row in rows.values()}, name
    # the hand-worked figures of tests/billing_world.py, through the gauges
    vision = project_labels(rows["vision"], currency="EUR")
    speech = project_labels(rows["speech"], currency="EUR")
    assert metrics["gpufleet_cost_month_to_date"][vision] == 16.0
    assert metrics["gpufleet_cost_idle_month_to_date"][speech] == 4.0
    assert dict(vision)["cost_centre"] == "CC-1"
    as_of = metrics["gpufleet_cost_computed_timestamp_seconds"][()]
    assert as_of == pytest.approx(
        gf.billing.showback.window.end.timestamp())
    assert view["window_end"].startswith(gf.billing.showback.window.end.isoformat()[:19])


def test_members_get_no_cost_series_viewers_do(api, gf, world):
    gf.telemetry_upkeep()
    refused = world["member"].get("/metrics")
    assert refused.status_code == 403, refused.text
    assert "gpufleet_cost_" not in refused.text
    viewer = api.as_(api.post("/api/v1/tokens", json={"name": "prometheus",
                                                       "role": "viewer"}).json()["token"])
    assert "gpufleet_cost_month_to_date" in cost_series(scrape(viewer))


def test_figures_are_recomputed_after_the_refresh_interval_not_before(api, gf, world, clock):
    gf.telemetry_upkeep()
    first = scrape(api)
    key = next(k for k in first["gpufleet_cost_month_to_date"] if ("project", "ledger") in k)
    assert first["gpufleet_cost_month_to_date"][key] == 0
    grant(gf, "ledger")  # ledger now holds a GPU at 2.00 EUR an hour
    clock.advance(600)  # under billing_showback_refresh_s (900 s): the figures stay
    gf.telemetry_upkeep()
    kept = scrape(api)
    assert kept["gpufleet_cost_month_to_date"][key] == 0
    assert kept["gpufleet_cost_computed_timestamp_seconds"] == \
        first["gpufleet_cost_computed_timestamp_seconds"]
    clock.advance(3600 - 600)  # an hour held: recomputed by the upkeep
    gf.telemetry_upkeep()
    fresh = scrape(api)
    assert fresh["gpufleet_cost_month_to_date"][key] == 2.0
    assert fresh["gpufleet_cost_computed_timestamp_seconds"][()] - \
        first["gpufleet_cost_computed_timestamp_seconds"][()] == 3600


def test_a_new_month_drops_last_months_figures_until_computed(api, gf, world, clock):
    gf.telemetry_upkeep()
    clock.advance(timedelta(days=30).total_seconds())  # 2026-12-02
    assert cost_series(scrape(api)) == set()
    gf.telemetry_upkeep()
    december = scrape(api)
    assert december["gpufleet_cost_computed_timestamp_seconds"][()] == \
        clock.now().replace(second=0, microsecond=0).timestamp()
    assert sum(december["gpufleet_cost_month_to_date"].values()) > 0  # vision still holds


def test_without_a_rate_card_hours_show_and_money_does_not(api, gf, h100s):
    grant(gf, "vision")
    gf.telemetry_upkeep()
    metrics = scrape(api)
    assert metrics["gpufleet_cost_rate_per_unit_hour"] == {}
    assert not set(MONEY) & cost_series(metrics)
    assert "gpufleet_cost_charged_gpu_hours_month_to_date" in cost_series(metrics)


def test_refresh_zero_keeps_no_cost_series(api, gf, world):
    gf.billing.showback_refresh_s = 0  # billing_showback_refresh_s = 0: off
    gf.telemetry_upkeep()
    assert cost_series(scrape(api)) == set()
