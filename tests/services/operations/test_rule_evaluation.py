"""Alert rule evaluation on the stores' own data: each rule kind's condition, the owner
annotations from the binding intervals, and a source that cannot answer reported as such
(docs/operations.md, "Alert rules"). Real SQLite and PostgreSQL, the embedded telemetry
store, samples written straight into it, `ManualClock` for time."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from gpufleet.domain.errors import Unavailable
from gpufleet.domain.operations.rule_files import default_rules
from gpufleet.domain.operations.rules import rule_from_mapping
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.operations.rule_evaluation import evaluate
from gpufleet.tsdb import Sample, series
from gpufleet.wire.requests import RequestCreate
from tests.helpers import create_environment, gpu_uuid, register

GIB = 1024**3
ATTRS = {"node": "node-1", "environment": "onprem-hpc", "model": "H100-80GB"}
MINUTES = 20


def rule(**body):
    return rule_from_mapping({"name": "r", "severity": "warning", **body})


def samples(gf, start, uuid, values, *, labels=None, count=MINUTES, every_s=30):
    gf.telemetry.write([
        Sample(series(metric, uuid, labels=labels, **ATTRS),
               start + timedelta(seconds=every_s * n + 5), value(n) if callable(value) else value)
        for n in range(count * 60 // every_s) for metric, value in values.items()])


@pytest.fixture
def world(api, gf, clock):
    """node-1, 4 H100s; vision (owner alice) holds GPU 0. 20 minutes of samples: GPU 0 hot
    (90 °C) and nearly full (78 of 80 GiB), GPU 1 at 60 °C and 10 GiB, GPU 1's XID 79
    counter steps 0 → 1 four minutes before now."""
    create_environment(api)
    register(api, 1, gpus=4)
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    api.post("/api/v1/users", json={"name": "alice", "role": "member"})
    api.post("/api/v1/projects/vision/members", json={"user": "alice"})
    token = api.post("/api/v1/tokens", json={"name": "alice", "user": "alice"}).json()["token"]
    view = gf.lifecycle.create_request(gf.authenticate(token), RequestCreate(
        project="vision", count=1, models=["H100-80GB"]))
    view = gf.lifecycle.approve(SYSTEM, view.code, None)
    held = view.units[0].gpu_uuid
    other = next(gpu_uuid(1, i) for i in range(4) if gpu_uuid(1, i) != held)
    start = clock.now()
    samples(gf, start, held, {"gpu.temperature_celsius": 90.0,
                              "gpu.memory_used_bytes": 78.0 * GIB,
                              "gpu.memory_total_bytes": 80.0 * GIB})
    samples(gf, start, other, {"gpu.temperature_celsius": 60.0,
                               "gpu.memory_used_bytes": 10.0 * GIB,
                               "gpu.memory_total_bytes": 80.0 * GIB})
    samples(gf, start, other, {"gpu.xid_errors_total": lambda n: 0.0 if n < 32 else 1.0},
            labels={"xid": "79"})
    clock.advance(MINUTES * 60)
    return {"held": held, "other": other, "allocation": view.code}


def observed(gf, clock, *rules):
    result = evaluate(gf.queries, list(rules), clock.now())
    assert not result.unavailable, result.unavailable
    assert result.evaluated == [r.name for r in rules if r.enabled]
    return result.observations


def test_threshold_observes_the_units_over_it_with_their_owner(gf, clock, world):
    hot = rule(kind="threshold", metric="gpu.temperature_celsius", op=">=", value=85,
               summary="{gpu} at {value:.0f} °C, held by {owner}")
    [o] = observed(gf, clock, hot)
    assert dict(o.labels) == {"environment": "onprem-hpc", "node": "node-1",
                              "gpu": world["held"]}
    assert o.value == 90.0
    assert o.annotations["allocation"] == world["allocation"]
    assert o.annotations["project"] == "vision"
    assert o.annotations["owner"] == "alice"
    assert o.evidence.startswith(f"{world['held']} at 90 °C, held by alice")
    assert "gpu.temperature_celsius 90 °C ≥ 85 °C" in o.evidence
    assert o.annotations["value"] == "90 °C"  # as `gpufleet alerts show` prints it
    assert observed(gf, clock, rule(kind="threshold", metric="gpu.temperature_celsius",
                                    op=">", value=90)) == []


def test_threshold_as_a_percentage_of_another_metric(gf, clock, world):
    full = rule(kind="threshold", metric="gpu.memory_used_bytes",
                ratio_to="gpu.memory_total_bytes", op=">=", value=95)
    [o] = observed(gf, clock, full)
    assert o.labels["gpu"] == world["held"]
    assert o.value == pytest.approx(97.5)


def test_threshold_aggregated_across_units(gf, clock, world):
    node_hot = rule(kind="threshold", metric="gpu.temperature_celsius", op=">=", value=70,
                    over_time="mean", across="mean", by=["node"], group_by=["rule", "node"])
    [o] = observed(gf, clock, node_hot)
    assert dict(o.labels) == {"node": "node-1"}
    assert o.value == pytest.approx(75.0)


def test_increase_observes_a_new_xid_per_code(gf, clock, world):
    xid = rule(kind="increase", metric="gpu.xid_errors_total", value=1, over="10m",
               summary="XID {xid} on {gpu}")
    [o] = observed(gf, clock, xid)
    assert dict(o.labels) == {"environment": "onprem-hpc", "node": "node-1",
                              "gpu": world["other"], "xid": "79"}
    assert o.value == 1.0
    assert "owner" not in o.annotations  # nobody holds that GPU
    clock.advance(11 * 60)  # the step is now older than the window
    assert observed(gf, clock, xid) == []


def test_matchers_select_observations(gf, clock, world):
    hot = dict(kind="threshold", metric="gpu.temperature_celsius", op=">=", value=50)
    assert len(observed(gf, clock, rule(**hot))) == 2
    [o] = observed(gf, clock, rule(**hot, matchers=["project=vision"]))
    assert o.labels["gpu"] == world["held"]


def test_absence_of_an_agent_and_of_a_metric(gf, clock, world):
    stale = rule(kind="absence", absent="agent", after="5m")
    [o] = observed(gf, clock, stale)  # registered 20 minutes ago, never heartbeated since
    assert dict(o.labels) == {"environment": "onprem-hpc", "node": "node-1"}
    assert o.value == pytest.approx(MINUTES * 60)
    missing = rule(kind="absence", metric="gpu.temperature_celsius", after="2m")
    assert observed(gf, clock, missing) == []
    clock.advance(3 * 60)
    assert {o.labels["gpu"] for o in observed(gf, clock, missing)} == \
        {world["held"], world["other"]}


def test_state_rules(gf, api, clock, world):
    quarantined = rule(kind="state", condition="gpu_quarantined")
    assert observed(gf, clock, quarantined) == []
    response = api.post(f"/api/v1/gpus/{world['other']}/health",
                        json={"health": "quarantined", "reason": "XID 79"})
    assert response.status_code == 200, response.text
    [o] = observed(gf, clock, quarantined)
    assert o.labels["gpu"] == world["other"]
    pending = rule(kind="state", condition="request_pending", after="1h")
    gf.lifecycle.create_request(SYSTEM, RequestCreate(project="vision", count=2,
                                                      models=["H100-80GB"]))
    assert observed(gf, clock, pending) == []
    clock.advance(3600)
    [o] = observed(gf, clock, pending)
    assert o.labels["project"] == "vision" and o.value == pytest.approx(1.0)


def test_unreachable_node(gf, clock, world):
    unreachable = rule(kind="state", condition="node_unreachable")
    assert observed(gf, clock, unreachable) == []
    assert gf.mark_silent_nodes_unreachable() == ["node-1"]
    [o] = observed(gf, clock, unreachable)
    assert dict(o.labels) == {"environment": "onprem-hpc", "node": "node-1"}


def test_efficiency_of_a_project(gf, clock, world):
    """An hour idle, an hour busy, after 20 minutes of unknown activity: 50 % of the
    known allocated hours active."""
    samples(gf, clock.now(), world["held"], {
        "gpu.gr_engine_active": lambda n: 2.0 if n < 60 else 80.0,
        "gpu.sm_active": lambda n: 0.0 if n < 60 else 50.0}, count=120, every_s=60)
    clock.advance(120 * 60)
    gf.telemetry.rollup(clock.now())
    [o] = observed(gf, clock, rule(kind="efficiency", value=60, over="24h"))
    assert dict(o.labels) == {"project": "vision"}
    assert o.value == pytest.approx(50.0)
    assert observed(gf, clock, rule(kind="efficiency", value=50, over="24h")) == []


def test_disabled_rules_are_not_evaluated(gf, clock, world):
    off = rule(kind="threshold", metric="gpu.temperature_celsius", op=">=", value=0,
               enabled=False)
    result = evaluate(gf.queries, [off], clock.now())
    assert result.evaluated == [] and result.observations == []


def test_a_source_that_cannot_answer_is_unavailable_not_empty(gf, clock, world, monkeypatch):
    def down(*args, **kwargs):
        raise Unavailable("the telemetry store is down", code="telemetry_store_unavailable")

    monkeypatch.setattr(gf.telemetry, "query_range", down)
    monkeypatch.setattr(gf.telemetry, "latest", down)
    hot = rule(kind="threshold", metric="gpu.temperature_celsius", op=">=", value=85)
    stale = replace(rule(kind="absence", absent="agent", after="5m"), name="stale")
    result = evaluate(gf.queries, [hot, stale], clock.now())
    assert result.unavailable == {"r": "the telemetry store is down"}
    assert result.evaluated == ["stale"]
    assert [o.rule for o in result.observations] == ["stale"]


def test_the_default_pack_evaluates_on_a_quiet_fleet(gf, clock, world):
    result = evaluate(gf.queries, list(default_rules()), clock.now())
    assert result.unavailable == {}
    assert sorted(result.evaluated) == sorted(r.name for r in default_rules())
    fired = {o.rule for o in result.observations}
    assert {"gpu-memory-saturation", "gpu-thermal-near-slowdown", "gpu-xid-error",
            "agent-stale"} <= fired


def test_quota_nearly_exhausted(api, gf, clock, world):
    response = api.request("PUT", "/api/v1/projects/vision/quotas",
                           json={"flavour": "H100-80GB", "limit": 2})
    assert response.status_code == 200, response.text
    nearly = rule(kind="state", condition="quota_nearly_exhausted", value=50)
    [o] = observed(gf, clock, nearly)  # one H100 of two held
    assert dict(o.labels) == {"project": "vision", "flavour": "H100-80GB"}
    assert o.value == 50.0
    assert observed(gf, clock, rule(kind="state", condition="quota_nearly_exhausted",
                                    value=51)) == []


def test_pool_nearly_exhausted(api, gf, clock, world):
    pool = api.post("/api/v1/pools", json={"project": "vision", "flavour": "H100-80GB",
                                           "count": 2, "reason": "reserved"}).json()
    assert api.post(f"/api/v1/pools/{pool['code']}/approve").json()["state"] == "active"
    nearly = rule(kind="state", condition="pool_nearly_exhausted", value=50)
    assert observed(gf, clock, nearly) == []  # vision's GPU was granted before the pool
    request = api.post("/api/v1/requests", json={"project": "vision", "count": 1,
                                                 "models": ["H100-80GB"]}).json()
    assert api.post(f"/api/v1/requests/{request['code']}/approve").json()["pool"] == \
        pool["code"]
    [o] = observed(gf, clock, nearly)
    assert dict(o.labels) == {"project": "vision", "pool": pool["code"],
                              "flavour": "H100-80GB"}
    assert o.value == 50.0


def test_a_process_on_an_unbound_unit_is_one_alert_a_zombie(gf, clock, world):
    # The two definitions overlap there (docs/operations.md, "Default pack"): the process
    # is told of as a zombie only; activity on an unbound unit is still unattributed.
    third = next(gpu_uuid(1, i) for i in range(4)
                 if gpu_uuid(1, i) not in (world["held"], world["other"]))
    start = clock.now() - timedelta(minutes=MINUTES)
    samples(gf, start, world["other"], {"process.memory_used_bytes": 9.0 * GIB},
            labels={"pid": "4242", "process_name": "python"})
    samples(gf, start, third, {"gpu.gr_engine_active": 80.0})
    gf.telemetry.rollup(clock.now())
    pack = {r.name: r for r in default_rules()}
    zombies = observed(gf, clock, pack["zombie-process"])
    assert [(o.labels["gpu"], o.labels["pid"]) for o in zombies] == [(world["other"], "4242")]
    unattributed = observed(gf, clock, pack["unattributed-usage"])
    assert [(o.labels["gpu"], o.labels["kind"]) for o in unattributed] == [(third, "activity")]
