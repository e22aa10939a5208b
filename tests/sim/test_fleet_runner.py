"""Many simulated agents in one process, against a stand-in for the server's endpoints."""

from __future__ import annotations

import asyncio
import json
import random
import stat

import httpx
import pytest

from gpufleet.agent.backoff import Backoff
from gpufleet.agent.telemetry_uploader import UploadOutcome
from gpufleet.sim.fleet_runner import (
    FleetProgress,
    FleetTelemetry,
    next_due_s,
    run_simulated_fleet,
    tick_on_schedule,
)
from gpufleet.sim.fleet_spec import parse_spec_text
from gpufleet.sim.operator_api import OperatorApi, OperatorApiError
from tests.fake_agent_server import FakeServer

SPEC = parse_spec_text("""
seed: 11
environments:
  - {name: lab, kind: onprem}
  - {name: cloud, kind: cloud, provider: azure, region: koreacentral}
node_groups:
  - {environment: lab, shape: dgx-h100, count: 5, hostname_prefix: dgx}
  - {environment: lab, shape: mig-a100, count: 2, hostname_prefix: mig}
  - {environment: cloud, shape: azure-nc-a100-v4, count: 6, hostname_prefix: nc}
""")
NODES = 13
GPUS = 5 * 8 + 2 * 8 + 6 * 4


def run_fleet(server: FakeServer, state_dir, heartbeats: int = 30, token="operator-token",
              spec=SPEC, progress: list | None = None,
              telemetry: FleetTelemetry | None = None, until=None) -> FleetProgress:
    """Run until the server saw `heartbeats` more heartbeats (or `until()`); sleeps are
    instant."""
    target = len(server.heartbeats) + heartbeats
    stop = asyncio.Event()

    async def sleep(_delay_s: float) -> None:
        await asyncio.sleep(0)
        if len(server.heartbeats) >= target or (until is not None and until()):
            stop.set()

    async def go():
        async with httpx.AsyncClient(transport=server.transport()) as http:
            return await run_simulated_fleet(
                "http://gpufleet.test", token, spec, state_dir, stop, concurrency=4,
                on_progress=progress.append if progress is not None else None, http=http,
                sleep=sleep, rng=random.Random(0), telemetry=telemetry)

    return asyncio.run(go())


def test_registers_every_node_and_keeps_them_heart_beating(tmp_path):
    server = FakeServer()
    progress: list[FleetProgress] = []
    final = run_fleet(server, tmp_path, progress=progress)
    assert server.environments == {"lab", "cloud"}
    assert len(server.nodes) == NODES
    assert (final.nodes_registered, final.gpus_registered, final.gpus_total) == (NODES, GPUS,
                                                                                 GPUS)
    assert final.nodes_failed == 0 and final.heartbeats_sent >= 30
    assert final.phase == "stopped"
    registering = [p.gpus_registered for p in progress if p.phase == "registering"]
    assert registering == sorted(registering) and registering[-1] == GPUS
    assert {machine for machine, _ in server.heartbeats} == set(server.nodes)


def test_credentials_are_stored_privately_and_reused_on_restart(tmp_path):
    server = FakeServer()
    run_fleet(server, tmp_path)
    path = tmp_path / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = json.loads(path.read_text())["nodes"]
    assert set(stored) == set(server.nodes)
    issued = len(server.credentials)
    final = run_fleet(server, tmp_path)  # environments exist now (409) and nodes re-register
    assert final.nodes_registered == NODES
    assert len(server.credentials) == issued  # no new join tokens were spent
    assert server.join_tokens == {}


def test_rejected_stored_credentials_join_again_with_new_tokens(tmp_path, caplog):
    run_fleet(FakeServer(), tmp_path)
    fresh_server = FakeServer()  # e.g. the server's database was reset
    final = run_fleet(fresh_server, tmp_path)
    assert final.nodes_registered == NODES and final.nodes_failed == 0
    assert "13 stored node credentials were rejected" in caplog.text
    stored = json.loads((tmp_path / "credentials.json").read_text())["nodes"]
    assert {e["credential"] for e in stored.values()} == set(fresh_server.credentials)


def test_an_unavailable_server_is_waited_for(tmp_path):
    server = FakeServer(fail_next=25)
    final = run_fleet(server, tmp_path)
    assert final.nodes_registered == NODES


def test_telemetry_refused_with_403_makes_the_nodes_register_again(tmp_path, caplog):
    server = FakeServer()
    server.telemetry_status = 403  # e.g. the server renamed the node

    def registrations() -> int:
        return server.requests.count("/api/v1/agent/register")

    final = run_fleet(server, tmp_path, heartbeats=10**6, telemetry=FleetTelemetry(),
                      until=lambda: registrations() > NODES)
    assert final.telemetry_batches_failed > 0 and final.nodes_failed == 0
    assert registrations() > NODES  # the heartbeat loop registered a refused node again
    assert "registering again" in caplog.text


def test_a_bad_operator_token_is_a_clear_error(tmp_path):
    with pytest.raises(OperatorApiError, match="environments refused: unauthenticated"):
        run_fleet(FakeServer(), tmp_path, token="wrong")


def test_join_tokens_are_minted_in_batches_of_at_most_1000():
    server = FakeServer(environments={"lab"})

    async def go():
        async with httpx.AsyncClient(transport=server.transport()) as http:
            api = OperatorApi("http://gpufleet.test", "operator-token", http, asyncio.sleep,
                              random.Random(0))
            return await api.mint_join_tokens("lab", 1001)

    tokens = asyncio.run(go())
    assert len(set(tokens)) == 1001
    assert server.requests == ["/api/v1/join-tokens"] * 2


class _FakeTime:
    """A monotonic clock moved only by sleeps and by the work a tick does."""

    def __init__(self):
        self.now_s = 1000.0
        self.tick_starts_s: list[float] = []

    def monotonic_s(self) -> float:
        return self.now_s

    async def sleep(self, delay_s: float) -> None:
        assert delay_s >= 0
        self.now_s += delay_s


def _ticks(time: _FakeTime, work_s: list[float], outcomes=None):
    outcomes = list(outcomes or [UploadOutcome.DONE] * len(work_s))

    async def tick():
        if not work_s:
            return None
        time.tick_starts_s.append(time.now_s)
        time.now_s += work_s.pop(0)
        return outcomes.pop(0)
    return tick


def _run_schedule(time: _FakeTime, tick, period_s=60.0):
    asyncio.run(tick_on_schedule(tick, period_s, first_delay_s=5.0,
                                 backoff=Backoff(initial_s=period_s, max_s=600,
                                                 rng=random.Random(0)),
                                 sleep=time.sleep, monotonic_s=time.monotonic_s))


def test_simulated_telemetry_ticks_keep_their_period_however_long_uploads_take():
    time = _FakeTime()
    _run_schedule(time, _ticks(time, [7.0, 12.0, 0.5, 30.0, 7.0]))
    gaps = [b - a for a, b in zip(time.tick_starts_s, time.tick_starts_s[1:], strict=False)]
    assert gaps == [60.0] * 4  # sleeping a period after each tick drifted by its work


def test_a_tick_that_overran_whole_periods_is_followed_by_the_next_slot_not_a_burst():
    time = _FakeTime()
    _run_schedule(time, _ticks(time, [130.0, 1.0, 1.0]))
    first, second, third = time.tick_starts_s
    assert (second - first, third - second) == (180.0, 60.0)
    assert next_due_s(0.0, 120.0, 60.0) == 180.0 and next_due_s(0.0, 59.0, 60.0) == 60.0


def test_an_unavailable_server_backs_off_then_the_schedule_resumes():
    time = _FakeTime()
    _run_schedule(time, _ticks(time, [1.0, 1.0, 1.0],
                               [UploadOutcome.UNAVAILABLE, UploadOutcome.DONE,
                                UploadOutcome.DONE]))
    first, second, third = time.tick_starts_s
    assert second - first > 1.0  # a backoff delay after the failed upload
    assert third - second == 60.0


def test_a_restarted_fleet_does_not_join_a_retired_node_again(tmp_path):
    """Retiring revokes the node's credential; the fleet must not answer that by joining it
    again with a new join token (issue 12, item 5)."""
    server = FakeServer()
    run_fleet(server, tmp_path)
    machine_id, registration = next(iter(server.nodes.items()))
    server.retired.add(registration.hostname)
    server.credentials = {c: m for c, m in server.credentials.items() if m != machine_id}
    server.nodes.clear()
    final = run_fleet(server, tmp_path)
    assert machine_id not in server.nodes
    assert len(server.nodes) == NODES - 1
    assert (final.nodes_total, final.nodes_registered) == (NODES - 1, NODES - 1)
