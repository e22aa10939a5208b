"""The requester's thread messages (domain/chatops/blocks.py): every event the notifier
tells keeps Slack's limits, user text stays inert, and only a real Slack id is mentioned."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.chatops import blocks
from tests.api.chatops.block_kit import check_message
from tests.api.chatops.block_kit import seen_text as seen

REQUEST = {"code": "GR-1042", "project": "vision", "requested_by": "mia", "state": "active",
           "kind": "whole", "count": 2, "models": ["H100-80GB"], "mig_profile": None,
           "milli": 1000, "ends_at": None, "duration_s": 86400, "justification": "train",
           "wait_code": None, "wait_message": None, "created_at": "2026-03-01T12:00:00+00:00",
           "decided_by": "user:olga", "decided_at": "2026-03-01T12:05:00+00:00",
           "exports": {"GPUFLEET_ALLOCATION": "GR-1042", "CUDA_VISIBLE_DEVICES": "0,1",
                       "GPUFLEET_NODE": "node-1"}}



@pytest.mark.parametrize("event_type", sorted(blocks.THREAD_EVENTS))
def test_every_told_event_has_a_reply_mentioning_the_requester(event_type):
    reply = blocks.thread_reply(event_type, "user:olga", "why not", REQUEST, "U0MIA")
    check_message(reply)
    assert reply["blocks"][0]["text"]["text"].startswith(":") and "<@U0MIA> *GR-1042*" in \
        reply["blocks"][0]["text"]["text"]
    has_exports = "export CUDA_VISIBLE_DEVICES=0,1" in seen(reply)
    assert has_exports == (event_type == "request.activated")


@pytest.mark.parametrize("chat_user_id", ["U0MIA<!channel>", "<@U1>", "U 1", "Ü1", "", None])
def test_anything_but_a_slack_id_is_not_mentioned(chat_user_id):
    assert blocks.mention(chat_user_id) == ""
    opener = blocks.thread_opener(REQUEST, chat_user_id)
    assert "<@" not in seen(opener) and "<!channel>" not in seen(opener)


@pytest.mark.parametrize(("actor", "said"), [
    ("user:olga", "olga"), ("system:lifecycle", "gpufleet"), ("system", "gpufleet"),
    ("policy:auto-approve", "the project's auto-approve policy"), ("token:ci", "token:ci")])
def test_actors_read_as_words(actor, said):
    assert blocks.actor_name(actor) == said


@settings(max_examples=100, deadline=None)
@given(project=st.text(min_size=1, max_size=400), reason=st.text(max_size=5000),
       actor=st.text(min_size=1, max_size=300))
def test_any_user_text_keeps_the_limits_and_stays_inert(project, reason, actor):
    request = REQUEST | {"project": project, "justification": reason}
    replies = [blocks.thread_opener(request, None)] + [
        blocks.thread_reply(t, f"user:{actor}", reason or None, request, None)
        for t in sorted(blocks.THREAD_EVENTS)]
    for reply in replies:
        check_message(reply)
        shown = seen(reply)
        assert shown.count("<") == shown.count("<!date^"), "user text became markup"
