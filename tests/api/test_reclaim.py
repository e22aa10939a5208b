"""Reclamation through the API: policies' precedence, who may do what, and bad input as a
clear 4xx that writes nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from gpufleet.store.tables import AuditEvent, ReclaimExemption, ReclaimPolicyRow
from tests.helpers import create_environment, register
from tests.lifecycle_world import act, create


@pytest.fixture
def fleet(api, h100s):
    member, operator = h100s
    code = create(member, count=1, models=["H100-80GB"])["code"]
    act(operator, code, "approve")
    return member, operator, code


def put(caller, scope, name, expect=200, **body):
    response = caller.request("PUT", f"/api/v1/reclaim/policies/{scope}/{name}", json=body)
    assert response.status_code == expect, response.text
    return response.json()


def effective(caller, **params):
    response = caller.get("/api/v1/reclaim/policies/effective", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_project_overrides_environment_overrides_the_server_default(api, fleet):
    default = api.get("/api/v1/reclaim/policies").json()["default"]
    assert (default["idle_window_hours"], default["action"], default["grace_minutes"]) == (
        4.0, "notify", 60.0)
    put(api, "environment", "onprem-hpc", idle_window_hours=2, action="release")
    put(api, "project", "vision", action="shrink", grace_minutes=15)
    got = effective(api, project="vision", environment="onprem-hpc")
    assert (got["idle_window_hours"], got["action"], got["grace_minutes"]) == (2, "shrink", 15)
    assert got["decided_by"]["idle_window"] == "environment:onprem-hpc"
    assert got["decided_by"]["action"] == "project:vision"
    assert "dry_run" not in got["decided_by"]  # the default decided it
    other = effective(api, project="speech", environment="onprem-hpc")
    assert (other["action"], other["grace_minutes"]) == ("release", 60)

    put(api, "project", "vision", unset=["action"])
    assert effective(api, project="vision", environment="onprem-hpc")["action"] == "release"
    assert api.request("DELETE", "/api/v1/reclaim/policies/environment/onprem-hpc"
                       ).status_code == 204
    assert effective(api, project="vision", environment="onprem-hpc")["action"] == "notify"
    rows = api.get("/api/v1/reclaim/policies").json()["items"]
    assert [(r["scope"], r["name"], r["grace_minutes"]) for r in rows] == [
        ("project", "vision", 15)]


def test_setting_a_field_keeps_the_others(api, fleet):
    put(api, "project", "vision", idle_window_hours=2, dry_run=True)
    row = put(api, "project", "vision", grace_minutes=5)
    assert (row["idle_window_hours"], row["dry_run"], row["grace_minutes"]) == (2, True, 5)
    assert row["updated_by"] == "user:admin"


def test_members_neither_set_policies_nor_grant_exemptions(api, fleet):
    member, operator, code = fleet
    refused = member.request("PUT", "/api/v1/reclaim/policies/project/vision",
                             json={"action": "notify"})
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == (
        "role 'member' may not manage reclamation (policies, exemptions, runs)")
    assert member.request("DELETE", "/api/v1/reclaim/policies/project/vision"
                          ).status_code == 403
    asked = member.post(f"/api/v1/requests/{code}/exempt", json={"reason": "x", "hours": 2})
    assert asked.status_code == 201 and asked.json()["state"] == "asked"
    listed = member.get("/api/v1/reclaim/exemptions").json()
    assert [(e["allocation"], e["state"]) for e in listed] == [(code, "asked")]
    put(operator, "project", "vision", grace_minutes=10)  # operators may


def test_members_see_only_their_projects_policies_and_allocations(api, fleet):
    member, _operator, _code = fleet
    speech = create(api, project="speech", count=1, models=["H100-80GB"])["code"]
    act(api, speech, "approve")
    put(api, "project", "speech", grace_minutes=1)
    put(api, "project", "vision", grace_minutes=2)
    put(api, "environment", "onprem-hpc", grace_minutes=3)
    rows = member.get("/api/v1/reclaim/policies").json()["items"]
    assert [(r["scope"], r["name"]) for r in rows] == [("environment", "onprem-hpc"),
                                                       ("project", "vision")]
    hidden = member.post(f"/api/v1/requests/{speech}/exempt", json={"reason": "x", "hours": 1})
    assert hidden.status_code == 404
    other = member.get("/api/v1/reclaim/policies/effective", params={"project": "speech"})
    assert other.status_code == 404
    assert effective(member, project="vision")["grace_minutes"] == 2


@pytest.mark.parametrize(("body", "status", "fragment"), [
    ({"idle_window_hours": -1}, 400, "the idle window must be longer than zero"),
    ({"idle_window_hours": 0}, 400, "the idle window must be longer than zero"),
    ({"grace_minutes": -5}, 400, "the grace period must be at least zero"),
    ({"idle_window_hours": 1e300}, 400, "the idle window may be at most 7 days"),
    ({"end_warning_lead_hours": 24 * 31}, 400, "the end warning lead may be at most 30 days"),
    ({"action": "delete"}, 422, "action"),
    ({"idle_held": "maybe"}, 422, "idle_held"),
    ({"unset": ["colour"]}, 422, "unset"),
    ({"grace": 5}, 422, "grace"),
], ids=["negative window", "zero window", "negative grace", "huge window", "lead too long",
        "unknown action", "unknown idle-held", "unknown field to unset", "unknown field"])
def test_bad_policies_are_refused_and_write_nothing(api, fleet, gf, body, status, fragment):
    response = api.request("PUT", "/api/v1/reclaim/policies/project/vision", json=body)
    assert response.status_code == status, response.text
    assert fragment in response.text
    with gf.store.read() as s:
        assert s.scalar(select(func.count()).select_from(ReclaimPolicyRow)) == 0
        assert s.scalar(select(func.count()).select_from(AuditEvent).where(
            AuditEvent.action.like("reclaim%"))) == 0


def test_nan_and_infinity_are_refused(api, fleet):
    for text in ('{"grace_minutes": NaN}', '{"idle_window_hours": Infinity}'):
        response = api.request("PUT", "/api/v1/reclaim/policies/project/vision", content=text,
                               headers={"Content-Type": "application/json"})
        assert 400 <= response.status_code < 500, response.text


@pytest.mark.parametrize(("scope", "name", "status", "code"), [
    ("project", "nosuch", 404, "project_not_found"),
    ("environment", "nosuch", 404, "environment_not_found"),
    ("team", "vision", 422, "validation_failed"),
])
def test_unknown_scopes_and_names_are_refused(api, fleet, scope, name, status, code):
    response = api.request("PUT", f"/api/v1/reclaim/policies/{scope}/{name}",
                           json={"grace_minutes": 1})
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    gone = api.request("DELETE", "/api/v1/reclaim/policies/project/vision")
    assert gone.status_code == 404
    assert gone.json()["error"]["message"] == "reclamation policy 'project:vision' does not exist"


@pytest.mark.parametrize(("body", "status", "fragment"), [
    ({"reason": "x"}, 422, "give exactly one of `hours` and `until`"),
    ({"reason": "x", "hours": 1, "until": "2026-12-01T00:00:00Z"}, 422, "exactly one"),
    ({"reason": "", "hours": 1}, 422, "reason"),
    ({"reason": "x", "hours": -1}, 422, "hours"),
    ({"reason": "x", "until": "2020-01-01T00:00:00Z"}, 400, "has passed already"),
    ({"reason": "x", "hours": 24 * 91}, 422, "hours"),
    ({"reason": "x", "until": "2026-11-25T00:00:00"}, 422, "until"),
], ids=["no end", "two ends", "empty reason", "negative hours", "past", "too long",
        "no time zone"])
def test_bad_exemptions_are_refused_and_write_nothing(api, fleet, gf, body, status, fragment):
    _, _, code = fleet
    response = api.post(f"/api/v1/requests/{code}/exempt", json=body)
    assert response.status_code == status, response.text
    assert fragment in response.text
    with gf.store.read() as s:
        assert s.scalar(select(func.count()).select_from(ReclaimExemption)) == 0


def test_exempting_a_closed_or_unknown_request_is_refused(api, fleet):
    _, _, code = fleet
    assert api.post("/api/v1/requests/GR-999999/exempt",
                    json={"reason": "x", "hours": 1}).status_code == 404
    act(api, code, "release")
    closed = api.post(f"/api/v1/requests/{code}/exempt", json={"reason": "x", "hours": 1})
    assert closed.status_code == 400
    assert closed.json()["error"]["code"] == "invalid_transition"


def test_a_bad_report_window_is_a_400_naming_it(api, fleet):
    response = api.get("/api/v1/reclaim/report", params={"window": "-3d"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_duration"


def test_an_environment_policy_needs_an_existing_environment(api):
    create_environment(api)
    register(api, 1, gpus=1)
    put(api, "environment", "onprem-hpc", action="release")
    missing = api.get("/api/v1/reclaim/policies/effective",
                      params={"project": "nosuch"})
    assert missing.status_code == 404
