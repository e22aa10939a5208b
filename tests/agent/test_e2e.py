"""The agent and the simulated fleet against the real server app, over real HTTP (ASGI).

The agent-side unit tests use a stand-in server; these prove the two ends agree: a real
join, a stored credential, idempotent re-registration after a restart, heartbeats that
keep a node reachable, and a revoked credential that stops the agent.
"""

from __future__ import annotations

import asyncio
import stat

import httpx
import pytest

from gpufleet.agent.runner import AgentRunner, StopReason
from gpufleet.api.app import create_app
from gpufleet.sim.backend import standalone_backend
from gpufleet.sim.fleet_runner import run_simulated_fleet
from gpufleet.sim.fleet_spec import parse_spec_text
from gpufleet.store.tables import MigPlan
from tests.helpers import create_environment, join_token

SERVER = "http://gpufleet.test"


def asgi_http(gf) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(
        gf, background_loops=False)), base_url=SERVER)


async def run_briefly(runner: AgentRunner, heartbeats: int = 1) -> StopReason:
    """Run the agent loop until it has sent `heartbeats` heartbeats (no real waiting)."""
    stop = asyncio.Event()
    steps = 0

    async def no_wait(stop_event: asyncio.Event, _delay_s: float) -> bool:
        nonlocal steps
        steps += 1
        if steps > heartbeats:
            stop_event.set()
        return stop_event.is_set()

    runner._wait = no_wait
    return await runner.run(stop)


def test_agent_joins_stores_credential_and_reregisters(api, gf, tmp_path):
    create_environment(api)
    token = join_token(api)
    backend = standalone_backend("dgx-h100", "dgx-test-1", seed=7)
    state_dir = tmp_path / "agent"

    async def scenario():
        async with asgi_http(gf) as http:
            first = AgentRunner(SERVER, backend, state_dir, join_token=token, http=http)
            assert await run_briefly(first) is StopReason.STOPPED
            credential_file = first.state.credential_path
            assert stat.S_IMODE(credential_file.stat().st_mode) == 0o600
            # A restart: the spent join token is still passed, the credential wins.
            second = AgentRunner(SERVER, backend, state_dir, join_token=token, http=http)
            assert await run_briefly(second, heartbeats=2) is StopReason.STOPPED

    asyncio.run(scenario())
    node = api.get("/api/v1/nodes/dgx-test-1").json()
    assert node["status"] == "ready"
    assert node["gpus"] == 8
    assert api.get("/api/v1/fleet/summary").json()["total_gpus"] == 8
    registered = [e for e in api.get("/api/v1/audit-events?action=node.registered")
                  .json()["items"] if e["subject"] == "dgx-test-1"]
    assert len(registered) == 1


def test_revoked_credential_stops_the_agent(api, gf, tmp_path):
    create_environment(api)
    backend = standalone_backend("l40s-8", "inf-test-1", seed=1)

    async def scenario() -> StopReason:
        async with asgi_http(gf) as http:
            runner = AgentRunner(SERVER, backend, tmp_path, join_token=join_token(api),
                                 http=http)
            await runner.register()
            agent_tokens = api.get("/api/v1/tokens", params={"kind": "agent"}).json()["items"]
            assert api.post(f"/api/v1/tokens/{agent_tokens[0]['id']}/revoke").status_code == 200
            return await run_briefly(runner)

    assert asyncio.run(scenario()) is StopReason.UNAUTHORIZED


def test_silent_node_becomes_unreachable_and_returns(api, gf, clock, tmp_path):
    create_environment(api)
    backend = standalone_backend("hgx-a100", "hgx-test-1", seed=3)

    async def join_then_beat() -> None:
        async with asgi_http(gf) as http:
            runner = AgentRunner(SERVER, backend, tmp_path, join_token=join_token(api),
                                 http=http)
            await runner.register()
            clock.advance(30 * 3 + 1)
            assert gf.mark_silent_nodes_unreachable() == ["hgx-test-1"]
            assert api.get("/api/v1/nodes/hgx-test-1").json()["status"] == "unreachable"
            reply = await runner.heartbeat_once()
            assert reply.node_status == "ready"
            assert reply.desired_state.version >= 1

    asyncio.run(join_then_beat())
    gpus = api.get("/api/v1/gpus?node=hgx-test-1").json()["items"]
    assert {g["status"] for g in gpus} == {"free"}


SMALL_FLEET = """
seed: 11
environments:
  - {name: onprem-hpc, kind: onprem, default_sharing_mode: exclusive}
  - {name: onprem-slicing, kind: onprem, default_sharing_mode: shared}
node_groups:
  - {environment: onprem-hpc, shape: dgx-h100, count: 3, hostname_prefix: dgx}
  - environment: onprem-slicing
    shape: mig-h100
    count: 2
    hostname_prefix: mig
    mig_layouts: [["3g.40gb", "3g.40gb"], ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]]
"""


@pytest.mark.parametrize("concurrency", [1, 4])
def test_simulated_fleet_registers_every_node(api, gf, admin_token, tmp_path, concurrency):
    spec = parse_spec_text(SMALL_FLEET)
    seen = []

    async def scenario():
        stop = asyncio.Event()

        def on_progress(progress):
            seen.append(progress.phase)
            if progress.phase == "running":
                stop.set()

        async with asgi_http(gf) as http:
            return await run_simulated_fleet(SERVER, admin_token, spec, tmp_path, stop,
                                             concurrency=concurrency, on_progress=on_progress,
                                             http=http)

    final = asyncio.run(scenario())
    assert final.nodes_registered == 5
    assert "running" in seen
    summary = api.get("/api/v1/fleet/summary").json()
    assert summary["total_gpus"] == spec.gpu_count == 40
    mig = api.get("/api/v1/gpus?sharing_mode=mig&limit=100").json()["items"]
    assert len(mig) == 16
    assert all(g["mig_instances"] for g in mig)


def test_mig_plan_is_applied_by_the_sim_agent_and_learned_back(api, gf, tmp_path):
    """A MIG grant on a MIG-enabled GPU without instances: the plan reaches the agent in its
    heartbeat reply, the simulator creates the instances, the agent registers again, and
    the allocation's exports carry the new MIG device UUIDs; the applied plan is retired."""
    create_environment(api, name="onprem-slicing", default_sharing_mode="shared")
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    backend = standalone_backend("mig-h100", "mig-test-1", seed=5)
    # Start from GPUs with MIG on and no instances: every grant needs a plan.
    registration = backend.discover()
    backend._registration = registration.model_copy(update={"gpus": [
        gpu.model_copy(update={"mig_instances": []}) for gpu in registration.gpus]})

    async def scenario():
        async with asgi_http(gf) as http:
            runner = AgentRunner(SERVER, backend, tmp_path,
                                 join_token=join_token(api, "onprem-slicing"), http=http)
            await runner.register()
            created = api.post("/api/v1/requests", json={
                "project": "vision", "count": 4, "mig_profile": "1g.10gb"}).json()
            granted = api.post(f"/api/v1/requests/{created['code']}/approve").json()
            assert granted["state"] == "active"
            assert granted["exports"]["CUDA_VISIBLE_DEVICES"].startswith("pending:")
            await run_briefly(runner, heartbeats=3)
            return created["code"]

    code = asyncio.run(scenario())
    shown = api.get(f"/api/v1/requests/{code}").json()
    devices = shown["exports"]["CUDA_VISIBLE_DEVICES"].split(",")
    assert len(devices) == 4 and all(d.startswith("MIG-") for d in devices)
    reported = {(i.profile_id, i.placement_start) for g in backend.discover().gpus
                for i in g.mig_instances}
    assert {(u["mig_profile_id"], u["mig_start"]) for u in shown["units"]} <= reported
    with gf.store.read() as session:  # the plan is done: the node's report rules again
        assert session.query(MigPlan).count() == 0
