"""What the alert tests start from: an allocation held by `mia` of project `vision`,
receivers that route by project and tell owners, and a rule that fires after 5 minutes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from sqlalchemy import select

from gpufleet.domain.operations.notifications import Severity
from gpufleet.domain.operations.observations import Observation
from gpufleet.services.operations.alerts import AlertEvaluation
from gpufleet.store.tables import OutboxMessage, Receiver
from tests.conftest import START
from tests.lifecycle_world import act, create


@dataclass(frozen=True)
class Rule:
    name: str = "gpu-hot"
    severity: Severity = Severity.WARNING
    for_s: float = 300
    labels: dict[str, str] = field(default_factory=dict)
    group_by: tuple[str, ...] = ()
    summary: str = "GPU temperature near slowdown"
    description: str = "Cool it or move the job."


HOT = Rule()


@dataclass(frozen=True)
class World:
    code: str
    gpus: list[str]
    free_gpu: str
    member: object
    operator: object


def add_receiver(session, name, **fields):
    values = dict(kind="webhook", config={}, matchers=[], kinds=[], min_severity="info",
                  broadcast=True, tells_owners=False, enabled=True, created_by="admin",
                  created_at=START)
    values.update(fields)
    session.add(Receiver(name=name, **values))


@pytest.fixture
def world(h100s, api, gf) -> World:
    """`mia` (member of vision) holds GR-… on 2 H100s; receivers: `vision-channel`
    (project=vision), `speech-channel` (project=speech), `inbox` (tells owners)."""
    member, operator = h100s
    code = create(member, count=2, models=["H100-80GB"], same_node=True,
                  duration_hours=24, reason="training")["code"]
    units = act(operator, code, "approve")["units"]
    held = sorted(u["gpu_uuid"] for u in units)
    every = [g["uuid"] for g in api.get("/api/v1/gpus", params={"limit": 100}).json()["items"]]
    with gf.store.write() as s:
        add_receiver(s, "vision-channel", matchers=["project=vision"])
        add_receiver(s, "speech-channel", matchers=["project=speech"])
        add_receiver(s, "inbox", kind="inbox", broadcast=False, tells_owners=True)
    return World(code, held, next(u for u in every if u not in held), member, operator)


def hot(gpu: str, gf, value: float = 88.0, rule: Rule = HOT) -> Observation:
    return Observation(rule=rule.name, labels={"gpu": gpu}, at=gf.clock.now(), value=value,
                       evidence=f"gpu.temperature_c {value:g} ≥ 87")


def evaluate(gf, *observations, rules=(HOT,), evaluated=None):
    names = frozenset(r.name for r in rules) if evaluated is None else frozenset(evaluated)
    return gf.record_alert_evaluation(AlertEvaluation(rules, names, observations))


def outbox(gf) -> list[tuple[str, str | None, str]]:
    """(receiver, recipient, kind) of every queued message, in order."""
    with gf.store.read() as s:
        return [(m.receiver.name, m.recipient, m.kind)
                for m in s.scalars(select(OutboxMessage).order_by(OutboxMessage.id))]


def payloads(gf) -> list[dict]:
    with gf.store.read() as s:
        return [m.payload for m in s.scalars(select(OutboxMessage).order_by(OutboxMessage.id))]
