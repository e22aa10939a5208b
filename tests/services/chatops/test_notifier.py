"""The chat-ops notifier against a local server standing in for Slack's Web API, through
the real app on SQLite and PostgreSQL: approvals posted once with their buttons and updated
with who decided, a chat request's thread told in order with its exports, and Slack's
failures (5xx, 429 Retry-After) and a restart neither losing nor doubling a message."""

from __future__ import annotations

import logging
import threading

import pytest
from sqlalchemy import select

from gpufleet.domain.requests import request_id_from_code
from gpufleet.services.app import Gpufleet
from gpufleet.services.chatops.notifier import LOOP, ChatNotifier
from gpufleet.settings import Settings
from gpufleet.store.tables import ChatCursor, ChatThread
from tests.api.chatops.block_kit import seen_text
from tests.lifecycle_world import act, create
from tests.local_receivers import Reply
from tests.services.chatops.slack_world import APPROVALS, JSON, FakeSlack, buttons
from tests.services.operations.test_reclamation import IDLE, world  # noqa: F401 (fixture)

CHAT_CHANNEL = "C0VISION"
REQUESTER = "U0MIA"


@pytest.fixture
def slack():
    with FakeSlack() as fake:
        yield fake


@pytest.fixture
def settings(tmp_path, slack) -> Settings:
    return Settings(data_dir=tmp_path / "data", heartbeat_interval_s=30,
                    unreachable_after_missed_heartbeats=3, slack_bot_token="xoxb-test-token",
                    slack_api_url=slack.api_url, slack_approvals_channel=APPROVALS,
                    outbox_receiver_timeout_s=5)


def notifier_of(gf: Gpufleet) -> ChatNotifier:
    """A notifier without jitter (retry waits are then exact); its first round sets the
    cursor at the newest event, as a server's first round with a token does."""
    notifier = ChatNotifier(gf.store, gf.settings, gf.clock, jitter=lambda: 0.0)
    notifier.run_once()
    return notifier


def from_chat(gf: Gpufleet, code: str) -> None:
    """What the inbound side writes when `/gpu request` creates a request."""
    with gf.store.write() as session:
        session.add(ChatThread(request_id=request_id_from_code(code), platform="slack",
                               team_id="T0TEAM", requester_chat_user_id=REQUESTER,
                               channel_id=CHAT_CHANNEL, created_at=gf.clock.now()))


def thread_of(gf: Gpufleet, code: str) -> ChatThread:
    with gf.store.read() as session:
        row = session.get(ChatThread, request_id_from_code(code))
        session.expunge_all()
        return row


def test_a_request_awaiting_an_operator_is_posted_once_with_two_buttons(h100s, gf, slack):
    member, _ = h100s
    notifier = gf.chat_notifier  # the server's own, which its chat-ops loop runs
    assert notifier.enabled
    notifier.run_once()
    code = create(member, count=2, models=["H100-80GB"], reason="<!channel> fine-tune")["code"]
    assert notifier.run_once().told == 1
    assert notifier.run_once().calls == 0  # a second round has nothing new
    [posted] = slack.posts()
    assert posted["channel"] == APPROVALS
    assert [(b["text"]["text"], b["action_id"]) for b in buttons(posted)] == [
        ("Approve", f"approve:{code}"), ("Reject", f"reject:{code}")]
    assert f"{code} needs an operator" in posted["text"]
    assert "<!channel>" not in seen_text(posted)  # what the requester typed is inert
    thread = thread_of(gf, code)
    assert (thread.approval_channel_id, thread.approval_ts, thread.channel_id) == (
        APPROVALS, "1700000000.000001", None)
    assert slack.server.received[0].headers["authorization"] == "Bearer xoxb-test-token"


def test_approved_through_the_api_the_message_names_the_approver(h100s, gf, slack):
    member, operator = h100s
    notifier = notifier_of(gf)
    code = create(member, count=2, models=["H100-80GB"], reason="eval")["code"]
    notifier.run_once()
    act(operator, code, "approve", reason="capacity is there")
    notifier.run_once()
    [update] = slack.updates()
    assert (update["channel"], update["ts"]) == (APPROVALS, "1700000000.000001")
    assert update["text"] == f"{code} approved by olga"
    assert buttons(update) == []  # the buttons give way to who decided
    assert len(slack.posts()) == 1  # a request from the CLI or API has no thread


def test_rejected_the_message_says_so(h100s, gf, slack):
    member, operator = h100s
    notifier = notifier_of(gf)
    code = create(member, count=2, models=["H100-80GB"], reason="eval")["code"]
    notifier.run_once()
    act(operator, code, "reject", reason="not this week")
    notifier.run_once()
    [update] = slack.updates()
    assert update["text"] == f"{code} rejected by olga"
    assert ":no_entry: rejected by olga" in seen_text(update)


def test_cancelled_by_its_requester_the_message_says_who(h100s, gf, slack):
    member, _ = h100s
    notifier = notifier_of(gf)
    code = create(member, count=2, models=["H100-80GB"], reason="eval")["code"]
    notifier.run_once()
    act(member, code, "cancel")
    notifier.run_once()
    assert [u["text"] for u in slack.updates()] == [f"{code} cancelled by mia"]


def test_a_chat_request_is_told_in_its_thread_in_order_with_its_exports(h100s, gf, slack):
    member, operator = h100s
    notifier = notifier_of(gf)
    code = create(member, count=2, models=["H100-80GB"], same_node=True, reason="eval")["code"]
    from_chat(gf, code)
    notifier.run_once()
    act(operator, code, "approve", reason="ok")
    notifier.run_once()
    exports = member.get(f"/api/v1/requests/{code}").json()["exports"]
    act(member, code, "release")
    notifier.run_once()

    opener, *replies = slack.posts(CHAT_CHANNEL)
    assert "thread_ts" not in opener
    assert opener["blocks"][0]["text"]["text"].startswith(f"<@{REQUESTER}> *{code}*")
    thread_ts = thread_of(gf, code).thread_ts
    assert thread_ts == "1700000000.000002"  # after the approval message
    assert [r["thread_ts"] for r in replies] == [thread_ts] * 3
    assert [r["text"] for r in replies] == [
        f"{code} was approved by olga: ok", f"{code} is active", f"{code} was released by mia"]
    assert all(f"<@{REQUESTER}>" in r["blocks"][0]["text"]["text"] for r in replies)
    active = seen_text(replies[1])
    assert f"export CUDA_VISIBLE_DEVICES={exports['CUDA_VISIBLE_DEVICES']}" in active
    assert f"export GPUFLEET_ALLOCATION={code}" in active
    assert [u["text"] for u in slack.updates()] == [f"{code} approved by olga"]
    assert len(slack.posts(APPROVALS)) == 1


def test_slack_answering_500_then_200_delivers_once_later(h100s, gf, slack, clock, caplog):
    member, _ = h100s
    notifier = notifier_of(gf)
    slack.script = [Reply(500, b"upstream broke")]
    code = create(member, count=2, models=["H100-80GB"], reason="eval")["code"]
    with caplog.at_level(logging.DEBUG):
        failed = notifier.run_once()
    assert "chat.postMessage" in caplog.text and "xoxb-test-token" not in caplog.text
    assert failed.retrying and failed.told == 0 and slack.posts() == []
    tried = len(slack.server.received)
    assert notifier.run_once().calls == 0 and len(slack.server.received) == tried  # waits
    clock.advance(5)  # the first retry: half of outbox_retry_base_s without jitter
    assert notifier.run_once().told == 1
    notifier.run_once()
    [posted] = slack.posts()
    assert f"approve:{code}" in [b["action_id"] for b in buttons(posted)]
    with gf.store.read() as session:
        cursor = session.get(ChatCursor, LOOP)
        assert (cursor.attempts, cursor.last_error) == (0, None)


def test_a_429_waits_for_its_retry_after(h100s, gf, slack, clock):
    member, _ = h100s
    notifier = notifier_of(gf)
    slack.script = [Reply(429, b'{"ok": false, "error": "ratelimited"}',
                          {"Retry-After": "30", **JSON})]
    create(member, count=2, models=["H100-80GB"], reason="eval")
    assert notifier.run_once().retrying
    with gf.store.read() as session:
        assert "slack_ratelimited" in session.get(ChatCursor, LOOP).last_error
    tried = len(slack.server.received)
    clock.advance(29)
    notifier.run_once()
    assert len(slack.server.received) == tried  # not before Slack said
    clock.advance(2)
    assert notifier.run_once().told == 1
    assert len(slack.posts()) == 1


def test_a_restart_mid_way_loses_nothing_and_doubles_nothing(h100s, gf, slack, store,
                                                             settings, clock):
    member, operator = h100s
    first = notifier_of(gf)
    a = create(member, count=2, models=["H100-80GB"], same_node=True, reason="a")["code"]
    from_chat(gf, a)
    # The approval message and the thread's first message go; the reply to the approval
    # fails, and this server stops before trying again.
    first.run_once()
    slack.script = [None, Reply(503, b"busy")]
    act(operator, a, "approve", reason="ok")
    assert first.run_once().retrying
    b = create(member, count=1, models=["H100-80GB"], reason="b")["code"]

    restarted = Gpufleet(store, settings, clock)  # a new app on the same store
    try:
        second = ChatNotifier(restarted.store, settings, clock, jitter=lambda: 0.0)
        clock.advance(5)
        second.run_once()
        second.run_once()
        first.run_once()  # the old one, were it still running, finds nothing left
    finally:
        restarted.close_telemetry()

    assert [p["text"] for p in slack.posts(APPROVALS)] == [
        f"{a} needs an operator: 2 × H100-80GB for vision",
        f"{b} needs an operator: 1 × H100-80GB for vision"]
    assert [u["text"] for u in slack.updates()] == [f"{a} approved by olga"] * 2
    assert [p["text"].split(":")[0] for p in slack.posts(CHAT_CHANNEL)] == [
        f"{a} pending", f"{a} was approved by olga", f"{a} is active"]


def test_without_a_bot_token_nothing_is_posted_or_kept(h100s, gf, slack, tmp_path):
    member, _ = h100s
    quiet = ChatNotifier(gf.store, Settings(data_dir=tmp_path / "quiet",
                                            slack_api_url=slack.api_url,
                                            slack_approvals_channel=APPROVALS), gf.clock)
    assert not quiet.enabled
    quiet.run_once()
    create(member, count=2, models=["H100-80GB"], reason="eval")
    assert quiet.run_once().calls == 0
    assert slack.server.received == []
    with gf.store.read() as session:
        assert session.scalars(select(ChatCursor)).all() == []


def test_without_an_approvals_channel_only_chat_requests_are_told(h100s, gf, slack,
                                                                 tmp_path):
    member, operator = h100s
    settings = Settings(data_dir=tmp_path / "quiet", slack_bot_token="xoxb-test-token",
                        slack_api_url=slack.api_url)
    notifier = ChatNotifier(gf.store, settings, gf.clock)
    notifier.run_once()
    plain = create(member, count=1, models=["H100-80GB"], reason="plain")["code"]
    chatty = create(member, count=1, models=["H100-80GB"], reason="chat")["code"]
    from_chat(gf, chatty)
    notifier.run_once()
    act(operator, plain, "approve")
    notifier.run_once()
    assert [p["channel"] for p in slack.posts()] == [CHAT_CHANNEL]
    assert slack.updates() == []


def test_the_thread_is_warned_of_the_end_then_told_it_expired(h100s, gf, slack, clock):
    member, operator = h100s
    notifier = notifier_of(gf)
    code = create(member, count=1, models=["H100-80GB"], duration_hours=12,
                  reason="short")["code"]
    from_chat(gf, code)
    act(operator, code, "approve")
    notifier.run_once()
    clock.advance(120)
    assert gf.reclaim.tick().ending_warned == [code]  # within the lead (24 h by default)
    notifier.run_once()
    clock.advance(12 * 3600 + 1)
    gf.lifecycle.tick()
    notifier.run_once()
    texts = [p["text"] for p in slack.posts(CHAT_CHANNEL)][1:]
    assert texts[:2] == [f"{code} was approved by olga", f"{code} is active"]
    warned, expired = texts[2:]
    assert warned.startswith(f"{code} is about to end: {code}: 1 × H100-80GB ends at ")
    assert f"gpufleet request extend {code}" in warned
    assert expired == f"{code} expired: its end time passed"


def test_an_error_no_retry_mends_passes_the_event_and_goes_on(h100s, gf, slack, caplog):
    member, _ = h100s
    notifier = notifier_of(gf)
    slack.script = [Reply(200, b'{"ok": false, "error": "channel_not_found"}', JSON)]
    first = create(member, count=1, models=["H100-80GB"], reason="lost")["code"]
    second = create(member, count=1, models=["H100-80GB"], reason="told")["code"]
    done = notifier.run_once()
    assert (done.told, done.passed, done.retrying) == (1, 1, False)
    assert [p["text"].split(" ")[0] for p in slack.posts()] == [second]
    assert "passing event" in caplog.text and first in caplog.text


def test_a_revoked_token_is_retried_not_passed(h100s, gf, slack):
    member, _ = h100s
    notifier = notifier_of(gf)
    slack.script = [Reply(200, b'{"ok": false, "error": "invalid_auth"}', JSON)]
    create(member, count=1, models=["H100-80GB"], reason="kept")
    done = notifier.run_once()
    assert (done.passed, done.retrying) == (0, True)


def test_an_event_older_than_the_give_up_age_is_passed(h100s, gf, slack, clock, settings):
    member, _ = h100s
    notifier = notifier_of(gf)
    slack.script = [Reply(503, b"down")] * 2
    create(member, count=1, models=["H100-80GB"], reason="old")
    assert notifier.run_once().retrying
    clock.advance(settings.outbox_give_up_after_s + 1)
    done = notifier.run_once()
    assert (done.passed, done.retrying) == (1, False)
    assert slack.posts() == []


def test_a_second_replica_waits_while_the_first_holds_the_cursor(h100s, gf, slack, store,
                                                                  settings, clock):
    member, _ = h100s
    first = notifier_of(gf)
    second = ChatNotifier(store, settings, clock, jitter=lambda: 0.0)
    create(member, count=1, models=["H100-80GB"], reason="once")
    slack.server.hold = threading.Event()  # Slack takes its time answering the first
    running = threading.Thread(target=first.run_once)
    running.start()
    try:
        for _ in range(500):
            if slack.server.received:
                break
            threading.Event().wait(0.01)
        assert len(slack.server.received) == 1
        assert second.run_once().calls == 0  # the first's lease keeps it off
        assert len(slack.server.received) == 1
    finally:
        slack.server.hold.set()
        running.join(30)
    assert len(slack.posts()) == 1
    assert second.run_once().calls == 0  # and after it, nothing is left to tell


def test_an_idle_warning_and_the_release_it_led_to_are_told_in_the_thread(
        world, gf, slack):  # noqa: F811 (the reclaim world, a fixture)
    """End to end through the reclaim round (tests/services/operations/test_reclamation.py's
    world: real idle minutes judged by the telemetry's idle query): the requester reads in
    their thread that the allocation is idle and when it goes, then that it went."""
    notifier = notifier_of(gf)
    code, gpus = world.allocate(2)
    from_chat(gf, code)
    world.run(70, dict.fromkeys(gpus, IDLE))
    assert [s.step for s in world.tick().steps] == ["warn"]
    notifier.run_once()
    world.run(31, dict.fromkeys(gpus, IDLE))
    assert [s.step for s in world.tick().steps] == ["act"]
    notifier.run_once()
    opener, *replies = slack.posts(CHAT_CHANNEL)
    assert f"*{code}*" in opener["blocks"][0]["text"]["text"]
    told = [r["text"] for r in replies]
    assert told[:2] == [f"{code} was approved by olga", f"{code} is active"]
    assert told[2].startswith(f"{code} is idle: {code}: 2 × H100-80GB idle for 70 min")
    assert told[3].startswith(f"{code} was released by gpufleet")
    assert len(told) == 4
    assert all(r["thread_ts"] == thread_of(gf, code).thread_ts for r in replies)
    assert all(f"<@{REQUESTER}>" in r["blocks"][0]["text"]["text"] for r in replies)
