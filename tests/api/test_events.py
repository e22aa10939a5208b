"""Events through the real app: listing, filters, the resume cursor, the long poll, the
stream, who sees what, and subscriptions (docs/operations.md, "Events")."""

from __future__ import annotations

import threading
import time

from gpufleet.domain.access import Role
from gpufleet.services.access.principal import Principal
from gpufleet.wire.inventory import ProjectCreate
from tests.lifecycle_world import act, create

EVENTS = "/api/v1/events"


def _events(api, **params) -> dict:
    response = api.get(EVENTS, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def _types(page: dict) -> list[str]:
    return [e["type"] for e in page["items"]]


def test_request_lifecycle_reads_as_events_with_labels(h100s, api):
    member, operator = h100s
    code = create(member, count=8, models=["H100-80GB"], same_node=True, reason="pretrain")["code"]
    act(operator, code, "approve", reason="ok")
    page = _events(api, type="request.*")
    assert _types(page) == ["request.created", "request.approved", "request.activated"]
    approved = page["items"][1]
    assert approved["schema"] == 1 and approved["subject"] == {"kind": "request", "id": code}
    assert approved["actor"] == "user:olga" and approved["reason"] == "ok"
    assert approved["labels"] == {"project": "vision", "allocation": code}
    assert approved["data"]["count"] == 8 and approved["data"]["models"] == ["H100-80GB"]
    assert approved["data"]["from"] == "pending" and approved["data"]["to"] == "approved"
    assert page["next_cursor"] is None and page["last_id"] == page["items"][-1]["id"]


def test_filters_and_the_resume_cursor(h100s, api):
    member, operator = h100s
    first = create(member, count=1)["code"]
    second = create(member, count=1)["code"]
    act(operator, second, "approve")
    assert _types(_events(api, subject=first)) == ["request.created"]
    assert _types(_events(api, type="request.approved", subject_kind="request")) == [
        "request.approved"]
    assert {e["subject"]["kind"] for e in _events(api, project="vision")["items"]} <= {
        "request", "project"}
    several = _events(api, type=["request.created", "request.activated"])
    assert _types(several) == ["request.created", "request.created", "request.activated"]

    everything = [e["id"] for e in _events(api, limit=500)["items"]]
    assert everything == sorted(everything)
    page = _events(api, limit=2)
    assert [e["id"] for e in page["items"]] == everything[:2]
    assert page["next_cursor"] == str(everything[1])
    rest = _events(api, after=page["last_id"], limit=500)
    assert [e["id"] for e in rest["items"]] == everything[2:]
    assert rest["next_cursor"] is None
    empty = _events(api, after=rest["last_id"])
    assert empty["items"] == [] and empty["last_id"] == rest["last_id"]


def test_bad_filters_are_refused_naming_them(api):
    response = api.get(EVENTS, params={"type": "request.[a]"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_event_type"
    assert "request.[a]" in response.json()["error"]["message"]
    assert api.get(EVENTS, params={"after": -1}).status_code == 422
    assert api.get(EVENTS, params={"wait_s": 31}).status_code == 422
    assert api.get(EVENTS, params={"limit": 0}).status_code == 400


def test_a_member_sees_only_events_of_their_projects(h100s, api, gf):
    member, operator = h100s
    mine = create(member, count=1)["code"]
    theirs = create(operator, project="speech", count=1)["code"]
    act(api, theirs, "approve")
    seen = _events(member, limit=500)["items"]
    assert seen and {e["labels"].get("project") for e in seen} == {"vision"}
    assert mine in {e["subject"]["id"] for e in seen}
    assert theirs not in {e["subject"]["id"] for e in seen}
    # Filters narrow, never widen: asking for the other project returns nothing.
    assert _events(member, project="speech")["items"] == []
    assert _events(member, subject=theirs)["items"] == []
    # Events about no project (tokens, users, nodes) are the operators' only.
    assert not {e["type"] for e in seen} & {"token.created", "user.created", "node.registered"}
    assert "token.created" in _types(_events(operator, limit=500))
    # A member of no project sees nothing at all.
    api.post("/api/v1/users", json={"name": "nobody", "role": "member"})
    nobody = api.as_(api.post("/api/v1/tokens",
                              json={"name": "nobody", "user": "nobody"}).json()["token"])
    assert _events(nobody, limit=500)["items"] == []


def test_a_long_poll_answers_as_soon_as_an_event_is_written(api, gf):
    last = _events(api, limit=500)["last_id"]
    admin = Principal(role=Role.ADMIN, user_name="admin")

    def write_soon():
        time.sleep(0.3)
        gf.create_project(admin, ProjectCreate(name="late", organisation="research"))

    writer = threading.Thread(target=write_soon)
    writer.start()
    page = _events(api, after=last, wait_s=20)
    writer.join()
    assert _types(page) == ["project.created"]
    assert page["items"][0]["subject"]["id"] == "late"


def test_a_long_poll_with_nothing_new_answers_empty_after_its_wait(api, gf):
    last = _events(api, limit=500)["last_id"]
    page = _events(api, after=last, wait_s=0.2)
    assert page["items"] == [] and page["last_id"] == last
