"""No unit is ever held twice: the database guarantees it, not only the allocator.

Fifty approvals race for the last free units through the real services, on SQLite and on
PostgreSQL (where they truly run in parallel on separate connections); and the guarantees
themselves — the slot claims' primary key and the shared GPUs' conditional update — are
attacked directly, bypassing the allocator.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from gpufleet.domain.errors import Conflict
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.lifecycle.bindings import WHOLE_GPU_SLOT, UnitTaken, _raise_shared_use
from gpufleet.store.tables import Binding, Gpu, GpuRequest, Project, SlotClaim
from gpufleet.wire.requests import RequestCreate
from tests.helpers import create_environment, join_token, register, registration


@pytest.fixture
def fleet(api):
    create_environment(api)
    register(api, 1, gpus=8)
    register(api, 2, gpus=4)
    for project in ("vision", "speech"):
        api.post("/api/v1/projects", json={"name": project, "organisation": "research"})


def test_fifty_concurrent_approvals_for_twelve_gpus(fleet, gf, store):
    codes = [gf.lifecycle.create_request(SYSTEM, RequestCreate(
        project="vision" if i % 2 else "speech", count=1)).code for i in range(50)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda code: gf.lifecycle.approve(SYSTEM, code, None), codes))
    states = [r.state for r in results]
    assert states.count("active") == 12 and states.count("approved") == 38
    with store.read() as session:
        open_per_gpu = session.execute(
            select(Binding.gpu_id, func.count()).where(Binding.ended_at.is_(None))
            .group_by(Binding.gpu_id)).all()
        allocated = session.scalar(select(func.count()).select_from(Gpu)
                                   .where(Gpu.allocated.is_(True)))
    assert len(open_per_gpu) == 12 and all(n == 1 for _, n in open_per_gpu)
    assert allocated == 12


def test_two_claims_of_one_slot_are_refused_by_the_database(fleet, store):
    with store.read() as session:
        gpu_id = session.scalars(select(Gpu.id).order_by(Gpu.id)).first()
    first, second = _binding(store, gpu_id), _binding(store, gpu_id)
    with store.write() as session:
        session.add(SlotClaim(gpu_id=gpu_id, slot=WHOLE_GPU_SLOT, binding_id=first))
    with pytest.raises(Conflict) as refused, store.write() as session:
        session.add(SlotClaim(gpu_id=gpu_id, slot=WHOLE_GPU_SLOT, binding_id=second))
    assert refused.value.code == "integrity_conflict"


def _binding(store, gpu_id: int) -> int:
    """A bare open binding on `gpu_id`, of a request made up for the purpose."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with store.write() as session:
        project = session.scalar(select(Project).where(Project.name == "vision"))
        request = GpuRequest(project_id=project.id, requested_by="test", kind="whole",
                             milli=1000, count=1, state="active", created_at=now)
        session.add(request)
        session.flush()
        gpu = session.get(Gpu, gpu_id)
        binding = Binding(request_id=request.id, project_id=project.id, gpu_id=gpu_id,
                          node_id=gpu.node_id, kind="whole", milli=1000, started_at=now)
        session.add(binding)
        session.flush()
        return binding.id


def test_a_shared_gpu_never_passes_1000_milli(api, store):
    create_environment(api, name="shared", default_sharing_mode="shared")
    token = join_token(api, "shared")
    api.as_(token).post("/api/v1/agent/register", json=registration(5, gpus=1))
    with store.write() as session:
        gpu = session.scalars(select(Gpu)).one()
        _raise_shared_use(session, gpu, 600)
        _raise_shared_use(session, gpu, 400)
    with pytest.raises(UnitTaken), store.write() as session:
        _raise_shared_use(session, session.scalars(select(Gpu)).one(), 1)
    with store.read() as session:
        assert session.scalars(select(Gpu)).one().used_milli == 1000
