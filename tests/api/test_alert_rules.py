"""`/api/v1/alert-rules`: everyone reads, operators and admins write (audited), bad rules
are 400s naming the field, and testing a rule file shows a member only their projects."""

from __future__ import annotations

import pytest

from gpufleet.store.tables import AlertRule
from tests.services.operations.test_rule_evaluation import world  # noqa: F401  (fixture)

HOT = {"kind": "threshold", "severity": "critical", "metric": "gpu.temperature_celsius",
       "op": ">=", "value": 85, "for": "10m", "summary": "{gpu} at {value:.0f} °C"}
PATH = "/api/v1/alert-rules"


def put(api, name: str, body: dict, expect: int = 200):
    response = api.request("PUT", f"{PATH}/{name}", json=body)
    assert response.status_code == expect, response.text
    return response.json()


def test_the_default_pack_is_in_effect(api):
    rules = api.get(PATH).json()
    assert {r["name"]: r["source"] for r in rules}["gpu-xid-error"] == "default"
    assert len(rules) == 13
    one = api.get(f"{PATH}/node-unreachable").json()
    assert one["kind"] == "state" and one["body"]["condition"] == "node_unreachable"


def test_an_operator_stores_replaces_and_deletes_a_rule(api, people):
    member, operator = people
    created = put(operator, "hot-gpu", HOT)
    assert created["source"] == "stored" and created["for_s"] == 600
    assert member.get(f"{PATH}/hot-gpu").json()["body"]["value"] == 85  # everyone reads
    put(operator, "hot-gpu", {**HOT, "value": 80})
    assert api.get(f"{PATH}/hot-gpu").json()["body"]["value"] == 80
    assert operator.request("DELETE", f"{PATH}/hot-gpu").status_code == 204
    missing = api.get(f"{PATH}/hot-gpu")
    assert missing.status_code == 404
    assert "gpu-xid-error" in missing.json()["error"]["message"]  # the rules there are
    events = api.get("/api/v1/audit-events", params={"subject_kind": "alert_rule"}).json()["items"]
    assert [e["action"] for e in events] == ["alert_rule.deleted", "alert_rule.updated",
                                             "alert_rule.created"]
    assert all(e["actor"] == "user:olga" for e in events)


def test_members_and_viewers_may_not_write(api, people):
    member, _ = people
    viewer = api.as_(api.post("/api/v1/tokens", json={"name": "v", "role": "viewer"})
                     .json()["token"])
    for caller in (member, viewer):
        refused = caller.request("PUT", f"{PATH}/hot-gpu", json=HOT)
        assert refused.status_code == 403
        assert "may not manage alert rules" in refused.json()["error"]["message"]
        assert caller.request("DELETE", f"{PATH}/gpu-xid-error").status_code == 403
        assert caller.get(PATH).status_code == 200


def test_a_stored_rule_replaces_a_default_one_and_can_switch_it_off(api):
    off = put(api, "gpu-xid-error", {"kind": "increase", "metric": "gpu.xid_errors_total",
                                     "enabled": False})
    assert off["source"] == "stored_over_default" and off["enabled"] is False
    assert {r["name"]: r["enabled"] for r in api.get(PATH).json()}["gpu-xid-error"] is False
    assert api.request("DELETE", f"{PATH}/gpu-xid-error").status_code == 204
    back = api.get(f"{PATH}/gpu-xid-error").json()
    assert back["source"] == "default" and back["enabled"] is True
    refused = api.request("DELETE", f"{PATH}/gpu-xid-error")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "default_rule"


@pytest.mark.parametrize(("body", "field", "fragment"), [
    ({**HOT, "metric": "gpu.temp"}, "metric", "did you mean gpu.temperature_celsius"),
    ({**HOT, "for": "soon"}, "for", "not a duration"),
    ({**HOT, "group_by": ["rule", "colour"]}, "group_by", "unknown label 'colour'"),
    ({**HOT, "matchers": ["team=ml"]}, "matchers", "unknown label 'team'"),
    ({**HOT, "summary": "{gpu} {colour}"}, "summary", "unknown placeholder {colour}"),
    ({**HOT, "kind": "increase"}, "metric", "not a counter"),
    ({**HOT, "colour": "red"}, "colour", "unknown field"),
    ({"kind": "state"}, "condition", "choose from: node_unreachable"),
    ({"kind": "absence", "absent": "agent"}, "after", "required"),
])
def test_a_bad_rule_is_a_400_naming_the_field(api, body, field, fragment):
    refused = put(api, "bad", body, expect=400)["error"]
    assert refused["code"] == "invalid_rule"
    problems = {p["field"]: p["message"] for p in refused["details"]["problems"]}
    assert fragment in problems[field], problems
    assert api.get(f"{PATH}/bad").status_code == 404  # nothing half-written


def test_the_body_may_not_rename_the_rule(api):
    assert put(api, "a", {**HOT, "name": "b"}, expect=400)["error"]["code"] == "invalid_rule"


def test_testing_a_rule_file(api, people, world):  # noqa: F811
    member, _ = people
    body = {"rules": [{**HOT, "name": "hot", "value": 50}]}
    reply = api.post(f"{PATH}/test", json=body).json()
    assert reply["evaluated"] == ["hot"] and reply["unavailable"] == {}
    assert {o["labels"]["gpu"] for o in reply["observations"]} == \
        {world["held"], world["other"]}
    # mia is in vision, which holds one of the two GPUs: she sees that one only.
    mine = member.post(f"{PATH}/test", json=body).json()["observations"]
    assert [o["labels"]["gpu"] for o in mine] == [world["held"]]
    bad = api.post(f"{PATH}/test", json={"rules": [{**HOT, "name": "hot", "for": "x"}]})
    assert bad.status_code == 400
    [problem] = bad.json()["error"]["details"]["problems"]
    assert problem["field"] == "rules[0].for"
    assert api.post(f"{PATH}/test", json={"rule": []}).status_code == 400


def test_a_stored_rule_a_newer_check_refuses_is_shown_not_used(api, gf):
    """Rules stored before a check was added (a summary with attribute access, a bit mask
    of 0.5) leave the rule set: evaluation goes on with the rest, `rules ls` says why."""
    body = {**HOT, "name": "old-hot", "summary": "{value.__class__}"}
    with gf.store.write() as s:
        s.add(AlertRule(name="old-hot", body=body, created_by="admin",
                        created_at=gf.clock.now(), updated_by="admin",
                        updated_at=gf.clock.now()))
    listed = {r["name"]: r for r in api.get(PATH).json()}
    assert listed["old-hot"]["source"] == "stored_invalid" and not listed["old-hot"]["enabled"]
    assert "not a plain name" in listed["old-hot"]["summary"]
    assert api.get(f"{PATH}/old-hot").json()["source"] == "stored_invalid"
    assert "old-hot" not in {r.name for r in gf.alert_rules_in_effect()}
    assert len(gf.alert_rules_in_effect()) == 13
    assert api.request("DELETE", f"{PATH}/old-hot").status_code in (200, 204)
