from datetime import UTC, datetime

from gpufleet.domain.operations.rendering import (
    alertmanager_alert,
    label_line,
    plain_text,
    slack_message,
)

AT = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
PAYLOAD = {"kind": "health.quarantined", "severity": "critical", "summary": "GPU <3> out",
           "text": "XID 79", "labels": {"zone": "b", "project": "vision", "node": "n1",
                                        "bad-name": "x", "empty": ""}}


def test_labels_read_in_unit_order_then_the_rest():
    assert label_line(PAYLOAD) == "node=n1, project=vision, bad-name=x, zone=b"


def test_slack_text_is_escaped_block_kit():
    message = slack_message(PAYLOAD)
    assert message["text"] == "[critical] GPU <3> out"
    assert "*GPU &lt;3&gt; out*\nXID 79" in message["blocks"][0]["text"]["text"]
    assert message["blocks"][1]["type"] == "context"


def test_plain_text_has_headline_text_labels_and_kind():
    assert plain_text(PAYLOAD).splitlines() == [
        "[critical] GPU <3> out", "", "XID 79", "",
        "node=n1, project=vision, bad-name=x, zone=b", "", "kind: health.quarantined"]


def test_alertmanager_alert_for_each_kind():
    firing = alertmanager_alert({**PAYLOAD, "kind": "alert.firing",
                                 "labels": {"rule": "XidCritical", "bad-name": "x"}}, AT)
    assert firing["labels"] == {"rule": "XidCritical", "bad_name": "x",
                                "alertname": "XidCritical", "severity": "critical"}
    assert firing["startsAt"] == "2026-11-02T09:00:00Z" and "endsAt" not in firing
    resolved = alertmanager_alert({**PAYLOAD, "kind": "alert.resolved"}, AT)
    assert resolved["endsAt"] == "2026-11-02T09:00:00Z"
    assert resolved["labels"]["alertname"] == "GpufleetAlert"
    assert resolved["annotations"] == {"summary": "GPU <3> out", "description": "XID 79"}


def test_any_other_kind_is_a_one_off_alert_that_ends_by_itself():
    alert = alertmanager_alert(PAYLOAD, AT)
    assert alert["labels"]["alertname"] == "health.quarantined"
    assert (alert["startsAt"], alert["endsAt"]) == ("2026-11-02T09:00:00Z",
                                                    "2026-11-02T09:05:00Z")
