"""The dashboard's kept idle list (`TelemetryQueries.recent_idle`), through real HTTP where
a page is involved: what the Environment and Project pages pick from it equals the API's
fresh `/telemetry/idle?environment=` / `?project=`, a member never gets an admin's kept
verdicts, they expire, and the upkeep loop warms them only while the dashboard is in use
(docs/telemetry-queries.md, "Recent idle list")."""

from __future__ import annotations

from gpufleet.domain.access import Role
from gpufleet.services.access.principal import SYSTEM, Principal
from gpufleet.services.telemetry import queries
from gpufleet.services.telemetry.queries import RECENT_FUNNEL_S
from tests.services.telemetry.test_queries import fleet  # noqa: F401 (a fixture)
from tests.web.test_sessions import sign_in

MIA = Principal(role=Role.MEMBER, user_name="mia", project_names=frozenset({"vision"}))
ENV = "onprem-hpc"
FILTERS = [{}, {"environment": ENV}, {"environment": "elsewhere"}, {"project": "speech"},
           {"project": "vision"}, {"project": "speech", "environment": ENV}]


def judged(gf, monkeypatch) -> list:
    """Count the idle verdicts worked out from here on."""
    counted = []
    verdicts = gf.queries._idle_verdicts
    monkeypatch.setattr(gf.queries, "_idle_verdicts",
                        lambda *a, **k: counted.append(a) or verdicts(*a, **k))
    return counted


def test_a_kept_idle_list_equals_the_apis_fresh_one(api, gf, fleet, monkeypatch):  # noqa: F811
    counted = judged(gf, monkeypatch)
    questions = [q | ({} if limit is None else {"limit": limit})
                 for limit in (None, 1) for q in FILTERS]
    kept = [gf.queries.recent_idle(SYSTEM, **q).model_dump(mode="json") for q in questions]
    assert len(counted) == 1  # judged once, every question picked from it
    for question, answer in zip(questions, kept, strict=True):
        fresh = api.get("/api/v1/telemetry/idle", params=question).json()
        assert answer == fresh, question
    whole = gf.queries.recent_idle(SYSTEM)
    assert [i.allocation for i in whole.items] == [fleet["speech"]]  # something to pick
    assert whole.too_new + whole.unknown + len(whole.items) > 0


def test_the_pages_idle_rows_equal_the_apis(client, api, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    for path, params in ((f"/ui/environments/{ENV}", {"environment": ENV}),
                         ("/ui/projects/speech", {"project": "speech"})):
        html = client.get(path).text
        fresh = api.get("/api/v1/telemetry/idle", params=params).json()["items"]
        assert fresh and all(f'data-allocation="{i["allocation"]}"' in html for i in fresh)
        assert html.count("data-allocation=") == len(fresh), path


def test_a_member_never_gets_an_admins_kept_idle_list(client, gf, fleet,  # noqa: F811
                                                      monkeypatch):
    gf.telemetry_upkeep()  # the admin's, warmed
    assert gf.queries.recent_idle(SYSTEM, project="speech").items
    counted = judged(gf, monkeypatch)
    assert gf.queries.recent_idle(MIA, project="speech").items == []
    assert gf.queries.recent_idle(MIA, environment=ENV).items == []
    assert len(counted) == 1  # the member's own scope, judged for them
    sign_in(client, fleet["member"].token)
    for path in (f"/ui/environments/{ENV}", "/ui/projects/speech"):
        assert fleet["speech"] not in client.get(path).text, path


def test_a_kept_idle_list_expires(gf, fleet, clock, monkeypatch):  # noqa: F811
    kept = gf.queries.recent_idle(SYSTEM, environment=ENV)
    counted = judged(gf, monkeypatch)
    clock.advance(RECENT_FUNNEL_S)
    assert gf.queries.recent_idle(SYSTEM, environment=ENV) == kept
    assert counted == []
    clock.advance(1)
    again = gf.queries.recent_idle(SYSTEM, environment=ENV)
    assert len(counted) == 1 and again.at == clock.now() != kept.at
    assert again == gf.queries.idle(SYSTEM, environment=ENV)


def test_upkeep_warms_the_idle_list_only_while_the_dashboard_is_used(
        client, admin_token, gf, fleet, monkeypatch):  # noqa: F811
    counted = judged(gf, monkeypatch)
    gf.telemetry_upkeep()  # just started: warmed
    assert len(counted) == 1
    sign_in(client, admin_token)
    for path in (f"/ui/environments/{ENV}", "/ui/projects/speech", "/ui/projects/vision"):
        response = client.get(path)
        assert response.status_code == 200 and 'role="alert"' not in response.text, path
    assert len(counted) == 1  # the pages picked from the warmed one
    monotonic = queries.time.monotonic() + queries.WARM_WHILE_USED_S + 1
    monkeypatch.setattr(queries.time, "monotonic", lambda: monotonic)
    gf.telemetry_upkeep()  # nobody asked for 15 minutes: not warmed
    assert len(counted) == 1
    gf.queries.recent_idle(SYSTEM, environment=ENV)  # a page asks (kept: no count)
    gf.telemetry_upkeep()
    assert len(counted) == 2
