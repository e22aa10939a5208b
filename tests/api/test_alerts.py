"""Alerts and silences through the real app: members see their projects' alerts and the
fleet-wide ones, operators acknowledge and silence, bad input is a 4xx naming it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.domain.operations.observations import Observation
from tests.services.operations import alert_world
from tests.services.operations.alert_world import (
    Rule,
    evaluate,
    hot,
)

world = alert_world.world  # the fixture

NOW_RULE = Rule(for_s=0)


@pytest.fixture
def firing(gf, world, api):
    """A firing alert on vision's GPU, one on a free GPU, and one naming project speech."""
    speech = Observation(rule=NOW_RULE.name, labels={"project": "speech", "node": "node-9"},
                         at=gf.clock.now())
    evaluate(gf, hot(world.gpus[0], gf, rule=NOW_RULE), hot(world.free_gpu, gf, rule=NOW_RULE),
             speech, rules=[NOW_RULE])
    return {a["labels"].get("project") or "fleet": a["fingerprint"]
            for a in api.get("/api/v1/alerts").json()["items"]}


def test_a_member_sees_their_projects_and_fleet_wide_alerts_only(world, firing):
    listed = world.member.get("/api/v1/alerts").json()["items"]
    assert sorted(a["labels"].get("project", "-") for a in listed) == ["-", "vision"]
    hidden = world.member.get(f"/api/v1/alerts/{firing['speech']}")
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "alert_not_found"
    history = world.member.get("/api/v1/alerts/history").json()["items"]
    assert firing["speech"] not in {h["fingerprint"] for h in history}
    assert len(world.operator.get("/api/v1/alerts").json()["items"]) == 3


def test_filters_by_state_project_severity_and_matcher(api, firing):
    def fingerprints(**params):
        return {a["fingerprint"] for a in api.get("/api/v1/alerts", params=params)
                .json()["items"]}

    assert fingerprints(project="vision") == {firing["vision"]}
    assert fingerprints(state="firing") == set(firing.values())
    assert fingerprints(state="resolved") == set()
    assert fingerprints(severity="critical") == set()
    assert fingerprints(matcher=["project=~vis.*", "alertname=gpu-hot"]) == {firing["vision"]}
    assert fingerprints(matcher="owner!=mia", environment="onprem-hpc") == {firing["fleet"]}


def test_listing_pages_with_a_cursor_even_through_matchers(api, firing):
    seen = []
    params = {"limit": 1, "matcher": "alertname=gpu-hot"}
    while True:
        page = api.get("/api/v1/alerts", params=params).json()
        seen += [a["fingerprint"] for a in page["items"]]
        if not page["next_cursor"]:
            break
        params["cursor"] = page["next_cursor"]
    assert sorted(seen) == sorted(firing.values())


def test_operators_acknowledge_members_may_not(world, firing, api):
    refused = world.member.post(f"/api/v1/alerts/{firing['vision']}/ack", json={})
    assert refused.status_code == 403
    acked = world.operator.post(f"/api/v1/alerts/{firing['vision']}/ack",
                                json={"duration": "2h", "comment": "looking"})
    assert acked.status_code == 200, acked.text
    assert acked.json()["acked_by"] == "user:olga" and acked.json()["acked_until"]
    events = api.get("/api/v1/audit-events", params={"subject_kind": "alert"}).json()["items"]
    assert [e["action"] for e in events] == ["alert.acknowledged"]
    history = api.get("/api/v1/alerts/history",
                      params={"fingerprint": firing["vision"]}).json()["items"]
    assert history[0]["event"] == "acknowledged" and history[0]["actor"] == "user:olga"


@pytest.mark.parametrize(("path", "body", "status", "code"), [
    ("/api/v1/alerts/0123456789abcdef/ack", {}, 404, "alert_not_found"),
    ("/api/v1/alerts/{vision}/ack", {"duration": "soon"}, 400, "invalid_duration"),
    ("/api/v1/alerts/{vision}/ack", {"until": "x"}, 422, "validation_failed"),
    ("/api/v1/silences", {"matchers": [], "duration": "1h", "comment": "all"}, 400,
     "silence_without_matcher"),
    ("/api/v1/silences", {"matchers": ["project"], "duration": "1h", "comment": "c"}, 400,
     "invalid_matcher"),
    ("/api/v1/silences", {"matchers": ["project=~("], "duration": "1h", "comment": "c"}, 400,
     "invalid_matcher"),
    ("/api/v1/silences", {"matchers": ["project=vision"], "comment": "c"}, 400,
     "invalid_silence_end"),
    ("/api/v1/silences", {"matchers": ["project=vision"], "duration": "1h",
                          "ends_at": "2026-11-03T00:00Z", "comment": "c"}, 400,
     "invalid_silence_end"),
    ("/api/v1/silences", {"matchers": ["project=vision"], "comment": "c",
                          "ends_at": "2020-01-01T00:00Z"}, 400, "invalid_silence_end"),
    ("/api/v1/silences", {"matchers": ["project=vision"], "duration": "1h"}, 422,
     "validation_failed"),
], ids=["unknown alert", "bad duration", "unknown field", "no matcher", "not a matcher",
        "bad regex", "no end", "two ends", "ends in the past", "no comment"])
def test_bad_input_is_a_4xx_naming_the_problem(api, firing, path, body, status, code):
    response = api.post(path.format(**firing), json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_bad_listing_filters_are_4xx(api, firing):
    assert api.get("/api/v1/alerts", params={"matcher": "nope"}).status_code == 400
    assert api.get("/api/v1/alerts", params={"state": "burning"}).status_code == 422
    assert api.get("/api/v1/alerts", params={"cursor": "zzz"}).status_code == 400


def test_silence_lifecycle_over_http(api, world, firing, gf):
    created = world.operator.post("/api/v1/silences", json={
        "matchers": ["project=vision"], "duration": "2h", "comment": "maintenance"})
    assert created.status_code == 201, created.text
    silence = created.json()
    assert silence["state"] == "active" and silence["created_by"] == "user:olga"
    assert world.member.post("/api/v1/silences", json={
        "matchers": ["project=vision"], "duration": "2h", "comment": "x"}).status_code == 403
    shown = api.get(f"/api/v1/alerts/{firing['vision']}").json()
    assert shown["silenced"] and shown["silenced_by"] == [silence["id"]]
    listed = world.member.get("/api/v1/silences").json()["items"]
    assert [s["id"] for s in listed] == [silence["id"]]
    expired = api.request("DELETE", f"/api/v1/silences/{silence['id']}")
    assert expired.status_code == 200 and expired.json()["state"] == "expired"
    again = api.request("DELETE", f"/api/v1/silences/{silence['id']}")
    assert again.status_code == 409 and again.json()["error"]["code"] == "silence_expired"
    assert api.request("DELETE", "/api/v1/silences/999").status_code == 404
    assert api.get("/api/v1/silences").json()["items"] == []
    assert api.get("/api/v1/silences", params={"include_expired": "true"}).json()["items"]
    events = api.get("/api/v1/audit-events", params={"subject_kind": "silence"}).json()
    assert [e["action"] for e in events["items"]] == ["silence.expired", "silence.created"]


def test_acknowledging_a_resolved_alert_is_a_conflict(api, gf, world, firing):
    gf.clock.advance(60)
    evaluate(gf, rules=[NOW_RULE])
    response = api.post(f"/api/v1/alerts/{firing['vision']}/ack", json={})
    assert response.status_code == 409 and response.json()["error"]["code"] == "alert_resolved"


def test_a_silence_that_has_not_started_can_be_expired(api, gf):
    later = (gf.clock.now() + timedelta(hours=3)).isoformat()
    created = api.post("/api/v1/silences", json={
        "matchers": ["project=vision"], "starts_at": later, "duration": "1h",
        "comment": "tonight's maintenance"}).json()
    assert created["state"] == "pending"
    expired = api.request("DELETE", f"/api/v1/silences/{created['id']}").json()
    assert expired["state"] == "expired"
    assert api.get("/api/v1/silences").json()["items"] == []


@pytest.mark.parametrize("silence", ["99999999999999999999999", "-1", str(2**63)])
def test_a_silence_id_out_of_range_is_not_found(api, silence):
    response = api.request("DELETE", f"/api/v1/silences/{silence}")
    assert response.status_code in (404, 422), response.text
    assert "error" in response.json()


def test_a_rule_with_a_value_json_cannot_hold_is_refused(api):
    """NaN and Infinity parse from a JSON body, and were stored as null."""
    for value in ("NaN", "Infinity"):
        body = ('{"kind": "threshold", "severity": "info", "metric": "gpu.sm_active", '
                f'"op": ">", "value": {value}}}')
        response = api.request("PUT", "/api/v1/alert-rules/probe", content=body,
                               headers={"content-type": "application/json"})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_rule"
    summary = {"kind": "threshold", "severity": "info", "metric": "gpu.sm_active", "op": ">",
               "value": 1, "summary": "{value.__class__.__new__.__globals__}"}
    response = api.post("/api/v1/alert-rules/test", json={"rules": [{"name": "t", **summary}]})
    assert response.status_code == 400 and "not a plain name" in response.text
