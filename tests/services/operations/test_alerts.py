"""Alerts through the state store, on SQLite and PostgreSQL: lifecycle, labels from the
binding intervals, notifications queued once with the right labels and owners, grouping,
acknowledgement, repeats, silences and flapping."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import func, select

from gpufleet.domain.operations.alert_state import AlertState
from gpufleet.domain.operations.observations import Observation
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.operations.alert_queries import AlertFilter
from gpufleet.services.operations.alerts import AlertEvaluation
from gpufleet.store.tables import AlertHistoryEntry, Gpu, MigInstance
from gpufleet.wire.alerts import AlertAck, SilenceCreate
from tests.helpers import gpu, join_token, registration
from tests.lifecycle_world import act, create
from tests.services.operations import alert_world
from tests.services.operations.alert_world import (
    HOT,
    Rule,
    evaluate,
    hot,
    outbox,
    payloads,
)

world = alert_world.world  # the fixture


def alerts(gf, **filters):
    return gf.list_alerts(SYSTEM, AlertFilter(**filters), None, 100).items


def the_alert(gf):
    (alert,) = alerts(gf)
    return alert


def test_pending_until_held_for_its_duration_then_firing_and_told(gf, world):
    evaluate(gf, hot(world.gpus[0], gf))
    alert = the_alert(gf)
    assert alert.state is AlertState.PENDING and outbox(gf) == []
    gf.clock.advance(299)
    evaluate(gf, hot(world.gpus[0], gf))
    assert the_alert(gf).state is AlertState.PENDING
    gf.clock.advance(1)
    evaluate(gf, hot(world.gpus[0], gf, value=91))
    alert = the_alert(gf)
    assert alert.state is AlertState.FIRING and alert.last_value == 91
    assert alert.labels == {"gpu": world.gpus[0], "environment": "onprem-hpc",
                            "node": "node-1", "allocation": world.code, "project": "vision",
                            "owner": "mia"}
    assert alert.owners == ["mia"]
    assert outbox(gf) == [("vision-channel", None, "alert.firing"),
                          ("inbox", "mia", "alert.firing")]
    payload = payloads(gf)[0]
    assert payload["labels"]["alertname"] == "gpu-hot"
    assert payload["labels"]["severity"] == "warning"
    assert payload["labels"]["allocation"] == world.code
    assert "gpu.temperature_c 91" in payload["text"]


def test_a_rerun_of_the_same_round_tells_nobody_twice(gf, world):
    rule = Rule(for_s=0)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert len(outbox(gf)) == 2
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    gf.clock.advance(60)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert len(outbox(gf)) == 2
    assert len(alerts(gf)) == 1  # de-duplicated by fingerprint


def test_a_rule_not_evaluated_keeps_its_alerts_then_resolves_when_evaluated(gf, world):
    rule = Rule(for_s=0)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    gf.clock.advance(60)
    evaluate(gf, rules=[rule], evaluated=[])  # its data was unavailable
    assert the_alert(gf).state is AlertState.FIRING
    gf.clock.advance(60)
    evaluate(gf, rules=[rule])
    alert = the_alert(gf)
    assert alert.state is AlertState.RESOLVED and alert.resolved_at == gf.clock.now()
    assert [k for _, _, k in outbox(gf)] == ["alert.firing"] * 2 + ["alert.resolved"] * 2
    history = gf.alert_history(SYSTEM, fingerprint=alert.fingerprint, rule=None,
                               cursor=None, limit=50).items
    assert [h.event for h in reversed(history)] == [
        "pending", "firing", "notified.firing", "resolved", "notified.resolved"]


def test_a_pending_alert_that_clears_resolves_without_telling(gf, world):
    evaluate(gf, hot(world.gpus[0], gf))
    gf.clock.advance(60)
    evaluate(gf)
    assert the_alert(gf).state is AlertState.RESOLVED and outbox(gf) == []


def test_a_fault_on_a_free_gpu_names_no_allocation_and_routes_by_no_project(gf, world):
    rule = Rule(for_s=0)
    evaluate(gf, hot(world.free_gpu, gf, rule=rule), rules=[rule])
    alert = the_alert(gf)
    assert "project" not in alert.labels and alert.owners == []
    assert outbox(gf) == []  # only project channels and owners' inboxes exist


def test_group_by_project_sends_one_notification_listing_its_alerts(gf, world):
    rule = Rule(for_s=0, group_by=("project",))
    evaluate(gf, *(hot(g, gf, rule=rule) for g in world.gpus), rules=[rule])
    assert outbox(gf) == [("vision-channel", None, "alert.firing"),
                          ("inbox", "mia", "alert.firing")]
    payload = payloads(gf)[0]
    assert payload["summary"].startswith("[FIRING:2] gpu-hot")
    assert all(g in payload["text"] for g in world.gpus)
    assert payload["labels"]["project"] == "vision" and "gpu" not in payload["labels"]


def test_repeats_until_acknowledged(gf, world):
    rule = Rule(for_s=0)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    gf.clock.advance(gf.settings.alert_repeat_interval_s)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert len(outbox(gf)) == 4  # the repeat
    gf.acknowledge_alert(SYSTEM, the_alert(gf).fingerprint, AlertAck(comment="on it"))
    assert the_alert(gf).acked_by == SYSTEM.actor and the_alert(gf).acked_until is None
    gf.clock.advance(gf.settings.alert_repeat_interval_s * 3)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert len(outbox(gf)) == 4
    gf.clock.advance(60)
    evaluate(gf, rules=[rule])  # resolution is told even when acknowledged
    assert [k for _, _, k in outbox(gf)][-2:] == ["alert.resolved"] * 2


def test_an_acknowledgement_with_a_duration_lets_repeats_resume(gf, world):
    rule = Rule(for_s=0)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    gf.acknowledge_alert(SYSTEM, the_alert(gf).fingerprint, AlertAck(duration="1h"))
    gf.clock.advance(gf.settings.alert_repeat_interval_s)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert len(outbox(gf)) == 4


def test_silenced_alerts_are_stored_and_listed_but_never_told(gf, world):
    rule = Rule(for_s=0)
    silence = gf.create_silence(SYSTEM, SilenceCreate(matchers=["project=vision"],
                                                      duration="1h", comment="maintenance"))
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    alert = the_alert(gf)
    assert alert.state is AlertState.FIRING and alert.silenced
    assert alert.silenced_by == [silence.id] and outbox(gf) == []
    assert alerts(gf, matchers=()) and gf.list_silences(
        SYSTEM, include_expired=False, cursor=None, limit=10).items[0].state == "active"
    gf.expire_silence(SYSTEM, silence.id)
    assert not the_alert(gf).silenced  # re-marked at once
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert [k for _, _, k in outbox(gf)] == ["alert.firing"] * 2


def test_an_expired_silence_stops_applying(gf, world):
    rule = Rule(for_s=0)
    gf.create_silence(SYSTEM, SilenceCreate(matchers=["alertname=gpu-hot", "severity=warning"],
                                            duration="1h", comment="known"))
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert outbox(gf) == []
    gf.clock.advance(3600)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert len(outbox(gf)) == 2 and not the_alert(gf).silenced
    assert gf.list_silences(SYSTEM, include_expired=False, cursor=None, limit=10).items == []
    assert gf.list_silences(SYSTEM, include_expired=True, cursor=None,
                            limit=10).items[0].state == "expired"


def test_a_silence_that_matches_other_labels_does_not_mute(gf, world):
    rule = Rule(for_s=0)
    gf.create_silence(SYSTEM, SilenceCreate(matchers=["project=speech"], duration="1h",
                                            comment="not this one"))
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert not the_alert(gf).silenced and len(outbox(gf)) == 2


def test_a_flapping_alert_tells_nobody_until_it_settles(gf, world):
    rule = Rule(for_s=0)
    limit = gf.settings.alert_flap_max_changes
    for _ in range(limit):  # fire and resolve: 2 changes a cycle
        evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
        gf.clock.advance(60)
        evaluate(gf, rules=[rule])
        gf.clock.advance(60)
    alert = the_alert(gf)
    assert alert.flapping
    told = len(outbox(gf))
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert len(outbox(gf)) == told
    gf.clock.advance(gf.settings.alert_flap_window_s)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    assert not the_alert(gf).flapping
    with gf.store.read() as s:
        events = list(s.scalars(select(AlertHistoryEntry.event)))
        assert "flapping" in events and "settled" in events
        assert s.scalar(select(func.count()).select_from(AlertHistoryEntry)) > 0


def test_telemetry_label_names_are_understood_too(gf, world):
    rule = Rule(for_s=0)
    seen = Observation(rule=rule.name, labels={"gpu_uuid": world.gpus[1]}, at=gf.clock.now())
    evaluate(gf, seen, rules=[rule])
    assert the_alert(gf).labels["allocation"] == world.code


def test_an_observation_of_an_unknown_rule_is_dropped(gf, world):
    evaluate(gf, hot(world.gpus[0], gf, rule=Rule(name="nobody-defined-me")), rules=[HOT])
    assert alerts(gf) == []


def test_a_mig_instance_alert_names_the_allocation_holding_that_instance(gf, world, api):
    body = registration(7, gpus=0)
    body["gpus"] = [gpu(7, 0, mig_enabled=True)]
    joined = api.as_(join_token(api)).post("/api/v1/agent/register", json=body)
    assert joined.status_code == 200, joined.text
    code = create(world.member, count=1, mig_profile="1g.10gb")["code"]
    (unit,) = act(world.operator, code, "approve")["units"]
    with gf.store.write() as s:  # the instances as the node's agent reports them
        gpu_id = s.scalar(select(Gpu.id).where(Gpu.uuid == unit["gpu_uuid"]))
        for mig_uuid, start in (("MIG-held", unit["mig_start"]),
                                ("MIG-free", (unit["mig_start"] + 1) % 7)):
            s.add(MigInstance(gpu_id=gpu_id, profile_id=unit["mig_profile_id"],
                              placement_start=start, profile_name="1g.10gb",
                              mig_uuid=mig_uuid))
    rule = Rule(for_s=0)
    evaluate(gf, *(Observation(rule=rule.name, at=gf.clock.now(),
                               labels={"gpu": unit["gpu_uuid"], "mig_instance": mig})
                   for mig in ("MIG-held", "MIG-free")), rules=[rule])
    by_instance = {a.labels["mig_instance"]: a for a in alerts(gf)}
    assert by_instance["MIG-held"].labels["allocation"] == code
    assert by_instance["MIG-held"].owners == ["mia"]
    assert "allocation" not in by_instance["MIG-free"].labels
    assert by_instance["MIG-free"].labels["node"] == "node-7"


def test_the_alerts_of_a_removed_rule_resolve_when_the_rule_set_is_complete(gf, world):
    rule = Rule(for_s=0)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    gf.clock.advance(60)
    evaluate(gf, rules=[])  # a partial round names no rule: nothing changes
    assert the_alert(gf).state is AlertState.FIRING
    other = Rule(name="gpu-cold")
    gf.record_alert_evaluation(AlertEvaluation(rules=[other], evaluated=frozenset(),
                                               rules_complete=True))
    assert the_alert(gf).state is AlertState.RESOLVED
    history = gf.alert_history(SYSTEM, fingerprint=None, rule=None, cursor=None,
                               limit=10).items
    assert any(h.event == "resolved" and "no longer exists" in h.detail for h in history)


def test_resolved_alerts_are_forgotten_after_their_retention(gf, world):
    rule = Rule(for_s=0)
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), rules=[rule])
    gf.clock.advance(60)
    evaluate(gf, rules=[rule])
    gf.clock.advance(gf.settings.alert_resolved_retention_days * 86400 - 1)
    gf.alert_round()
    assert len(alerts(gf)) == 1  # not yet
    gf.clock.advance(2)
    gf.alert_round()
    assert alerts(gf) == []
    with gf.store.read() as s:
        assert s.scalar(select(func.count()).select_from(AlertHistoryEntry)) == 0


def test_the_alert_round_records_what_the_wired_evaluator_saw(gf, world):
    rule = Rule(for_s=0)
    gf.alert_evaluator = lambda now: AlertEvaluation(
        [rule], frozenset([rule.name]), [hot(world.gpus[0], gf, rule=rule)])
    outcome = gf.alert_round()
    assert outcome is not None and outcome.changes["firing"] == 1
    assert the_alert(gf).state is AlertState.FIRING and len(outbox(gf)) == 2


def test_an_owner_is_told_only_their_own_alerts_of_a_group(gf, world, api):
    """A group mixes projects (rule × environment by default); a member sees only the
    alerts naming their projects, so each owner's copy lists theirs alone."""
    api.post("/api/v1/users", json={"name": "sam", "role": "member"})
    api.post("/api/v1/projects/speech/members", json={"user": "sam"})
    sam = api.as_(api.post("/api/v1/tokens", json={"name": "sam", "user": "sam"})
                  .json()["token"])
    code = create(sam, project="speech", count=1, models=["H100-80GB"], duration_hours=24,
                  reason="asr")["code"]
    (speech_gpu,) = [u["gpu_uuid"] for u in act(world.operator, code, "approve")["units"]]
    rule = Rule(for_s=0, group_by=("rule",))
    evaluate(gf, hot(world.gpus[0], gf, rule=rule), hot(speech_gpu, gf, rule=rule),
             rules=[rule])
    told = {recipient: payload for (_, recipient, _), payload in zip(outbox(gf), payloads(gf),
                                                                     strict=True)}
    assert set(told) == {"mia", "sam"}  # the project channels match no mixed group
    assert world.gpus[0] in told["mia"]["text"] and speech_gpu not in told["mia"]["text"]
    assert speech_gpu in told["sam"]["text"] and world.gpus[0] not in told["sam"]["text"]
    assert told["mia"]["summary"].startswith("[FIRING:1] gpu-hot")
    assert told["mia"]["labels"]["project"] == "vision"


def test_a_notification_line_says_the_summary_once(gf, world):
    rule = Rule(for_s=0)
    observation = hot(world.gpus[0], gf, rule=rule)
    evidence = f"{world.gpus[0]} is hot ({observation.evidence})"
    evaluate(gf, replace(observation, evidence=evidence,
                         annotations={"summary": f"{world.gpus[0]} is hot"}), rules=[rule])
    (line,) = payloads(gf)[0]["text"].splitlines()
    assert line.count("is hot") == 1 and "gpu.temperature_c 88 ≥ 87" in line
