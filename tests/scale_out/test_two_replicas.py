"""Two `gpufleet serve` replicas on one PostgreSQL and one VictoriaMetrics
(docs/deployment.md): both answer reads and writes, the background loops act once, a
replica killed with SIGKILL leaves its queued work to the other, and an agent given both
URLs keeps registering, heart-beating and uploading after its replica died.

Real processes throughout: two servers, a VictoriaMetrics, a `gpufleet agent --backend sim`.
The database is a fresh one (advisory locks, the loops' leader locks, are per database: a
schema of the shared test database would share them with other tests). PostgreSQL and
VictoriaMetrics are required in CI (.ci/run); without GPUFLEET_TEST_POSTGRES_URL the test
skips, as every PostgreSQL test does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

from gpufleet.agent.client import GZIP_JSON
from gpufleet.agent.state import AgentState
from gpufleet.sim.backend import standalone_backend
from gpufleet.store.tables import AuditEvent
from gpufleet.wire import telemetry_batch
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH
from tests.conftest import POSTGRES_ENV
from tests.serve_process import serve_processes
from tests.vm_engine import victoria_metrics  # noqa: F401  (the module's VictoriaMetrics)

pytestmark = pytest.mark.postgres

LOOP_INTERVAL_S = 0.5  # lifecycle rounds: expiry and the queue
SHAPE, HOSTNAME = "dgx-h100", "replica-node"
EACH = 3  # requests per kind of work
# Seconds from now to the starts and ends the loops act on: room for the test to create and
# approve its requests first on a loaded machine (then a start already passed would be
# granted by the approval itself, not by a loop).
MARGIN_S = 4


@pytest.fixture
def database_url() -> Iterator[str]:
    """A fresh PostgreSQL database for the two replicas, dropped afterwards."""
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip(f"PostgreSQL tests need {POSTGRES_ENV}")
    name = f"gpufleet_replicas_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def wait_for(what: str, check: Callable[[], object], timeout_s: float = 20.0) -> object:
    """Poll `check` until it returns something truthy (a liveness bound, not a timing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class Replica:
    def __init__(self, url: str, token: str):
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=10,
                                 headers={"Authorization": f"Bearer {token}"})

    def ok(self, method: str, path: str, status: int = 200, **kwargs) -> dict:
        response = self.http.request(method, path, **kwargs)
        assert response.status_code == status, f"{method} {path}: {response.text}"
        return response.json()

    def request(self, **body) -> str:
        """A new request for one GPU (pending: the project has no quota); its code."""
        return self.ok("POST", "/api/v1/requests", 201,
                       json={"project": "vision", "count": 1, **body})["code"]

    def approve(self, code: str) -> dict:
        return self.ok("POST", f"/api/v1/requests/{code}/approve", json={})

    def show(self, code: str) -> dict:
        return self.ok("GET", f"/api/v1/requests/{code}")


def start_agent(servers: list[str], join_token: str, state_dir: Path,
                log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gpufleet", "agent", "--backend", "sim",
             "--sim-shape", SHAPE, "--hostname", HOSTNAME, "--server", ",".join(servers),
             "--join-token", join_token, "--state-dir", str(state_dir),
             "--collect-interval-s", "0.5", "--upload-interval-s", "1"],
            env=env, stdout=out, stderr=subprocess.STDOUT)


def counts_of(database_url: str, action: str) -> dict[str, int]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return dict(connection.execute(
                select(AuditEvent.subject, func.count()).where(AuditEvent.action == action)
                .group_by(AuditEvent.subject)).all())
    finally:
        engine.dispose()


def samples_at(vm_url: str, at_ms: int) -> int:
    """How many samples of gpufleet series the engine holds at exactly `at_ms`."""
    httpx.get(f"{vm_url}/internal/force_flush").raise_for_status()
    lines = httpx.get(f"{vm_url}/api/v1/export", params={
        "match[]": '{__name__=~"gpufleet_.+"}', "start": (at_ms - 1) / 1000,
        "end": (at_ms + 1) / 1000}).text.splitlines()
    return sum(json.loads(line)["timestamps"].count(at_ms) for line in lines if line)


def test_two_replicas_share_the_work_and_survive_a_killed_one(
        database_url, victoria_metrics, tmp_path):  # noqa: F811
    settings = {"database_url": database_url, "telemetry_url": victoria_metrics,
                "lifecycle_interval_s": LOOP_INTERVAL_S, "heartbeat_interval_s": 1,
                "database_pool_size": 5, "placement_cache_max_age_s": 1}
    processes: dict[str, subprocess.Popen] = {}
    with ExitStack() as stack:
        # Started together: one migrates the fresh database while the other waits for its
        # lock, and both bootstrap an admin token for the one user `admin`.
        (url_a, token_a), (url_b, token_b) = stack.enter_context(serve_processes(
            [tmp_path / "a", tmp_path / "b"],
            on_start=lambda p: processes.setdefault("ab"[len(processes)], p), **settings))
        a, b = Replica(url_a, token_a), Replica(url_b, token_b)
        stack.callback(a.http.close)
        stack.callback(b.http.close)

        # Both answer reads and writes, on one state: a token minted on A works on B.
        minted = a.ok("POST", "/api/v1/tokens", 201,
                      json={"name": "both-replicas", "role": "admin"})["token"]
        with httpx.Client(base_url=url_b, headers={"Authorization": f"Bearer {minted}"}) as c:
            assert c.get("/api/v1/whoami").json()["role"] == "admin"
        a.ok("POST", "/api/v1/environments", 201, json={"name": "lab", "kind": "onprem"})
        b.ok("POST", "/api/v1/projects", 201, json={"name": "vision",
                                                    "organisation": "research"})
        join = b.ok("POST", "/api/v1/join-tokens", 201,
                    json={"environment": "lab"})["tokens"][0]["token"]

        agent_dir = tmp_path / "agent"
        agent = start_agent([url_a, url_b], join, agent_dir, tmp_path / "agent.log")
        stack.callback(lambda: (agent.terminate(), agent.wait(timeout=30)))
        wait_for("the agent's node on B", lambda: b.http.get(
            f"/api/v1/nodes/{HOSTNAME}").status_code == 200)
        assert b.ok("GET", f"/api/v1/nodes/{HOSTNAME}")["gpus"] == 8

        # A request created on A is approved on B; A sees it granted (by B's approval, or
        # by the next round once B's placement cache has read the node A registered).
        code = a.request()
        assert b.approve(code)["state"] in ("approved", "active")
        wait_for("the grant", lambda: a.show(code)["state"] == "active")
        a.ok("POST", f"/api/v1/requests/{code}/release", json={})

        # A telemetry batch replayed on the other replica is stored once: the engine keeps
        # one sample per series and time (docs/deployment.md, "Agents").
        credential = AgentState(agent_dir).read_credential()
        at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
        snapshot = standalone_backend(SHAPE, HOSTNAME).collect(at=at)
        payload = telemetry_batch.encode(telemetry_batch.columnar("replayed-batch", [snapshot]))
        acks = [httpx.post(f"{url}{TELEMETRY_BATCHES_PATH}", content=payload, headers={
            "Authorization": f"Bearer {credential}", **GZIP_JSON})
            for url in (url_a, url_b)]
        assert [ack.status_code for ack in acks] == [200, 200], acks[-1].text
        stored = acks[0].json()["samples_stored"]
        assert stored > 0 and samples_at(victoria_metrics, int(at.timestamp() * 1000)) == stored

        # The loops act once: allocations ending soon expire once each, approved requests
        # waiting for their start are granted once each, whichever replica's round it is.
        now = datetime.now(UTC)
        ending = [a.request(ends_at=(now + timedelta(seconds=MARGIN_S)).isoformat())
                  for _ in range(EACH)]
        queued = [b.request(starts_at=(now + timedelta(seconds=MARGIN_S)).isoformat(),
                            ends_at=(now + timedelta(seconds=MARGIN_S + 2)).isoformat())
                  for _ in range(EACH)]
        for n, request in enumerate(ending + queued):
            (a if n % 2 else b).approve(request)
        wait_for("expiry and grants on both replicas", lambda: all(
            a.show(c)["state"] == "expired" for c in ending + queued))

        # SIGKILL replica A with work it took in still to do: B grants and expires it.
        start = datetime.now(UTC) + timedelta(seconds=MARGIN_S)
        orphans = [a.request(starts_at=start.isoformat(),
                             ends_at=(start + timedelta(seconds=2)).isoformat())
                   for _ in range(EACH)]
        for request in orphans:
            assert a.approve(request)["state"] == "approved"
        processes["a"].kill()
        processes["a"].wait()
        killed_at = datetime.now(UTC)
        views = wait_for("B to take over A's queue", lambda: (
            [b.show(c) for c in orphans]
            if all(b.show(c)["state"] == "expired" for c in orphans) else None))
        grant_delays_s = [(parse_time(v["activated_at"]) - start).total_seconds()
                          for v in views]
        print(f"\nafter SIGKILL of A: B granted A's queued requests "
              f"{min(grant_delays_s):.2f}–{max(grant_delays_s):.2f} s after their start "
              f"(lifecycle interval {LOOP_INTERVAL_S} s)")

        # Every grant and every expiry exactly once; none lost.
        codes = [*ending, *queued, *orphans]
        activated = counts_of(database_url, "request.activated")
        expired = counts_of(database_url, "request.expired")
        assert {c: activated.get(c) for c in codes} == dict.fromkeys(codes, 1)
        assert {c: expired.get(c) for c in codes} == dict.fromkeys(codes, 1)

        # The agent moved to B: it heartbeats there (the node stays ready) and uploads.
        def heartbeat_after_kill():
            node = b.ok("GET", f"/api/v1/nodes/{HOSTNAME}")
            seen = node["last_seen_at"] and parse_time(node["last_seen_at"]) > killed_at
            return node if seen else None

        node = wait_for("a heartbeat through B", heartbeat_after_kill)
        assert node["status"] == "ready"
        wait_for("telemetry uploaded through B", lambda: uploaded_since(
            victoria_metrics, killed_at))
        assert agent.poll() is None


def uploaded_since(vm_url: str, since: datetime) -> bool:
    httpx.get(f"{vm_url}/internal/force_flush").raise_for_status()
    response = httpx.get(f"{vm_url}/api/v1/export", params={
        "match[]": f'{{__name__=~"gpufleet_.+", node="{HOSTNAME}"}}',
        "start": since.timestamp()})
    return bool(response.text.strip())
