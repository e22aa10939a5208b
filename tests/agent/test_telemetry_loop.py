"""The runner's telemetry loop beside its heartbeats, against a stand-in server; ticks are
driven by an injected wait, never by the clock."""

from __future__ import annotations

import asyncio
import random

import httpx

from gpufleet.agent.backend import SourceUnavailable
from gpufleet.agent.backoff import Backoff
from gpufleet.agent.runner import AgentRunner, StopReason
from gpufleet.agent.spool import Spool
from gpufleet.agent.telemetry_loop import TelemetryLoop, TelemetryOptions
from gpufleet.sim.backend import standalone_backend
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH
from tests.fake_agent_server import FakeServer

SERVER = "http://gpufleet.test"
OPTIONS = TelemetryOptions(collect_interval_s=10, upload_interval_s=30)


async def until_halted(stop_event: asyncio.Event, _delay_s: float) -> bool:
    """The heartbeat wait: no heartbeat after the registration; the telemetry ticks decide."""
    await stop_event.wait()
    return True


class Ticks:
    """The telemetry wait: stops the agent after `count` ticks (each a collection)."""

    def __init__(self, count: int, on_tick=None):
        self.count = count
        self.delays_s: list[float] = []
        self.on_tick = on_tick

    async def __call__(self, stop_event: asyncio.Event, delay_s: float) -> bool:
        self.delays_s.append(delay_s)
        if self.on_tick is not None:
            self.on_tick(len(self.delays_s))
        if len(self.delays_s) >= self.count:
            stop_event.set()
        await asyncio.sleep(0)
        return stop_event.is_set()


def joined_server() -> FakeServer:
    server = FakeServer()
    server.environments.add("lab")
    server.join_tokens["join-x"] = "lab"
    return server


def run(server: FakeServer, state_dir, ticks: Ticks, backend=None, options=OPTIONS,
        snapshots: list | None = None) -> tuple[StopReason, AgentRunner]:
    backend = backend or standalone_backend("l40s-8", "node-1", seed=1)

    async def go():
        async with httpx.AsyncClient(transport=server.transport()) as http:
            runner = AgentRunner(SERVER, backend, state_dir, "join-x", http=http,
                                 wait=until_halted, telemetry=options, telemetry_wait=ticks,
                                 on_snapshot=snapshots.append if snapshots is not None else None)
            runner.telemetry.backoff = Backoff(initial_s=30, max_s=120, rng=random.Random(0))
            return await runner.run(asyncio.Event()), runner

    return asyncio.run(go())


def test_collects_each_tick_and_uploads_a_batch_every_three(tmp_path):
    server = joined_server()
    seen: list = []
    reason, runner = run(server, tmp_path, Ticks(7), snapshots=seen)
    assert reason is StopReason.STOPPED
    assert [len(b.times_ms) for b in server.batches] == [3, 3]
    assert len(seen) == 7 and all(len(s.units) == 8 for s in seen)
    # The 7th tick was buffered at the stop: sealed into the spool for the next start.
    assert len(Spool(tmp_path / "spool").pending()) == 1
    assert server.requests[0] == "/api/v1/agent/register"
    assert runner.telemetry.uploader.counters.collections == 7


def test_a_failing_collection_is_counted_and_the_loop_goes_on(tmp_path, caplog):
    backend = standalone_backend("l40s-8", "node-1", seed=1)
    real_collect, calls = backend.collect, []

    def flaky_collect():
        calls.append(1)
        if len(calls) == 2:
            raise SourceUnavailable("exporter down")
        if len(calls) == 3:
            raise RuntimeError("a bug in the backend")
        return real_collect()

    backend.collect = flaky_collect
    server = joined_server()
    reason, runner = run(server, tmp_path, Ticks(8), backend=backend)
    assert reason is StopReason.STOPPED
    counters = runner.telemetry.uploader.counters
    assert (counters.collections, counters.collections_failed) == (6, 2)
    assert "exporter down" in caplog.text
    # The failed ticks leave the first batch short: it is sealed on time, with 2 ticks.
    assert [len(b.times_ms) for b in server.batches] == [2, 3]


def test_an_unavailable_server_is_retried_after_a_backoff_and_replayed_in_order(tmp_path):
    server = joined_server()
    server.telemetry_fail_next = 2
    reason, runner = run(server, tmp_path, Ticks(19))
    assert reason is StopReason.STOPPED
    times = [t for b in server.batches for t in b.times_ms]
    assert times == sorted(times) and len(times) == 18
    assert runner.telemetry.uploader.counters.uploads_failed == 2


def test_a_failed_upload_is_first_retried_within_the_servers_rollup_grace():
    """At the default 60 s upload interval a first retry one interval later could land after
    the server folded the batch's minutes (its rollup grace is 120 s): it comes after 30 s
    at most (15–30 s with jitter)."""
    for upload_s, first_retry_cap_s in ((60.0, 30.0), (10.0, 10.0)):
        loop = TelemetryLoop(None, None, lambda: None,
                             TelemetryOptions(upload_interval_s=upload_s), wait=None)
        assert loop.backoff.initial_s == first_retry_cap_s
    assert TelemetryOptions().upload_interval_s == 60.0


def test_a_rejected_credential_on_upload_stops_the_agent(tmp_path, caplog):
    server = joined_server()
    server.telemetry_status = 401
    reason, _ = run(server, tmp_path, Ticks(50))
    assert reason is StopReason.UNAUTHORIZED
    assert "rejected this node's credential" in caplog.text
    assert len(Spool(tmp_path / "spool").pending()) == 1  # kept for after a re-join


def test_a_backend_without_collect_runs_heartbeats_only(tmp_path):
    class InventoryOnly:
        name = "inventory-only"

        def __init__(self):
            self.inner = standalone_backend("l40s-8", "node-1", seed=1)

        def discover(self):
            return self.inner.discover()

        def apply_desired_state(self, state):
            self.inner.apply_desired_state(state)

    server = joined_server()
    heartbeats_before = len(server.heartbeats)

    async def go():
        async with httpx.AsyncClient(transport=server.transport()) as http:
            runner = AgentRunner(SERVER, InventoryOnly(), tmp_path, "join-x", http=http,
                                 wait=Ticks(3), telemetry=OPTIONS)
            assert runner.telemetry is None
            return await runner.run(asyncio.Event())

    assert asyncio.run(go()) is StopReason.STOPPED
    assert len(server.heartbeats) > heartbeats_before
    assert TELEMETRY_BATCHES_PATH not in server.requests


def test_once_uploads_one_tick_and_what_the_spool_kept(tmp_path):
    server = joined_server()
    server.telemetry_fail_next = 1
    backend = standalone_backend("l40s-8", "node-1", seed=1)

    async def once(join_token):
        async with httpx.AsyncClient(transport=server.transport()) as http:
            runner = AgentRunner(SERVER, backend, tmp_path, join_token, http=http,
                                 telemetry=OPTIONS)
            return await runner.run_once()

    first = asyncio.run(once("join-x"))
    assert not first.ok and "kept in the spool" in first.message
    second = asyncio.run(once(None))  # the stored credential; the spool is replayed first
    assert second.ok, second.message
    assert [len(b.times_ms) for b in server.batches] == [1, 1]
    assert server.batches[0].times_ms < server.batches[1].times_ms


def test_once_registers_again_when_its_batch_names_gpus_the_registration_lacks(tmp_path):
    server = joined_server()
    server.stale_registrations = 2  # the first registration is already stale (MIG changed)

    async def once():
        async with httpx.AsyncClient(transport=server.transport()) as http:
            runner = AgentRunner(SERVER, standalone_backend("l40s-8", "node-1", seed=1),
                                 tmp_path, "join-x", http=http, telemetry=OPTIONS)
            return await runner.run_once()

    result = asyncio.run(once())
    assert result.ok, result.message
    assert server.requests.count("/api/v1/agent/register") == 2
    assert len(server.batches) == 1


def test_once_without_a_join_token_says_so(tmp_path):
    async def once():
        async with httpx.AsyncClient(transport=FakeServer().transport()) as http:
            runner = AgentRunner(SERVER, standalone_backend("l40s-8", "n", seed=1), tmp_path,
                                 http=http, telemetry=OPTIONS)
            return await runner.run_once()

    result = asyncio.run(once())
    assert not result.ok and result.reason is StopReason.NOT_JOINED


def test_a_forbidden_batch_is_dropped_and_the_node_registers_again(tmp_path, caplog):
    server = joined_server()
    server.telemetry_status = 403
    registrations: list[int] = []

    def count_registrations(_tick: int) -> None:
        registrations.append(server.requests.count("/api/v1/agent/register"))

    async def beat_now(stop_event: asyncio.Event, _delay_s: float) -> bool:
        await asyncio.sleep(0)  # heartbeats (and re-registrations) keep pace with the ticks
        return stop_event.is_set()

    backend = standalone_backend("l40s-8", "node-1", seed=1)

    async def go():
        async with httpx.AsyncClient(transport=server.transport()) as http:
            runner = AgentRunner(SERVER, backend, tmp_path, "join-x", http=http,
                                 wait=beat_now, telemetry=OPTIONS,
                                 telemetry_wait=Ticks(7, count_registrations))
            return await runner.run(asyncio.Event()), runner

    reason, runner = asyncio.run(go())
    assert reason is StopReason.STOPPED  # not a credential problem: the agent goes on
    assert runner.telemetry.uploader.counters.batches_refused == 2
    assert registrations[-1] >= 2
    assert "registering again" in caplog.text
