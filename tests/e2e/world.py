"""The fleet the browser tests look at, written into a data dir before `gpufleet serve`
starts on it: the same API calls and service calls the tests under tests/web make, in
process, on a clock set five hours back, so the server then sees allocations held and
GPUs busy for the last five hours of real time.

Who: the bootstrap admin, operator `olga`, member `mia` (project `vision` only).
What: environment `onprem-hpc`; node-1 with four H100s, node-2 with two, one of them in
MIG mode (four instances); `vision` holds a busy GPU, `speech` an idle one, and `vision`
has asked for a pool of one H100 (pending: an operator's to decide).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.clock import ManualClock
from gpufleet.server import admin_token_path, bootstrap_admin_token, build_gpufleet
from gpufleet.services.access.principal import SYSTEM
from gpufleet.settings import Settings
from gpufleet.tsdb import Sample, series
from gpufleet.wire.requests import PoolCreate, RequestCreate
from tests.conftest import Api
from tests.helpers import create_environment, gpu, gpu_uuid, join_token, register, registration

GIB = 1024**3
HOURS = 5
MODEL = "H100-80GB"
MIG_NODE = "node-2"
MIG_INSTANCES = [
    {"profile_id": 19, "placement_start": 0, "mig_uuid": "MIG-e2e-a"},
    {"profile_id": 19, "placement_start": 1, "mig_uuid": "MIG-e2e-b"},
    {"profile_id": 14, "placement_start": 2, "placement_size": 2, "mig_uuid": "MIG-e2e-c"},
    {"profile_id": 9, "placement_start": 4, "mig_uuid": "MIG-e2e-d"},
]


@dataclass(frozen=True)
class World:
    admin: str  # tokens
    operator: str
    member: str
    member_project: str
    other_project: str
    busy_gpu: str  # vision's, busy
    idle_gpu: str  # speech's, idle
    other_allocation: str  # speech's, holding idle_gpu
    other_node: str  # idle_gpu's
    mig_node: str


def seed(data_dir: Path, database_url: str | None = None) -> World:
    """Write the world into `data_dir` (and the state store at `database_url`, when one is
    given); the stores are closed again when it returns."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    clock = ManualClock(now - timedelta(hours=HOURS))
    gf = build_gpufleet(Settings(data_dir=data_dir, database_url=database_url), clock)
    try:
        admin = bootstrap_admin_token(gf, admin_token_path(gf.settings))
        with TestClient(create_app(gf, background_loops=False)) as client:
            api = Api(client, admin)
            people = _people(api)
            create_environment(api)
            register(api, 1, gpus=4)
            _rate_card(api, clock.now())
            _register_mig_node(api)
            (_, busy), (speech, idle) = _grant(gf, "vision"), _grant(gf, "speech")
            gf.lifecycle.request_pool(SYSTEM, PoolCreate(project="vision", flavour=MODEL,
                                                         count=1, reason="nightly training"))
            start = clock.now()
            _minutes(gf, start, busy, {"gpu.gr_engine_active": 80.0, "gpu.sm_active": 60.0,
                                       "gpu.memory_used_bytes": 40.0 * GIB})
            _minutes(gf, start, idle, {"gpu.gr_engine_active": 1.0, "gpu.sm_active": 0.0,
                                       "gpu.memory_used_bytes": 2.0 * GIB})
            clock.advance(HOURS * 3600)
            gf.telemetry.rollup(clock.now())
    finally:
        gf.close()
    return World(admin=admin, **people, member_project="vision", other_project="speech",
                 busy_gpu=busy, idle_gpu=idle, other_allocation=speech,
                 other_node=_node_of(idle), mig_node=MIG_NODE)


def _people(api: Api) -> dict[str, str]:
    for project in ("vision", "speech"):
        api.post("/api/v1/projects", json={"name": project, "organisation": "research"})
    api.post("/api/v1/users", json={"name": "mia", "role": "member"})
    api.post("/api/v1/users", json={"name": "olga", "role": "operator"})
    api.post("/api/v1/projects/vision/members", json={"user": "mia"})
    return {role: api.post("/api/v1/tokens", json={"name": user, "user": user}).json()["token"]
            for role, user in (("member", "mia"), ("operator", "olga"))}


def _rate_card(api: Api, now: datetime) -> None:
    """A price for the whole GPUs, set a day back, so the Billing page has costs to show
    (docs/dashboard.md, "Billing")."""
    response = api.post("/api/v1/billing/rates", json={
        "flavour": MODEL, "price_per_unit_hour": "2.45", "currency": "EUR",
        "effective_from": (now - timedelta(days=1)).isoformat()})
    assert response.status_code == 201, response.text


def _register_mig_node(api: Api) -> None:
    body = registration(2, gpus=0)
    body["gpus"] = [gpu(2, 0, mig_enabled=True, mig_instances=MIG_INSTANCES), gpu(2, 1)]
    reply = api.as_(join_token(api)).post("/api/v1/agent/register", json=body)
    assert reply.status_code == 200, reply.text


def _grant(gf, project: str) -> tuple[str, str]:
    view = gf.lifecycle.create_request(SYSTEM, RequestCreate(project=project, count=1,
                                                            models=[MODEL]))
    view = gf.lifecycle.approve(SYSTEM, view.code, None)
    assert view.state == "active", view
    return view.code, view.units[0].gpu_uuid


def _node_of(uuid: str) -> str:
    return "node-1" if uuid.startswith(gpu_uuid(1, 0)[:12]) else "node-2"


def _minutes(gf, start: datetime, uuid: str, values: dict[str, float]) -> None:
    gf.telemetry.write([
        Sample(series(metric, uuid, node=_node_of(uuid), environment="onprem-hpc", model=MODEL),
               start + timedelta(minutes=m, seconds=30), value)
        for m in range(HOURS * 60) for metric, value in values.items()])
