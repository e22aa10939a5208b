"""`gpufleet receivers …` and `gpufleet notifications ls` against the real app."""

from __future__ import annotations

import pytest

from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.services.operations.outbox import notify
from tests.cli.test_cli import assert_one_error_line, invoke, json_of, ok, rows
from tests.local_receivers import LocalHttpReceiver, local_smtp


@pytest.fixture
def cli(cli_in_process) -> None:
    """The CLI as the bootstrap admin, through the test app (tests/cli_world.py)."""


def test_add_ls_test_log_rm_a_webhook(cli, gf):
    with LocalHttpReceiver() as hook:
        added = ok("receivers", "add", "ops-hook", "--kind", "webhook", "--url", hook.url,
                   "--secret", "0123456789abcdef-secret", "--matcher", "project=vision",
                   "--only", "health.*", "--min-severity", "warning")
        assert added.stdout.strip() == "added receiver ops-hook (webhook; broadcast)"
        listing = ok("receivers", "ls").stdout
        [row] = rows(listing, "ops-hook")
        assert row[:3] == ["ops-hook", "webhook", hook.url]
        assert "project=vision" in row and "health.*" in row and "warning" in row
        assert "0123456789abcdef" not in listing
        queued = ok("receivers", "test", "ops-hook")
        assert "queued 1 test notification(s) for ops-hook" in queued.stdout
        gf.outbox_sender.run_once()
        gf.outbox_sender.close()
    assert len(hook.received) == 1
    [entry] = rows(ok("receivers", "log", "ops-hook").stdout, "2026-")
    assert "delivered" in entry and "receiver.test" in entry
    assert json_of("receivers", "log", "ops-hook")["items"][0]["status"] == 200
    removed = ok("receivers", "rm", "ops-hook")
    assert removed.stdout.strip() == "removed receiver ops-hook (0 waiting message(s) dropped)"


def test_an_email_receiver_that_tells_owners(cli):
    with local_smtp() as (port, _envelopes):
        receiver = json_of("receivers", "add", "mail", "--kind", "email", "--smtp-host",
                           "127.0.0.1", "--smtp-port", port, "--from", "g@example.com",
                           "--to", "ops@example.com", "--to", "oncall@example.com",
                           "--tells-owners", "--password", "hunter2-hunter2",
                           "--username", "gpufleet")
    assert receiver["config"]["to"] == ["ops@example.com", "oncall@example.com"]
    assert receiver["config"]["password"] == "set"
    assert (receiver["broadcast"], receiver["tells_owners"]) == (True, True)


@pytest.mark.parametrize(("args", "fragments"), [
    (("--kind", "webhook"), ("config.url", "Field required")),
    (("--kind", "webhook", "--url", "http://x", "--to", "a@b.c"), ("config.to",)),
    (("--kind", "inbox", "--matcher", "project~x"), ("project~x", "not a matcher")),
    (("--kind", "slack_webhook", "--url", "http://x", "--tells-owners"), ("tells_owners",)),
    (("--kind", "inbox", "--min-severity", "loud"), ("min_severity",)),
])
def test_bad_input_is_one_error_line(cli, args, fragments):
    assert_one_error_line(invoke("receivers", "add", "bad", *args), *fragments)
    assert "no receivers yet" in invoke("receivers", "ls").stderr


def test_unknown_receiver_is_one_error_line(cli):
    for command in ("rm", "test", "log", "enable", "disable"):
        assert_one_error_line(invoke("receivers", command, "nope"), "receiver 'nope'")


def test_notifications_ls_shows_the_callers_inbox(cli, api, gf, clock, monkeypatch):
    ok("receivers", "add", "owners", "--kind", "inbox")
    assert api.post("/api/v1/users", json={"name": "alice", "role": "member"}).status_code \
        == 201
    token = api.post("/api/v1/tokens", json={"name": "t-alice", "user": "alice"}).json()
    with gf.store.write() as s:
        notify(s, Notification(kind="reclaim.warning", severity=Severity.WARNING,
                               summary="GR-1042: 8 × H100 idle for 4 h", dedup_key="w1",
                               labels={"allocation": "GR-1042"}, owners=("alice",)),
               clock.now())
    gf.outbox_sender.run_once()
    monkeypatch.setenv("GPUFLEET_TOKEN", token["token"])
    [row] = rows(ok("notifications", "ls").stdout, "2026-")
    assert row[1:3] == ["warning", "reclaim.warning"] and "allocation=GR-1042" in row
    monkeypatch.setenv("GPUFLEET_TOKEN", api.token)
    assert "no notifications yet" in invoke("notifications", "ls").stderr


def test_disable_holds_and_enable_sends(cli, gf, clock):
    with LocalHttpReceiver() as hook:
        ok("receivers", "add", "ops-hook", "--kind", "webhook", "--url", hook.url)
        with gf.store.write() as s:
            notify(s, Notification(kind="health.quarantined", severity=Severity.CRITICAL,
                                   summary="GPU out", dedup_key="q1"), clock.now())
        disabled = ok("receivers", "disable", "ops-hook")
        assert disabled.stdout.strip() == ("disabled receiver ops-hook (1 waiting message(s) "
                                           "held until it is enabled)")
        [row] = rows(ok("receivers", "ls").stdout, "ops-hook")
        assert row[-3:] == ["no", "1", "0"]
        gf.outbox_sender.run_once()
        assert hook.received == []
        enabled = ok("receivers", "enable", "ops-hook")
        assert enabled.stdout.strip() == "enabled receiver ops-hook (1 waiting message(s) to send)"
        gf.outbox_sender.run_once()
        gf.outbox_sender.close()
    assert len(hook.received) == 1


def test_set_changes_routing_and_refuses_nonsense(cli):
    ok("receivers", "add", "owners", "--kind", "inbox")
    changed = json_of("receivers", "set", "owners", "--matcher", "project=vision",
                      "--only", "alert.*", "--min-severity", "warning")
    assert (changed["matchers"], changed["kinds"], changed["min_severity"]) == (
        ["project=vision"], ["alert.*"], "warning")
    cleared = json_of("receivers", "set", "owners", "--no-matchers", "--all-kinds")
    assert (cleared["matchers"], cleared["kinds"]) == ([], [])
    assert_one_error_line(invoke("receivers", "set", "owners"), "nothing to change")
    assert_one_error_line(invoke("receivers", "set", "owners", "--matcher", "project~x"),
                          "project~x")
    assert_one_error_line(invoke("receivers", "set", "owners", "--min-severity", "loud"),
                          "min_severity")
    assert_one_error_line(invoke("receivers", "set", "owners", "--matcher", "a=b",
                                 "--no-matchers"), "not both")
    assert_one_error_line(invoke("receivers", "set", "nope", "--min-severity", "info"),
                          "receiver 'nope'")
