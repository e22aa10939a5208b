"""`GET /api/v1/billing/statements` (docs/billing.md, "Statements from the store"): figures
read from real bindings, pools, projects, rate cards and the funnel's minute masks equal
the ones worked out by hand; members see only their own projects; CSV reads back to the
JSON; allocated GPU-hours are conserved against the funnel; bad input is a 4xx naming it —
on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest

from gpufleet.domain.billing.charges import Window
from gpufleet.services.access.principal import SYSTEM
from gpufleet.wire.billing import StatementsView
from tests.billing_world import grant, statement_world

PATH = "/api/v1/billing/statements"


@pytest.fixture
def world(api, gf, clock):
    return statement_world(api, gf, clock)


def window(world, hours: int = 5) -> dict:
    return {"start": world["t0"].isoformat(),
            "end": (world["t0"] + timedelta(hours=hours)).isoformat()}


def get(api, expect: int = 200, **params):
    response = api.get(PATH, params=params)
    assert response.status_code == expect, response.text
    return response.json()


def test_statements_equal_the_hand_worked_figures(api, world):
    view = get(api, **window(world))
    assert view["currency"] == "EUR" and view["by"] == "project"
    rows = {r["key"]: r for r in view["rows"]}
    assert set(rows) == {"vision", "speech", "ledger"}
    vision = rows["vision"]["totals"]
    # Its own GPU 5 h (busy) + the pool's request 3 h (no telemetry) = 8 allocated; the
    # pool's 3 h reserved are charged, its request's hours are not charged again.
    assert vision["allocated_gpu_hours"] == pytest.approx(8)
    assert vision["reserved_gpu_hours"] == pytest.approx(3)
    assert vision["charged_gpu_hours"] == pytest.approx(8)
    assert vision["cost"] == "16.00" and vision["total_cost"] == "16.00"
    assert vision["active_gpu_hours"] == pytest.approx(5)
    assert vision["idle_gpu_hours"] == 0
    assert vision["unknown_gpu_hours"] == pytest.approx(3)  # unknown, never idle
    assert vision["efficiency_percent"] == pytest.approx(100)
    assert rows["vision"]["cost_centre"] == "CC-1"
    speech = rows["speech"]["totals"]
    assert speech["allocated_gpu_hours"] == pytest.approx(2)
    assert speech["cost"] == "4.00" and speech["idle_cost"] == "4.00"
    assert speech["idle_gpu_hours"] == pytest.approx(2)
    assert speech["efficiency_percent"] == 0
    assert rows["ledger"]["totals"]["allocated_gpu_hours"] == 0
    assert rows["ledger"]["totals"]["cost"] == "0.00"
    assert view["total"]["cost"] == "20.00"
    assert view["total"]["allocated_gpu_hours"] == pytest.approx(10)


def test_a_month_cuts_at_now_and_rolls_up(api, world, clock):
    month = world["t0"].strftime("%Y-%m")
    view = get(api, month=month, by="department", group="model")
    assert view["window_end"].startswith(clock.now().isoformat()[:19])
    rows = {r["key"]: r for r in view["rows"]}
    assert set(rows) == {"cv", "audio", None}
    assert rows["cv"]["totals"]["cost"] == "16.00"
    assert [(g["group"], g["totals"]["cost"]) for g in rows["cv"]["groups"]] == \
        [("H100-80GB", "16.00")]
    organisations = get(api, month=month, by="organisation")["rows"]
    assert [(r["key"], r["totals"]["cost"]) for r in organisations] == \
        [("finance", "0.00"), ("research", "20.00")]


def test_members_see_only_their_projects(api, world):
    member = world["member"]
    view = get(member, **window(world))
    assert [r["key"] for r in view["rows"]] == ["vision"]
    assert view["total"]["cost"] == "16.00"
    rolled = get(member, **window(world), by="organisation")["rows"]
    assert [(r["key"], r["totals"]["cost"]) for r in rolled] == [("research", "16.00")]
    missing = get(member, 404, **window(world), project="speech")
    assert missing["error"]["code"] == "project_not_found"
    assert get(api, **window(world), project="speech")["rows"][0]["key"] == "speech"


def test_csv_reads_back_to_the_json(api, world):
    params = {**window(world), "group": "flavour"}
    view = get(api, **params)
    response = api.get(PATH, params={**params, "format": "csv"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment; filename=" in response.headers["content-disposition"]
    lines = list(csv.DictReader(io.StringIO(response.text)))
    assert len(lines) == sum(len(r["groups"]) for r in view["rows"])
    for line in lines:
        row = next(r for r in view["rows"] if r["key"] == line["key"])
        group = next(g for g in row["groups"] if (g["group"] or "") == line["group"])
        for name, value in group["totals"].items():
            if value is None:
                assert line[name] == ""
            elif isinstance(value, str):
                assert line[name] == value
            else:
                assert float(line[name]) == value
        assert line["currency"] == "EUR" and line["group_by"] == "flavour"


def test_allocated_hours_are_the_funnels(api, gf, world):
    """Conservation at the service: every binding starts and ends on a whole minute, so
    the funnel's whole-minute count and billing's exact time agree exactly."""
    funnel = gf.queries.funnel(SYSTEM, ["project"], window="5h")
    statement = gf.billing_statements(SYSTEM, Window(world["t0"], world["t0"]
                                                     + timedelta(hours=5)))
    assert sum(r.totals.allocated_gpu_hours for r in statement.rows) == \
        pytest.approx(funnel.fleet.allocated_gpu_hours, abs=1e-9)
    by_project = {r.group["project"]: r.allocated_gpu_hours for r in funnel.rows}
    assert {r.key: r.totals.allocated_gpu_hours for r in statement.rows
            if r.totals.allocated_gpu_hours} == pytest.approx(by_project, abs=1e-9)
    active = {r.group["project"]: r.active_gpu_hours for r in funnel.rows}
    assert {r.key: r.totals.active_gpu_hours for r in statement.rows
            if r.totals.allocated_gpu_hours} == pytest.approx(active, abs=1e-9)


def test_a_closed_window_is_kept_until_its_inputs_change(api, gf, world, clock):
    span = Window(world["t0"], world["t0"] + timedelta(hours=5))
    first = gf.billing.computed(span)
    assert gf.billing.computed(span) is first
    grant(gf, "speech")  # a binding from now on cannot touch a window that ended
    assert gf.billing.computed(span) is first
    response = api.post("/api/v1/billing/rates", json={  # a rate set retroactively can
        "flavour": "H100-80GB", "environment": "onprem-hpc", "price_per_unit_hour": "3.00",
        "currency": "EUR", "effective_from": (world["t0"] + timedelta(hours=4)).isoformat()})
    assert response.status_code == 201, response.text
    again = gf.billing.computed(span)
    assert again is not first
    # vision: 1 h of its own GPU + 1 h of its pool at 3.00 instead of 2.00 (the pool is
    # in no environment: the rate for any environment still prices it).
    assert again.statements["vision"].totals.cost - first.statements["vision"].totals.cost \
        == 1
    view = gf.billing_statements(SYSTEM, span)
    assert isinstance(view, StatementsView) and gf.billing_statements(SYSTEM, span) is view


def test_without_a_rate_card_every_hour_is_unpriced(api, gf, world):
    with gf.store.write() as session:
        from gpufleet.store.tables import BillingRate
        session.query(BillingRate).delete()
    view = get(api, **window(world))
    assert view["currency"] is None
    total = view["total"]
    assert total["cost"] is None and total["total_cost"] is None
    assert total["unpriced_gpu_hours"] == pytest.approx(total["charged_gpu_hours"])
    assert total["charged_gpu_hours"] == pytest.approx(10)


@pytest.mark.parametrize(("params", "code"), [
    ({"month": "2026-13"}, "invalid_month"),
    ({"month": "Nov"}, "invalid_month"),
    ({"end": "2026-11-01T00:00:00Z"}, "invalid_window"),
    ({"month": "2026-11", "start": "2026-11-01T00:00:00Z"}, "invalid_window"),
    ({"start": "2026-11-02T00:00:00Z", "end": "2026-11-01T00:00:00Z"}, "invalid_window"),
    ({"start": "2024-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "window_too_long"),
    ({"month": "2030-01"}, "window_in_future"),
    ({"month": "2026-11", "by": "planet"}, "invalid_roll_up"),
    ({"month": "2026-11", "group": "colour"}, "invalid_group"),
    ({"month": "2026-11", "format": "xml"}, "invalid_format"),
])
def test_bad_input_is_a_400_naming_it(api, world, params, code):
    assert get(api, 400, **params)["error"]["code"] == code


def test_bad_input_names_the_field(api, world):
    body = get(api, 422, start="2026-11-01T00:00:00", end="2026-11-02T00:00:00Z")
    assert "start" in str(body)
    assert get(api, 404, month="2026-11", project="nope")["error"]["code"] == \
        "project_not_found"


def test_this_months_statement_is_reused_briefly_then_warmed(api, gf, world, clock):
    """An open window is cut at the last whole minute and its answer reused for 6
    minutes; the upkeep loop recomputes it (and the views asked of it) once it is 5
    minutes old, while it is asked for, and lets it go after 15 minutes unasked (unless
    /metrics keeps this month)."""
    month = Window(world["t0"].replace(day=1, hour=0), world["t0"].replace(month=12, day=1,
                                                                          hour=0))
    first = gf.billing.computed(month)
    assert first.window.end == clock.now()
    clock.advance(60)
    assert gf.billing.computed(month) is first  # a minute old: reused
    asked = gf.billing_statements(SYSTEM, month, by="organisation")
    gf.telemetry_upkeep()
    assert gf.billing.computed(month) is first  # not yet due
    clock.advance(250)
    gf.telemetry_upkeep()  # 310 s old: recomputed, cut at the last whole minute
    warmed = gf.billing.computed(month)
    assert warmed is not first and warmed.window.end == first.window.end + \
        timedelta(minutes=5)
    assert (None, None, "organisation", None) in warmed._views  # the view asked, ready
    again = gf.billing_statements(SYSTEM, month, by="organisation")
    assert again is warmed._views[None, None, "organisation", None] and again is not asked
    clock.advance(400)  # no upkeep: the caller finds it too old and computes it
    later = gf.billing.computed(month)
    assert later is not warmed and later.window.end == clock.now().replace(second=0)
    totals = later.statements["vision"].totals
    assert totals.allocated_gpu_hours > first.statements["vision"].totals.allocated_gpu_hours
    clock.advance(16 * 60)  # nobody asked for 15 minutes: the upkeep lets it go, but
    gf.telemetry_upkeep()  # keeps this month for /metrics (docs/billing.md, "Showback")
    assert gf.billing._asked == {} and set(gf.billing._open) == {month}
    gf.billing.showback_refresh_s = 0  # billing_showback_refresh_s = 0: nothing kept
    gf.telemetry_upkeep()
    assert gf.billing._open == {}


def test_an_ended_pool_is_charged_up_to_its_end(api, gf, world, clock):
    """The pool's own request released and the pool ended at T0 + 5 h: an hour later the
    six-hour statement charges the pool's 3 reserved hours, not 4."""
    gf.lifecycle.release(SYSTEM, world["pooled"], None)
    ended = api.post(f"/api/v1/pools/{world['pool']}/end", json={"reason": "done"})
    assert ended.status_code == 200, ended.text
    clock.advance(3600)
    vision = {r["key"]: r for r in get(api, **window(world, hours=6))["rows"]}["vision"]
    assert vision["totals"]["reserved_gpu_hours"] == pytest.approx(3)
    assert vision["totals"]["charged_gpu_hours"] == pytest.approx(9)  # own GPU 6 h + pool 3 h
    assert vision["totals"]["cost"] == "18.00"


def test_a_rates_idle_surcharge_is_charged_on_idle_hours(api, world):
    """From T0 the H100 price stays 2.00 with a 50 % surcharge on idle hours: speech's two
    idle hours cost 4.00, plus 2.00; vision, busy or unknown, pays nothing more. The
    statement kept before the change is not served after it."""
    assert get(api, **window(world))["total"]["idle_adjustment"] == "0.00"
    response = api.post("/api/v1/billing/rates", json={
        "flavour": "H100-80GB", "price_per_unit_hour": "2.00", "currency": "EUR",
        "idle_adjustment": "0.5", "effective_from": world["t0"].isoformat()})
    assert response.status_code == 201, response.text
    assert response.json()["idle_adjustment"] == "0.5"
    rows = {r["key"]: r["totals"] for r in get(api, **window(world))["rows"]}
    assert (rows["speech"]["idle_cost"], rows["speech"]["idle_adjustment"],
            rows["speech"]["total_cost"]) == ("4.00", "2.00", "6.00")
    assert rows["vision"]["idle_adjustment"] == "0.00" and rows["vision"]["total_cost"] == "16.00"


@pytest.mark.parametrize("adjustment", ["-1.5", "NaN", "a lot"])
def test_an_idle_adjustment_out_of_range_is_refused(api, world, adjustment):
    response = api.post("/api/v1/billing/rates", json={
        "flavour": "A100-80GB", "price_per_unit_hour": "1.00", "currency": "EUR",
        "idle_adjustment": adjustment})
    assert response.status_code == 422, response.text
    assert "idle_adjustment" in response.text


def test_no_window_is_this_month_and_a_start_alone_runs_until_now(api, world, clock):
    """What an operator asks most needs no arguments."""
    this_month = get(api)
    assert this_month == get(api, month=clock.now().strftime("%Y-%m"))
    since = get(api, start=world["t0"].isoformat())
    assert since["window_end"].startswith(clock.now().isoformat()[:16])
    assert since["total"]["cost"] == "20.00"
