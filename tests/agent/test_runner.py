"""The agent runner against a stand-in for the server's agent endpoints (no real server:
the end-to-end tests with the real API live with the API's tests)."""

from __future__ import annotations

import asyncio
import logging
import random

import httpx
import pytest

from gpufleet.agent.backoff import Backoff
from gpufleet.agent.client import AgentClient, ApiError, Forbidden, ServerUnavailable, Unauthorized
from gpufleet.agent.runner import AgentRunner, StopReason
from gpufleet.agent.state import AgentState
from gpufleet.sim.backend import standalone_backend
from tests.fake_agent_server import FakeServer

SERVER = "http://gpufleet.test"


class Waits:
    """An injected `wait`: records each delay and stops the runner after `steps` waits."""

    def __init__(self, steps: int):
        self.steps = steps
        self.delays_s: list[float] = []

    async def __call__(self, stop_event: asyncio.Event, delay_s: float) -> bool:
        self.delays_s.append(delay_s)
        if len(self.delays_s) >= self.steps:
            stop_event.set()
        return stop_event.is_set()


def run_agent(server: FakeServer, state_dir, join_token=None, steps=3, backend=None):
    backend = backend or standalone_backend("mig-h100", "node-1", seed=1)
    waits = Waits(steps)

    async def go():
        async with httpx.AsyncClient(transport=server.transport()) as http:
            runner = AgentRunner(SERVER, backend, state_dir, join_token, http=http, wait=waits,
                                 backoff=Backoff(rng=random.Random(0)))
            return await runner.run(asyncio.Event())

    return asyncio.run(go()), waits, backend


def join_token(server: FakeServer) -> str:
    server.environments.add("lab")
    server.join_tokens["join-x"] = "lab"
    return "join-x"


def test_joins_with_a_token_stores_the_credential_and_heartbeats(tmp_path):
    server = FakeServer(heartbeat_interval_s=15.0)
    reason, waits, backend = run_agent(server, tmp_path, join_token(server), steps=3)
    assert reason is StopReason.STOPPED
    credential = AgentState(tmp_path).read_credential()
    assert credential in server.credentials
    assert waits.delays_s == [15.0, 15.0, 15.0]
    assert server.requests == ["/api/v1/agent/register"] + ["/api/v1/agent/heartbeat"] * 2
    registered = server.nodes[backend.discover().machine_id]
    assert registered.agent_version and registered.backend == "sim"


def test_a_restart_reuses_the_stored_credential(tmp_path):
    server = FakeServer()
    run_agent(server, tmp_path, join_token(server), steps=1)
    reason, _, _ = run_agent(server, tmp_path, join_token=None, steps=2)
    assert reason is StopReason.STOPPED
    assert len(server.credentials) == 1  # no second credential was issued
    assert server.requests.count("/api/v1/agent/register") == 2


def test_without_credential_or_join_token_it_stops_clearly(tmp_path, caplog):
    reason, _, _ = run_agent(FakeServer(), tmp_path, join_token=None)
    assert reason is StopReason.NOT_JOINED
    assert "Start the agent with a join token" in caplog.text


def test_a_rejected_stored_credential_stops_with_an_operator_message(tmp_path, caplog):
    AgentState(tmp_path).save_credential("revoked")
    with caplog.at_level(logging.ERROR):
        reason, _, _ = run_agent(FakeServer(), tmp_path)
    assert reason is StopReason.UNAUTHORIZED
    assert "rejected this node's credential" in caplog.text
    assert str(tmp_path / "credential") in caplog.text


def test_a_used_join_token_stops(tmp_path, caplog):
    reason, _, _ = run_agent(FakeServer(), tmp_path, join_token="join-used")
    assert reason is StopReason.UNAUTHORIZED
    assert "rejected the join token" in caplog.text


def test_an_unavailable_server_is_retried_with_growing_backoff(tmp_path):
    server = FakeServer(fail_next=4)
    reason, waits, _ = run_agent(server, tmp_path, join_token(server), steps=6)
    assert reason is StopReason.STOPPED
    retries = waits.delays_s[:4]
    assert all(0.5 <= d <= 1.0 for d in retries[:1]) and 4.0 <= retries[3] <= 8.0
    assert retries == sorted(retries)
    assert waits.delays_s[4:] == [30.0, 30.0]  # registered, then heart-beating
    assert AgentState(tmp_path).read_credential() is not None


def test_transport_errors_are_retried_never_raised(tmp_path):
    calls = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("connection refused", request=request)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as http:
            runner = AgentRunner(SERVER, standalone_backend("l40s-4", "n"), tmp_path, "join-x",
                                 http=http, wait=Waits(5))
            return await runner.run(asyncio.Event())

    assert asyncio.run(go()) is StopReason.STOPPED
    assert len(calls) == 5


def test_desired_state_is_applied_and_its_version_reported(tmp_path):
    server = FakeServer()
    token = join_token(server)
    backend = standalone_backend("mig-h100", "node-1", seed=1)
    uuid = backend.discover().gpus[0].uuid
    server.desired_version = 4
    server.mig_plans = [{"gpu_uuid": uuid, "instances": [
        {"profile_id": 0, "placement_start": 0}]}]
    run_agent(server, tmp_path, token, steps=3, backend=backend)
    assert backend.applied_version == 4
    assert [(i.profile_name) for i in backend.discover().gpus[0].mig_instances] == ["7g.80gb"]
    # The new instances have new MIG UUIDs: the agent registers again to report them.
    registered = server.nodes[backend.discover().machine_id].gpus[0].mig_instances
    assert [i.profile_name for i in registered] == ["7g.80gb"]
    assert server.requests.count("/api/v1/agent/register") == 2
    assert [hb.applied_desired_state_version for _, hb in server.heartbeats] == [4]


def test_a_refused_desired_state_is_not_reported_as_applied(tmp_path, caplog):
    server = FakeServer()
    token = join_token(server)
    backend = standalone_backend("mig-h100", "node-1", seed=1)
    uuid = backend.discover().gpus[0].uuid
    server.desired_version = 5
    server.mig_plans = [{"gpu_uuid": uuid, "instances": [
        {"profile_id": 0, "placement_start": 0}, {"profile_id": 19, "placement_start": 0}]}]
    run_agent(server, tmp_path, token, steps=3, backend=backend)
    assert [hb.applied_desired_state_version for _, hb in server.heartbeats] == [None, None]
    assert caplog.text.count("desired state version 5 not applied") == 1


@pytest.mark.parametrize("status, body, kind, code", [
    (401, {"error": {"code": "token_expired", "message": "expired", "details": {}}},
     Unauthorized, "token_expired"),
    (403, {"error": {"code": "machine_id_mismatch", "message": "other", "details": {}}},
     Forbidden, "machine_id_mismatch"),
    (409, {"error": {"code": "gpu_claimed_by_other_node", "message": "claimed",
                     "details": {"gpus": ["GPU-1"]}}}, ApiError, "gpu_claimed_by_other_node"),
    (404, "<html>not here</html>", ApiError, "http_404"),
    (503, {"error": {"code": "unavailable", "message": "busy", "details": {}}},
     ServerUnavailable, None),
])
def test_client_errors_carry_code_and_message(status, body, kind, code):
    def answer(request):
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
            await AgentClient(SERVER, http).register(
                "token", standalone_backend("l40s-4", "n").discover())

    with pytest.raises(kind) as caught:
        asyncio.run(go())
    if code is not None:
        assert caught.value.code == code and caught.value.status_code == status
    if status == 409:
        assert caught.value.details == {"gpus": ["GPU-1"]}
