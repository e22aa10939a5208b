"""The agent's telemetry against the real server app over real HTTP (ASGI): batches are
stored and acknowledged, a replay from the spool is not counted twice, --once works, and
the simulated fleet's agents upload through the same uploader."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from gpufleet.agent.runner import AgentRunner, StopReason
from gpufleet.agent.spool import Spool
from gpufleet.agent.telemetry_loop import TelemetryOptions
from gpufleet.api.app import create_app
from gpufleet.sim.backend import SimBackend, standalone_backend
from gpufleet.sim.fleet_runner import FleetTelemetry, run_simulated_fleet
from gpufleet.sim.fleet_spec import parse_spec_text
from gpufleet.wire import telemetry_batch
from tests.helpers import create_environment, join_token

SERVER = "http://gpufleet.test"
OPTIONS = TelemetryOptions(collect_interval_s=10, upload_interval_s=30)
SQLITE_ONLY = pytest.mark.parametrize("store", ["sqlite"], indirect=True)


def asgi_http(gf) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(
        gf, background_loops=False)), base_url=SERVER)


def sim_backend(clock, shape="dgx-h100", hostname="dgx-tel-1") -> SimBackend:
    node = standalone_backend(shape, hostname, seed=7).node
    return SimBackend(node, clock=clock)  # the server's clock: samples are "now"


def ticking(clock, count: int):
    """A telemetry wait that advances the test clock a tick and stops after `count`."""
    ticks = []

    async def wait(stop_event: asyncio.Event, delay_s: float) -> bool:
        ticks.append(delay_s)
        clock.advance(OPTIONS.collect_interval_s)
        if len(ticks) >= count:
            stop_event.set()
        await asyncio.sleep(0)
        return stop_event.is_set()

    return wait


async def until_halted(stop_event: asyncio.Event, _delay_s: float) -> bool:
    await stop_event.wait()
    return True


@SQLITE_ONLY
def test_the_agent_uploads_batches_the_server_stores(api, gf, clock, tmp_path):
    create_environment(api)
    backend = sim_backend(clock)

    async def scenario():
        async with asgi_http(gf) as http:
            runner = AgentRunner(SERVER, backend, tmp_path, join_token(api), http=http,
                                 wait=until_halted, telemetry=OPTIONS,
                                 telemetry_wait=ticking(clock, 6))
            return await runner.run(asyncio.Event()), runner

    reason, runner = asyncio.run(scenario())
    assert reason is StopReason.STOPPED
    counters = runner.telemetry.uploader.counters
    assert counters.batches_acknowledged == 2 and counters.batches_refused == 0
    assert counters.samples_stored > 1000 and counters.samples_dropped_by_server == 0
    latest = gf.telemetry.latest(metric="gpu.power_usage_watts")
    assert {v.series.node for v in latest} == {"dgx-tel-1"} and len(latest) == 8
    assert Spool(tmp_path / "spool").pending() == []


@SQLITE_ONLY
def test_a_spooled_batch_replayed_after_its_ack_was_lost_is_not_counted_twice(
        api, gf, clock, tmp_path):
    create_environment(api)
    backend = sim_backend(clock, "l40s-8", "l40s-tel-1")

    async def scenario():
        async with asgi_http(gf) as http:
            runner = AgentRunner(SERVER, backend, tmp_path, join_token(api), http=http,
                                 telemetry=OPTIONS)
            first = await runner.run_once()
            # The server stored it but the agent never saw the ack: the batch is still spooled.
            stored = telemetry_batch.encode(telemetry_batch.columnar("lost-ack", [
                backend.collect()]))
            spool = Spool(tmp_path / "spool")
            spool.put("lost-ack", stored)
            await runner.telemetry.uploader.upload(runner.session.credential)
            spool.put("lost-ack", stored)
            clock.advance(10)
            second = await runner.run_once()
            return first, second, runner.telemetry.uploader.counters

    first, second, counters = asyncio.run(scenario())
    assert first.ok and second.ok, (first.message, second.message)
    assert counters.batches_duplicate == 1
    assert Spool(tmp_path / "spool").pending() == []


FLEET = """
seed: 5
environments:
  - {name: onprem-hpc, kind: onprem, default_sharing_mode: exclusive}
node_groups:
  - {environment: onprem-hpc, shape: dgx-h100, count: 2, hostname_prefix: dgx}
  - {environment: onprem-hpc, shape: l40s-8, count: 2, hostname_prefix: inf}
"""


@SQLITE_ONLY
def test_the_simulated_fleet_uploads_telemetry(api, gf, clock, admin_token, tmp_path):
    spec = parse_spec_text(FLEET)

    async def scenario():
        stop = asyncio.Event()

        async def sleep(_delay_s: float) -> None:
            await asyncio.sleep(0)
            if len({v.series.node for v in gf.telemetry.latest(
                    metric="gpu.temperature_celsius")}) >= 4:
                stop.set()

        async with asgi_http(gf) as http:
            return await run_simulated_fleet(
                SERVER, admin_token, spec, tmp_path, stop, concurrency=2, http=http,
                sleep=sleep, rng=random.Random(0),
                telemetry=FleetTelemetry(interval_s=60, clock=clock))

    final = asyncio.run(scenario())
    assert final.telemetry_batches_acknowledged >= 4
    assert final.telemetry_batches_failed == 0
    nodes = {v.series.node for v in gf.telemetry.latest(metric="gpu.temperature_celsius")}
    assert nodes == {"dgx-001", "dgx-002", "inf-001", "inf-002"}
