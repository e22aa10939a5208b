"""The dashboard's recent funnels (`TelemetryQueries.recent_funnel`) and the funnel's
project / environment filter, through real HTTP where a page is involved: a kept answer
equals a fresh one, is never served to another scope, expires, and the upkeep loop warms
exactly the questions the Fleet, Environments and Projects pages ask
(docs/telemetry-queries.md, "Recent funnels")."""

from __future__ import annotations

import pytest

from gpufleet.api.web.pages import environments, projects
from gpufleet.api.web.pages import fleet as fleet_page
from gpufleet.api.web.pages.usage import trend_step
from gpufleet.domain.access import Role
from gpufleet.services.access.principal import SYSTEM, Principal
from gpufleet.services.telemetry.queries import RECENT_FUNNEL_S, WARM_FUNNELS
from tests.services.telemetry.test_queries import HOURS, fleet  # noqa: F401 (a fixture)
from tests.web.test_sessions import sign_in

MIA = Principal(role=Role.MEMBER, user_name="mia", project_names=frozenset({"vision"}))
ENV = "onprem-hpc"


def test_a_recent_funnel_equals_a_fresh_one(gf, fleet):  # noqa: F811
    for by, window, step in [(["project"], "24h", None), (["environment", "project"], "24h",
                                                          "30m"), ([], "1h", "5m")]:
        recent = gf.queries.recent_funnel(SYSTEM, by, window, step)
        assert recent.rows, by
        assert recent == gf.queries.funnel(SYSTEM, by, None, window, step)
        assert gf.queries.recent_funnel(SYSTEM, by, window, step) is recent  # kept


def test_an_admins_recent_funnel_is_never_a_members(gf, fleet):  # noqa: F811
    admin = gf.queries.recent_funnel(SYSTEM, ["project"], "24h")
    assert {r.group["project"] for r in admin.rows} == {"vision", "speech"}
    member = gf.queries.recent_funnel(MIA, ["project"], "24h")
    assert {r.group["project"] for r in member.rows} == {"vision"}
    assert member.fleet.total_gpu_hours is None
    assert gf.queries.recent_funnel(SYSTEM, ["project"], "24h") is admin


def test_a_recent_funnel_expires(gf, fleet, clock):  # noqa: F811
    kept = gf.queries.recent_funnel(SYSTEM, ["project"], "24h")
    clock.advance(RECENT_FUNNEL_S)
    assert gf.queries.recent_funnel(SYSTEM, ["project"], "24h") is kept
    clock.advance(1)
    again = gf.queries.recent_funnel(SYSTEM, ["project"], "24h")
    assert again is not kept
    assert again.window_end == clock.now()
    assert again == gf.queries.funnel(SYSTEM, ["project"], None, "24h")


def test_upkeep_warms_what_the_fleet_wide_pages_ask(client, admin_token, gf, fleet,  # noqa: F811
                                                     monkeypatch):
    assert WARM_FUNNELS[0][2] == trend_step(fleet_page.DEFAULT_WINDOW)
    assert {w for _, w, _ in WARM_FUNNELS} == {fleet_page.DEFAULT_WINDOW,
                                               environments.DEFAULT_WINDOW,
                                               projects.DEFAULT_WINDOW}
    gf.telemetry_upkeep()
    counted = []
    monkeypatch.setattr(gf.queries, "funnel", lambda *a, **k: counted.append(a))
    sign_in(client, admin_token)
    for path in ("/ui/", "/ui/environments", "/ui/projects", f"/ui/environments/{ENV}",
                 "/ui/projects/vision"):
        response = client.get(path)
        assert response.status_code == 200, response.text
        text = response.text
        assert ("vision" in text or ENV in text) and 'role="alert"' not in text, path
    assert counted == []  # every funnel those pages showed was a warmed one


def test_a_funnel_without_trend_is_the_kept_one_with_trend_less_it(gf, fleet,  # noqa: F811
                                                                      monkeypatch):
    fresh = {by: gf.queries.funnel(SYSTEM, [by], None, "24h") for by in ("project", "node")}
    with_trend = gf.queries.recent_funnel(SYSTEM, ["project"], "24h", "30m")
    assert with_trend.rows[0].trend
    counted = []
    funnel = gf.queries.funnel
    monkeypatch.setattr(gf.queries, "funnel",
                        lambda *a, **k: counted.append(a) or funnel(*a, **k))
    assert gf.queries.recent_funnel(SYSTEM, ["project"], "24h") == fresh["project"]
    assert counted == []
    assert gf.queries.recent_funnel(SYSTEM, ["node"], "24h") == fresh["node"]
    assert len(counted) == 1  # another question is counted
    assert gf.queries.recent_funnel(MIA, ["project"], "24h").rows == [
        r for r in fresh["project"].rows if r.group["project"] == "vision"]
    assert len(counted) == 2  # nor is an admin's answer a member's


def test_the_funnel_filtered_by_project_or_environment(api, fleet):  # noqa: F811
    whole = api.get("/api/v1/telemetry/funnel", params={"by": "project", "step": "1h"}).json()
    vision = next(r for r in whole["rows"] if r["group"] == {"project": "vision"})
    one = api.get("/api/v1/telemetry/funnel",
                  params={"by": "project", "project": "vision", "step": "1h"}).json()
    assert [r["group"] for r in one["rows"]] == [{"project": "vision"}]
    for key in ("allocated_gpu_hours", "active_gpu_hours", "effective_gpu_hours",
                "efficiency_percent", "allocations", "allocation_held_hours"):
        assert one["rows"][0][key] == pytest.approx(vision[key]), key
    assert one["fleet"]["allocated_gpu_hours"] == pytest.approx(HOURS)
    assert one["fleet"]["total_gpu_hours"] is None  # the inventory is not one project's
    env = api.get("/api/v1/telemetry/funnel",
                  params={"by": "environment,project", "environment": ENV}).json()
    assert {r["group"]["project"] for r in env["rows"]} == {"vision", "speech"}
    assert api.get("/api/v1/telemetry/funnel",
                   params={"by": "project", "environment": "elsewhere"}).json()["rows"] == []
    # a member asking for another's project gets nothing of it
    other = fleet["member"].get("/api/v1/telemetry/funnel",
                                params={"by": "project", "project": "speech"}).json()
    assert other["rows"] == [] and other["fleet"]["allocated_gpu_hours"] == 0


def test_a_member_never_sees_the_admins_recent_funnels(client, admin_token, gf,
                                                        fleet):  # noqa: F811
    gf.telemetry_upkeep()  # the admin's fleet-wide funnels, warmed
    sign_in(client, admin_token)
    for path in ("/ui/", "/ui/projects", f"/ui/environments/{ENV}"):
        assert "speech" in client.get(path).text
    client.cookies.clear()
    sign_in(client, fleet["member"].token)
    for path in ("/ui/", "/ui/projects", f"/ui/environments/{ENV}", "/ui/environments"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert "speech" not in response.text, path


def test_upkeep_warms_only_while_the_dashboard_is_used(gf, fleet, monkeypatch):  # noqa: F811
    from gpufleet.services.telemetry import queries
    counted = []
    funnel = gf.queries.funnel
    monkeypatch.setattr(gf.queries, "funnel",
                        lambda *a, **k: counted.append(a) or funnel(*a, **k))
    gf.telemetry_upkeep()  # just started: warmed
    assert len(counted) == len(WARM_FUNNELS)
    monotonic = queries.time.monotonic() + queries.WARM_WHILE_USED_S + 1
    monkeypatch.setattr(queries.time, "monotonic", lambda: monotonic)
    gf.telemetry_upkeep()  # nobody asked for 15 minutes: not warmed
    assert len(counted) == len(WARM_FUNNELS)
    gf.queries.recent_funnel(SYSTEM, ["project"], "24h", "30m")  # a page asks (kept: no count)
    gf.telemetry_upkeep()
    assert len(counted) == 2 * len(WARM_FUNNELS)
