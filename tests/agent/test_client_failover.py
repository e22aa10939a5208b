"""The agent's client with several server URLs (replicas): it moves to the next one when a
server cannot be reached or answers 502/503/504, keeps to the one that answered, and sends
the very same request there (docs/deployment.md, "Agents")."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gpufleet.agent.client import (
    AgentClient,
    ApiError,
    ServerUnavailable,
    Unauthorized,
    server_urls,
)
from gpufleet.agent.runner import AgentRunner, StopReason
from gpufleet.agent.state import AgentState
from gpufleet.sim.backend import standalone_backend
from gpufleet.wire.agent import Heartbeat
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH
from tests.agent.test_runner import Waits, join_token
from tests.fake_agent_server import FakeServer

A, B, C = "http://a.test", "http://b.test", "http://c.test"
HEARTBEAT_REPLY = {"node": "n1", "node_status": "ready", "heartbeat_interval_s": 30.0,
                   "desired_state": {"version": 0, "bindings": [], "mig_plans": []}}


class Replicas:
    """A MockTransport handler: each host answers as told (a status, or None: refuse the
    connection), and every request is recorded as (host, path, body)."""

    def __init__(self, **answers: int | None):
        self.answers = answers
        self.seen: list[tuple[str, str, bytes]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host.split(".")[0]
        self.seen.append((host, request.url.path, request.content))
        status = self.answers[host]
        if status is None:
            raise httpx.ConnectError("connection refused", request=request)
        if status == 200:
            return httpx.Response(200, json=HEARTBEAT_REPLY)
        return httpx.Response(status, json={"error": {"code": f"e{status}", "message": "no"}})

    def hosts(self) -> list[str]:
        return [host for host, _, _ in self.seen]


def heartbeat(replicas: Replicas, servers, calls: int = 1) -> AgentClient:
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(replicas)) as http:
            client = AgentClient(servers, http)
            for _ in range(calls):
                await client.heartbeat("cred", Heartbeat())
            return client

    return asyncio.run(go())


@pytest.mark.parametrize(("given", "urls"), [
    ("http://a.test/", [A]),
    (f"{A},{B}", [A, B]),
    ([A, f" {B} , ", A], [A, B]),
    ([f"{A},{C}", B], [A, C, B]),
], ids=["one", "comma-separated", "repeated-and-blank", "both-forms"])
def test_server_urls_in_order(given, urls):
    assert server_urls(given) == urls


@pytest.mark.parametrize("given", ["", " , ", "a.test:8080", "ftp://a.test"])
def test_server_urls_refuse_none_or_not_http(given):
    with pytest.raises(ValueError):
        server_urls(given)


@pytest.mark.parametrize("refusal", [None, 502, 503, 504],
                         ids=["unreachable", "502", "503", "504"])
def test_moves_to_the_next_server_and_stays_there(refusal):
    replicas = Replicas(a=refusal, b=200)
    client = heartbeat(replicas, [A, B], calls=3)
    assert replicas.hosts() == ["a", "b", "b", "b"]
    assert client.server_url == B


@pytest.mark.parametrize(("status", "error"), [(500, ServerUnavailable), (429, ServerUnavailable),
                                               (401, Unauthorized), (409, ApiError)])
def test_other_answers_are_the_callers_without_trying_another_server(status, error):
    replicas = Replicas(a=status, b=200)
    with pytest.raises(error):
        heartbeat(replicas, [A, B])
    assert replicas.hosts() == ["a"]


def test_when_no_server_answers_each_is_tried_once_per_request():
    replicas = Replicas(a=None, b=503, c=None)
    with pytest.raises(ServerUnavailable) as unavailable:
        heartbeat(replicas, [A, B, C])
    assert replicas.hosts() == ["a", "b", "c"]
    assert unavailable.value.failover


def test_a_telemetry_batch_goes_to_the_next_server_unchanged():
    replicas = Replicas(a=504, b=200)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(replicas)) as http:
            with pytest.raises(ApiError):  # the stand-in answers a heartbeat reply
                await AgentClient([A, B], http).upload_telemetry("cred", b"gzip-bytes")

    asyncio.run(go())
    assert [(host, path) for host, path, _ in replicas.seen] == [
        ("a", TELEMETRY_BATCHES_PATH), ("b", TELEMETRY_BATCHES_PATH)]
    assert replicas.seen[0][2] == replicas.seen[1][2] == b"gzip-bytes"


def test_the_runner_registers_and_heartbeats_through_the_replica_that_answers(tmp_path):
    server = FakeServer(heartbeat_interval_s=15.0)
    token = join_token(server)

    def first_down(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a.test":
            raise httpx.ConnectError("connection refused", request=request)
        return server.handle(request)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(first_down)) as http:
            runner = AgentRunner([A, B], standalone_backend("l40s-4", "n1"), tmp_path, token,
                                 http=http, wait=Waits(3))
            return await runner.run(asyncio.Event())

    assert asyncio.run(go()) is StopReason.STOPPED
    assert AgentState(tmp_path).read_credential() is not None
    assert len(server.heartbeats) == 2  # registered once, then two heartbeats via b
