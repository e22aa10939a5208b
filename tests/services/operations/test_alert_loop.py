"""The alert loop end to end: the rules in effect are evaluated on the stores' own data,
the alert state applies `for`, and the owner is told through the outbox
(docs/operations.md, "Alert rules", "Alert lifecycle")."""

from __future__ import annotations

from sqlalchemy import select

from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.operations.receiver_admin import create_receiver
from gpufleet.store.tables import OutboxMessage
from gpufleet.wire.receivers import ReceiverCreate, ReceiverKind
from tests.services.operations.test_rule_evaluation import world  # noqa: F401 (fixture)

HOT = {"kind": "threshold", "severity": "critical", "metric": "gpu.temperature_celsius",
       "op": ">=", "value": 85, "summary": "{gpu} at {value:.0f} °C"}


def _told(gf) -> list[tuple[str, str | None, str]]:
    with gf.store.read() as s:
        return sorted((m.kind, m.recipient, m.payload["labels"].get("alertname", ""))
                      for m in s.scalars(select(OutboxMessage)))


def test_a_stored_rule_fires_tells_the_owner_and_resolves_when_removed(api, gf, clock,
                                                                      world):  # noqa: F811
    gf.alert_evaluator = gf.alert_evaluation  # what the server's composition root installs
    with gf.store.write() as s:
        create_receiver(s, SYSTEM, ReceiverCreate(name="inbox", kind=ReceiverKind.INBOX),
                        clock.now())
    assert api.request("PUT", "/api/v1/alert-rules/hot-gpu", json=HOT).status_code == 200

    gf.alert_round()
    hot = [a for a in api.get("/api/v1/alerts", params={"rule": "hot-gpu"}).json()["items"]]
    assert [(a["state"], a["labels"]["gpu"], a["labels"]["owner"]) for a in hot] == [
        ("firing", world["held"], "alice")]
    assert ("alert.firing", "alice", "hot-gpu") in _told(gf)

    gf.alert_round()  # the same condition again: nobody is told twice
    assert _told(gf).count(("alert.firing", "alice", "hot-gpu")) == 1

    assert api.request("DELETE", "/api/v1/alert-rules/hot-gpu").status_code in (200, 204)
    clock.advance(60)
    gf.alert_round()  # the rule set is complete: a rule that is gone resolves its alerts
    [after] = api.get("/api/v1/alerts", params={"rule": "hot-gpu"}).json()["items"]
    assert after["state"] == "resolved"
    assert ("alert.resolved", "alice", "hot-gpu") in _told(gf)


def test_the_server_evaluates_the_rules_in_effect(tmp_path):
    from gpufleet.server import build_gpufleet
    from gpufleet.settings import Settings

    gf = build_gpufleet(Settings(data_dir=tmp_path / "data"))
    try:
        assert gf.alert_evaluator == gf.alert_evaluation
    finally:
        gf.close()
