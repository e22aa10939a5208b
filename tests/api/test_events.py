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


# --- subscriptions ---------------------------------------------------------------------
SUBSCRIPTIONS = "/api/v1/event-subscriptions"
TICKETS = {"name": "big-h100-tickets", "url": "https://tickets.example.org/hook",
           "secret": "0123456789abcdef0123", "types": ["request.approved"],
           "where": ["data.count>=8", "data.models=~.*H100.*"]}


def _outbox(gf) -> list[tuple[str, str]]:
    from sqlalchemy import select

    from gpufleet.store.tables import OutboxMessage

    with gf.store.read() as s:
        return sorted((m.receiver.name, m.payload["event"]["subject"]["id"])
                      for m in s.scalars(select(OutboxMessage)))


def test_a_ticket_for_every_approval_of_8_or_more_h100s(h100s, api, gf):
    member, operator = h100s
    created = operator.post(SUBSCRIPTIONS, json=TICKETS)
    assert created.status_code == 201, created.text
    assert "secret" not in created.json()
    assert created.json()["types"] == ["request.approved"]
    big = create(member, count=8, models=["H100-80GB"], same_node=True)["code"]
    small = create(member, count=2, models=["H100-80GB"])["code"]
    act(operator, big, "approve")
    act(operator, small, "approve")
    assert _outbox(gf) == [("big-h100-tickets", big)]

    listed = operator.get(SUBSCRIPTIONS).json()["items"]
    assert [s["name"] for s in listed] == ["big-h100-tickets"]
    assert "secret" not in listed[0] and listed[0]["where"] == TICKETS["where"]
    assert operator.request("DELETE", f"{SUBSCRIPTIONS}/big-h100-tickets").status_code == 204
    assert operator.get(SUBSCRIPTIONS).json()["items"] == []
    assert operator.request("DELETE", f"{SUBSCRIPTIONS}/big-h100-tickets").status_code == 404


def test_bad_subscriptions_are_refused_naming_the_problem(api, gf):
    for change, code, named in [
        ({"where": ["data.count>=eight"]}, "invalid_condition", "data.count>=eight"),
        ({"where": ["gpus>=8"]}, "invalid_condition", "gpus>=8"),
        ({"where": ["data.models=~("]}, "invalid_condition", "data.models=~("),
        ({"types": ["request.[approved]"]}, "invalid_event_type", "request.[approved]"),
    ]:
        response = api.post(SUBSCRIPTIONS, json={**TICKETS, **change})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == code
        assert named in response.json()["error"]["message"]
    for change in [{"url": "ftp://x"}, {"secret": "short"}, {"types": []},
                   {"unknown": 1}, {"name": "Bad Name"}]:
        assert api.post(SUBSCRIPTIONS, json={**TICKETS, **change}).status_code == 422
    assert api.get(SUBSCRIPTIONS).json()["items"] == []  # nothing half-written
    assert api.post(SUBSCRIPTIONS, json=TICKETS).status_code == 201
    again = api.post(SUBSCRIPTIONS, json=TICKETS)
    assert again.status_code == 409 and again.json()["error"]["code"] == "subscription_exists"


def test_only_operators_manage_subscriptions(h100s):
    member, _ = h100s
    assert member.post(SUBSCRIPTIONS, json=TICKETS).status_code == 403
    assert member.get(SUBSCRIPTIONS).status_code == 403
    assert member.request("DELETE", f"{SUBSCRIPTIONS}/x").status_code == 403


def test_node_and_gpu_events_carry_their_environment(h100s, api):
    node_events = _events(api, type="node.registered")["items"]
    assert node_events[0]["labels"] == {"node": node_events[0]["subject"]["id"],
                                        "environment": "onprem-hpc"}
    gpu = api.get("/api/v1/gpus", params={"limit": 1}).json()["items"][0]
    api.post(f"/api/v1/gpus/{gpu['uuid']}/health",
             json={"health": "quarantined", "reason": "xid 79"})
    changed = _events(api, type="gpu.*")["items"][-1]
    assert changed["type"] == "gpu.health_changed" and changed["reason"] == "xid 79"
    assert changed["labels"] == {"gpu": gpu["uuid"], "node": gpu["node"],
                                 "environment": "onprem-hpc"}


def test_subscriptions_page_by_name(api):
    from tests.api.test_listings import every_page

    for name in ("c-hook", "a-hook", "b-hook"):
        assert api.post(SUBSCRIPTIONS, json={**TICKETS, "name": name}).status_code == 201
    assert every_page(api, SUBSCRIPTIONS, "name") == ["a-hook", "b-hook", "c-hook"]
    bad = api.get(SUBSCRIPTIONS, params={"cursor": "not-a-cursor"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_cursor")


def test_a_waiting_long_poll_holds_no_database_connection(api, gf, monkeypatch):
    monkeypatch.setattr(gf, "settings", gf.settings.model_copy(
        update={"event_poll_interval_s": 30.0}))
    last = _events(api, limit=500)["last_id"]
    answers = []
    poller = threading.Thread(target=lambda: answers.append(
        _events(api, after=last, wait_s=20)))
    poller.start()
    deadline = time.monotonic() + 10
    while not gf.event_bell._waiters:  # until it has read once and waits on the bell
        assert time.monotonic() < deadline
        time.sleep(0.02)
    engines = {id(e): e for e in (gf.store._read_engine, gf.store._write_engine,
                                  gf.store._dedicated_engine)}.values()
    assert [e.pool.checkedout() for e in engines] == [0] * len(engines)
    gf.create_project(Principal(role=Role.ADMIN, user_name="admin"),
                      ProjectCreate(name="wake", organisation="research"))
    poller.join()
    assert _types(answers[0]) == ["project.created"]
