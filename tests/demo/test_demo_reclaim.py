"""The demo's short reclamation policy: with the demo's settings, a simulated idle-held
notebook is released within ~20 minutes of start, and a training job beside it is not.

The simulator drives the telemetry (its IDLE_HELD and TRAINING workloads), the server's
own round (`gf.reclaim.tick`, what the reclaim loop calls) judges and acts, on a
ManualClock moved a minute at a time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.demo.runner import DEMO_DEFAULTS, demo_settings
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.lifecycle.bindings import desired_state
from gpufleet.sim.backend import SimBackend, standalone_backend
from gpufleet.sim.workloads import WorkloadKind
from gpufleet.store.tables import Node
from gpufleet.tsdb import Sample, series
from gpufleet.wire.requests import RequestCreate
from tests.helpers import create_environment, join_token

SQLITE_ONLY = pytest.mark.parametrize("store", ["sqlite"], indirect=True)


@pytest.fixture
def settings(tmp_path):
    return demo_settings(tmp_path / "demo")


def test_the_demo_settings_carry_a_short_reclamation_policy(settings):
    assert (settings.reclaim_action, settings.reclaim_grace_minutes) == ("release", 5.0)
    assert settings.idle_window_hours * 60 + settings.reclaim_grace_minutes <= 20
    assert DEMO_DEFAULTS["reclaim_interval_s"] <= 60


@SQLITE_ONLY
def test_a_simulated_idle_notebook_is_reclaimed_within_twenty_minutes(api, gf, clock):
    create_environment(api)
    node = standalone_backend("dgx-h100", "node-1", seed=7).node
    registered = api.as_(join_token(api)).post(
        "/api/v1/agent/register",
        json=SimBackend(node).discover().model_dump(mode="json"))
    assert registered.status_code == 200, registered.text
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    codes = []
    for _ in range(2):
        view = gf.lifecycle.create_request(SYSTEM, RequestCreate(project="vision", count=1))
        codes.append(gf.lifecycle.approve(SYSTEM, view.code, None).code)
    notebook, training = codes
    backend = SimBackend(node, clock=clock, fault_rate=0.0, workloads={
        notebook: WorkloadKind.IDLE_HELD, training: WorkloadKind.TRAINING})
    with gf.store.read() as s:
        backend.apply_desired_state(desired_state(s, s.query(Node).one()))

    released_after = None
    for minute in range(1, 31):
        start = clock.now()
        samples = []
        for tick in range(6):  # the agent's 10 s collection
            snapshot = backend.collect(at=start + timedelta(seconds=10 * tick))
            samples += [Sample(series(name, unit.gpu_uuid, unit.mig_uuid, node="node-1",
                                      environment="onprem-hpc", model="H100-80GB"),
                               snapshot.at, value)
                        for unit in snapshot.units for name, value in unit.values.items()
                        if value is not None]
        gf.telemetry.write(samples)
        clock.advance(60)
        gf.telemetry.rollup(clock.now())
        gf.reclaim.tick()
        states = {c: gf.lifecycle.show_request(SYSTEM, c).state for c in codes}
        if states[notebook] == "released" and released_after is None:
            released_after = minute
    assert released_after is not None and released_after <= 22, released_after
    assert gf.lifecycle.show_request(SYSTEM, training).state == "active"
    history = [e.action for e in gf.lifecycle.history(SYSTEM, notebook, None, 50).items]
    assert "reclaim.warned" in history and "request.released" in history
