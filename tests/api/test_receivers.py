"""Receivers over HTTP: validated config per kind, secrets never shown, matchers checked,
audited; the delivery log; the test notification; each user's own notifications."""

from __future__ import annotations

import pytest

from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.services.operations.outbox import notify
from tests.local_receivers import LocalHttpReceiver, Reply

SECRET = "0123456789abcdef-secret"


def _create(api, **body):
    return api.post("/api/v1/receivers", json=body)


def test_secrets_are_written_never_read_back(api):
    created = _create(api, name="hook", kind="webhook",
                      config={"url": "https://hooks.example.com/x", "secret": SECRET},
                      matchers=["project=vision"], min_severity="warning")
    assert created.status_code == 201, created.text
    view = created.json()
    assert view["config"] == {"url": "https://hooks.example.com/x", "secret": "set"}
    assert (view["broadcast"], view["tells_owners"], view["min_severity"]) == (
        True, False, "warning")
    slack = _create(api, name="slack-hook", kind="slack_webhook",
                    config={"url": "https://hooks.slack.com/services/T/B/secret"}).json()
    assert slack["config"] == {"url": "set"}
    listed = api.get("/api/v1/receivers").json()["items"]
    assert [r["name"] for r in listed] == ["hook", "slack-hook"]
    assert SECRET not in api.get("/api/v1/receivers").text
    assert "T/B/secret" not in api.get("/api/v1/receivers/slack-hook").text
    events = api.get("/api/v1/audit-events", params={"subject_kind": "receiver"}).json()
    assert [e["action"] for e in events["items"]] == ["receiver.created"] * 2
    assert SECRET not in str(events)


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "webhook", "config": {}}, "config.url"),
    ({"kind": "webhook", "config": {"url": "ftp://x"}}, "config.url"),
    ({"kind": "webhook", "config": {"url": "http://x", "secret": "short"}}, "config.secret"),
    ({"kind": "webhook", "config": {"url": "http://x", "colour": "red"}}, "config.colour"),
    ({"kind": "email", "config": {"host": "smtp", "from": "not-an-address"}}, "config.from"),
    ({"kind": "email", "config": {"host": "smtp", "from": "g@example.com"}}, "config.to"),
    ({"kind": "email", "config": {"host": "smtp", "from": "g@example.com", "to": ["o@x.y"],
                                  "ca_file": "/etc/ssl/private-ca.pem"}}, "config.ca_file"),
    ({"kind": "email", "config": {"host": "smtp", "from": "g@example.com", "to": ["o@x.y"],
                                  "starttls": True, "ca_file": "ca.pem"}}, "config.ca_file"),
    ({"kind": "slack", "config": {"token": "xoxb-12345678"}}, "config.channel"),
    ({"kind": "slack", "config": {"channel": "C1"}}, "config.token"),
    ({"kind": "slack_webhook", "config": {"url": "http://x"}, "tells_owners": True},
     "tells_owners"),
    ({"kind": "alertmanager", "config": {"url": "http://am:9093"}, "tells_owners": True},
     "tells_owners"),
    ({"kind": "inbox", "broadcast": True}, "broadcast"),
    ({"kind": "webhook", "config": {"url": "http://x"}, "broadcast": False}, "broadcast"),
])
def test_bad_config_is_a_400_naming_the_field(api, body, field):
    response = _create(api, name="bad", **body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_receiver_config"
    assert [e["field"] for e in error["details"]["errors"]] == [field]
    assert field in error["message"]
    assert api.get("/api/v1/receivers").json()["items"] == []  # nothing half-written


def test_a_matcher_that_does_not_parse_is_a_400(api):
    response = _create(api, name="bad", kind="inbox", matchers=["project~vision"])
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_matcher"
    assert "project~vision" in response.json()["error"]["message"]


def test_unknown_kind_duplicate_name_and_unknown_receiver(api):
    assert _create(api, name="x", kind="pager", config={}).status_code == 422
    assert _create(api, name="inbox", kind="inbox").status_code == 201
    duplicate = _create(api, name="inbox", kind="inbox")
    assert (duplicate.status_code, duplicate.json()["error"]["code"]) == (409,
                                                                          "receiver_exists")
    for method, path in (("GET", "/api/v1/receivers/nope"),
                         ("DELETE", "/api/v1/receivers/nope"),
                         ("PATCH", "/api/v1/receivers/nope"),
                         ("POST", "/api/v1/receivers/nope/test"),
                         ("GET", "/api/v1/receivers/nope/deliveries")):
        response = api.request(method, path,
                               json={"enabled": False} if method == "PATCH" else None)
        assert (response.status_code, response.json()["error"]["code"]) == (
            404, "receiver_not_found")


def test_defaults_per_kind(api):
    inbox = _create(api, name="owners", kind="inbox").json()
    assert (inbox["broadcast"], inbox["tells_owners"]) == (False, True)
    am = _create(api, name="am", kind="alertmanager", config={"url": "http://am:9093"}).json()
    assert am["kinds"] == ["alert.*"]


def test_the_test_notification_is_delivered_and_logged(api, gf):
    with LocalHttpReceiver(lambda _r: Reply(502, b"bad gateway")) as hook:
        _create(api, name="hook", kind="webhook", config={"url": hook.url},
                min_severity="critical", kinds=["alert.*"])
        queued = api.post("/api/v1/receivers/hook/test")
        assert queued.status_code == 202, queued.text
        assert queued.json()["queued"] == 1
        assert api.get("/api/v1/receivers/hook").json()["pending"] == 1
        gf.outbox_sender.run_once()
        gf.outbox_sender.close()
    [got] = hook.received
    assert got.json()["notification"]["kind"] == "receiver.test"
    log = api.get("/api/v1/receivers/hook/deliveries").json()["items"]
    assert [(d["ok"], d["outcome"], d["status"], d["attempt"], d["kind"]) for d in log] == [
        (False, "http_502", 502, 1, "receiver.test")]
    assert log[0]["detail"] == "bad gateway" and log[0]["duration_ms"] >= 0
    deleted = api.request("DELETE", "/api/v1/receivers/hook")
    assert deleted.status_code == 200 and deleted.json()["pending"] == 1
    assert api.get("/api/v1/receivers").json()["items"] == []
    actions = [e["action"] for e in api.get("/api/v1/audit-events", params={
        "subject_kind": "receiver"}).json()["items"]]
    assert actions == ["receiver.deleted", "receiver.tested", "receiver.created"]


def test_each_user_reads_only_their_own_notifications(api, gf, clock):
    for user in ("alice", "bob"):
        assert api.post("/api/v1/users", json={"name": user, "role": "member"}).status_code \
            == 201
    tokens = {u: api.post("/api/v1/tokens", json={"name": f"t-{u}", "user": u}).json()["token"]
              for u in ("alice", "bob")}
    _create(api, name="owners", kind="inbox")
    with gf.store.write() as s:
        for i, owners in enumerate((("alice",), ("alice", "bob"), ("bob",))):
            notify(s, Notification(kind="health.quarantined", severity=Severity.CRITICAL,
                                   summary=f"GPU {i} quarantined", dedup_key=f"q{i}",
                                   labels={"gpu": f"GPU-{i}"}, owners=owners), clock.now())
    assert api.as_(tokens["alice"]).get("/api/v1/notifications").json()["items"] == []
    gf.outbox_sender.run_once()
    page = api.as_(tokens["alice"]).get("/api/v1/notifications", params={"limit": 1}).json()
    assert [n["summary"] for n in page["items"]] == ["GPU 1 quarantined"]
    rest = api.as_(tokens["alice"]).get("/api/v1/notifications", params={
        "cursor": page["next_cursor"]}).json()
    assert [n["summary"] for n in rest["items"]] == ["GPU 0 quarantined"]
    assert rest["next_cursor"] is None
    bob = api.as_(tokens["bob"]).get("/api/v1/notifications").json()["items"]
    assert [(n["summary"], n["labels"]) for n in bob] == [
        ("GPU 2 quarantined", {"gpu": "GPU-2"}), ("GPU 1 quarantined", {"gpu": "GPU-1"})]


def test_metrics_show_what_waits_for_each_receiver(api, gf, clock):
    from tests.api.test_prometheus import scrape

    with LocalHttpReceiver(lambda _r: Reply(503)) as hook:
        _create(api, name="hook", kind="webhook", config={"url": hook.url})
        _create(api, name="idle", kind="inbox")
        api.post("/api/v1/receivers/hook/test")
        gf.outbox_sender.run_once()
        gf.outbox_sender.close()
    clock.advance(90)
    metrics = scrape(api)
    assert metrics["gpufleet_outbox_messages"] == {
        (("receiver", "hook"), ("state", "waiting")): 1,
        (("receiver", "hook"), ("state", "abandoned")): 0,
        (("receiver", "idle"), ("state", "waiting")): 0,
        (("receiver", "idle"), ("state", "abandoned")): 0}
    assert metrics["gpufleet_outbox_oldest_waiting_seconds"] == {
        (("receiver", "hook"),): 90, (("receiver", "idle"),): 0}


def _patch(api, name, body):
    return api.request("PATCH", f"/api/v1/receivers/{name}", json=body)


def _tokens(api, *roles):
    """A user of each role, and a token of each user's."""
    tokens = {}
    for role in roles:
        user = f"{role}-user"
        assert api.post("/api/v1/users", json={"name": user, "role": role}).status_code == 201
        response = api.post("/api/v1/tokens", json={"name": f"t-{role}", "user": user})
        assert response.status_code == 201, response.text
        tokens[role] = response.json()["token"]
    return tokens


def _quarantined(key, owners=()):
    return Notification(kind="health.quarantined", severity=Severity.CRITICAL,
                        summary=f"{key}: GPU out", dedup_key=key, labels={"gpu": "GPU-1"},
                        owners=owners)


def test_only_admins_enable_disable_or_change_a_receiver(api):
    _create(api, name="hook", kind="webhook", config={"url": "http://127.0.0.1:9/x"})
    tokens = _tokens(api, "operator", "member", "viewer")
    for role, token in tokens.items():
        response = _patch(api.as_(token), "hook", {"enabled": False})
        assert response.status_code == 403, (role, response.text)
    assert api.as_(tokens["operator"]).get("/api/v1/receivers/hook").json()["enabled"]


@pytest.mark.parametrize("body", [
    {}, {"enabled": None}, {"enabled": "maybe"}, {"colour": "red"},
    {"min_severity": "loud"}, {"kinds": ["Alert firing"]}, {"matchers": "project=vision"},
    {"config": {"url": "http://x"}}, {"kind": "inbox"},
])
def test_a_bad_change_is_a_422_and_changes_nothing(api, body):
    _create(api, name="hook", kind="webhook", config={"url": "http://127.0.0.1:9/x"})
    before = api.get("/api/v1/receivers/hook").json()
    response = _patch(api, "hook", body)
    assert response.status_code == 422, response.text
    assert api.get("/api/v1/receivers/hook").json() == before


def test_a_matcher_that_does_not_parse_is_refused_on_change_too(api):
    _create(api, name="hook", kind="webhook", config={"url": "http://127.0.0.1:9/x"})
    response = _patch(api, "hook", {"matchers": ["project~vision"]})
    assert (response.status_code, response.json()["error"]["code"]) == (400,
                                                                         "invalid_matcher")
    assert api.get("/api/v1/receivers/hook").json()["matchers"] == []


def test_routing_changes_as_on_create_and_is_audited(api):
    _create(api, name="am", kind="alertmanager", config={"url": "http://am:9093"})
    changed = _patch(api, "am", {
        "matchers": ["project=vision"], "kinds": ["alert.*", "health.*", "alert.*"],
        "min_severity": "warning"})
    assert changed.status_code == 200, changed.text
    view = changed.json()
    assert (view["matchers"], view["kinds"], view["min_severity"], view["enabled"]) == (
        ["project=vision"], ["alert.*", "health.*"], "warning", True)
    # No kinds: Alertmanager's default, as on create.
    assert _patch(api, "am", {"kinds": []}).json()["kinds"] == [
        "alert.*"]
    # Asking for what is already so records nothing.
    assert _patch(api, "am", {"min_severity": "warning"}
                     ).status_code == 200
    events = api.get("/api/v1/audit-events", params={"subject_kind": "receiver"}).json()
    assert [(e["action"], e["details"]) for e in events["items"][:2]] == [
        ("receiver.changed", {"kinds": ["alert.*"]}),
        ("receiver.changed", {"matchers": ["project=vision"],
                              "kinds": ["alert.*", "health.*"], "min_severity": "warning"})]


def test_a_disabled_receiver_gets_nothing_new_and_loses_nothing_queued(api, gf, clock):
    with LocalHttpReceiver() as hook:
        _create(api, name="hook", kind="webhook", config={"url": hook.url},
                tells_owners=True)
        with gf.store.write() as s:
            assert len(notify(s, _quarantined("before", owners=("alice",)), clock.now())) == 2
        disabled = _patch(api, "hook", {"enabled": False})
        assert disabled.status_code == 200, disabled.text
        assert (disabled.json()["enabled"], disabled.json()["pending"]) == (False, 2)
        with gf.store.write() as s:
            assert notify(s, _quarantined("while-off", owners=("alice",)), clock.now()) == []
        test = api.post("/api/v1/receivers/hook/test")
        assert (test.status_code, test.json()["error"]["code"]) == (409, "receiver_disabled")
        clock.advance(3 * 86400)  # longer than outbox_give_up_after_s: held, not given up
        assert gf.outbox_sender.run_once().dispatched == 0
        assert hook.received == []
        assert api.get("/api/v1/receivers/hook/deliveries").json()["items"] == []
        assert api.get("/api/v1/receivers/hook").json()["pending"] == 2
        assert _patch(api, "hook", {"enabled": True}).json()[
            "pending"] == 2
        assert gf.outbox_sender.run_once().dispatched == 2
        gf.outbox_sender.close()
    assert sorted((r.json()["notification"]["dedup_key"], r.json()["recipient"] or "*")
                  for r in hook.received) == [("before", "*"), ("before", "alice")]
    assert api.get("/api/v1/receivers/hook").json()["pending"] == 0
    actions = [e["action"] for e in api.get("/api/v1/audit-events", params={
        "subject_kind": "receiver"}).json()["items"]]
    assert actions == ["receiver.enabled", "receiver.disabled", "receiver.created"]
