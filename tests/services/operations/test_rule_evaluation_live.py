"""State rules over the live questions — the idle list, zombie processes, unattributed
usage — observe exactly what those lists hold, with the lists' own facts as labels and
annotations (tests/services/telemetry/test_queries.py's fleet)."""

from __future__ import annotations

from gpufleet.domain.operations.rules import rule_from_mapping
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.operations.rule_evaluation import evaluate
from tests.services.telemetry.test_queries import fleet  # noqa: F401  (the fixture)


def observed(gf, clock, condition: str):
    rule = rule_from_mapping({"name": condition.replace("_", "-"), "kind": "state",
                              "condition": condition})
    result = evaluate(gf.queries, [rule], clock.now())
    assert result.evaluated == [rule.name], result.unavailable
    return result.observations


def test_idle_allocations(gf, clock, fleet):  # noqa: F811
    [o] = observed(gf, clock, "idle_allocation")
    assert o.labels["allocation"] == fleet["speech"] and o.annotations["gpus"] == fleet["idle"]
    assert o.annotations["state"] == "idle_held"
    assert o.value == 5.0  # idle since the allocation started, 5 h ago


def test_zombies_and_unattributed_usage(gf, clock, fleet):  # noqa: F811
    zombies = {(z.gpu_uuid, str(z.pid), z.reason) for z in gf.queries.zombies(SYSTEM)}
    assert zombies  # the fleet has some: the test must be able to fail
    assert {(o.labels["gpu"], o.labels["pid"], o.annotations["reason"])
            for o in observed(gf, clock, "zombie_process")} == zombies
    unattributed = {(u.gpu_uuid, u.kind, u.reason) for u in gf.queries.unattributed(SYSTEM)
                    if (u.kind, u.reason) != ("process", "unbound")}  # a zombie's alert
    assert unattributed
    assert {(o.labels["gpu"], o.labels["kind"], o.annotations["reason"])
            for o in observed(gf, clock, "unattributed_usage")} == unattributed
