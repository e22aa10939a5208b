"""The demo's fleet in use: seeding requests, pools and quotas through the lifecycle services.

A small fleet of every kind (whole GPUs with and without NVLink, MIG, shared) registers
through the services as the simulated agents would, the demo's people are seeded, then the
lifecycle: the allocated share, the queue, the labels on the GPUs, and idempotence.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from sqlalchemy import func, select

from gpufleet.demo.lifecycle_seed import lifecycle_summary, seed_lifecycle
from gpufleet.demo.seed import seed_people
from gpufleet.domain.requests import request_code
from gpufleet.services.principal import SYSTEM
from gpufleet.sim.fleet_spec import load_default_spec, parse_spec
from gpufleet.sim.nodes import iter_nodes
from gpufleet.store.tables import (
    AuditEvent,
    Binding,
    Gpu,
    GpuLabel,
    GpuRequest,
    Pool,
    Project,
    Quota,
)
from gpufleet.wire.inventory import EnvironmentCreate, JoinTokenCreate

SEED = 20260101


def small_spec():
    """76 GPUs in the default fleet's three environments, one group of each kind."""
    return parse_spec({
        "seed": SEED,
        "environments": [e.model_dump() for e in load_default_spec().environments],
        "node_groups": [
            {"environment": "azure-koreacentral", "shape": "azure-nd-h100-v5", "count": 4,
             "hostname_prefix": "nd"},
            {"environment": "onprem-hpc", "shape": "hgx-a100", "count": 2,
             "hostname_prefix": "hgx"},
            {"environment": "onprem-hpc", "shape": "l40s-4", "count": 3,
             "hostname_prefix": "l40s"},
            {"environment": "onprem-slicing", "shape": "mig-h100", "count": 1,
             "hostname_prefix": "mig"},
            {"environment": "onprem-slicing", "shape": "l40s-4", "count": 2,
             "hostname_prefix": "ts", "sharing_mode": "shared"},
        ]})


def register(gf, spec) -> int:
    nodes = list(iter_nodes(spec))
    for env in spec.environments:
        gf.create_environment(SYSTEM, EnvironmentCreate.model_validate(env.model_dump()))
    for env in spec.environments:
        mine = [n for n in nodes if n.environment == env.name]
        if not mine:
            continue
        issued = gf.create_join_tokens(SYSTEM, JoinTokenCreate(environment=env.name,
                                                               count=len(mine)))
        for node, token in zip(mine, issued.tokens, strict=True):
            gf.register_node(token.token, node.registration)
    return sum(n.gpu_count for n in nodes)


def counts(gf) -> dict[str, int]:
    with gf.store.read() as session:
        return {table.__tablename__: session.scalar(select(func.count()).select_from(table))
                for table in (GpuRequest, Pool, Quota, Binding, GpuLabel, AuditEvent)}


# SQLite only: the demo's own store, and ~60 requests through the services take 5 s here
# but 15 s on PostgreSQL; the lifecycle services have their own PostgreSQL tests.
@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_the_seeded_fleet_is_in_use_and_seeding_is_done_once(gf, clock):
    gpus = register(gf, small_spec())
    assert gpus == 76
    seed_people(gf, SEED)
    summary = seed_lifecycle(gf, SEED)
    assert summary is not None and summary.gpus_total == gpus

    assert 0.6 <= summary.allocated_share <= 0.8, summary.line()
    assert summary.pending_requests >= 3
    assert summary.waiting_requests >= 1 and summary.waiting_code is not None
    assert summary.expiring_24h >= 1
    assert summary.pools_active >= 3 and summary.pools_pending >= 1
    assert summary.projects_holding >= 10
    assert f"{summary.gpus_allocated:,} of {gpus:,} GPUs allocated" in summary.line()

    with gf.store.read() as session:
        requests = list(session.scalars(select(GpuRequest)))
        states = defaultdict(int)
        for r in requests:
            states[r.state] += 1
        # History: some of each way a request ends early or is handed back.
        assert states["released"] and states["rejected"] and states["cancelled"]
        # Requested by members, decided by operators (or the auto-approve policy).
        assert all(r.requested_by.startswith("user:") for r in requests)
        deciders = {r.decided_by for r in requests if r.decided_by}
        assert deciders <= {"policy:auto-approve", "user:ops-jisoo", "user:ops-hyunjin",
                            "user:ops-sungmin"}
        assert "policy:auto-approve" in deciders

        # Every allocated GPU is labelled with exactly the active requests bound to it.
        active = {r.id: r for r in requests if r.state == "active"}
        project_names = dict(session.execute(select(Project.id, Project.name)).all())
        held = defaultdict(set)
        for request_id, gpu_id in session.execute(
                select(Binding.request_id, Binding.gpu_id).where(Binding.ended_at.is_(None))):
            assert request_id in active
            held[gpu_id].add(request_id)
        labels = defaultdict(lambda: defaultdict(set))
        for gpu_id, key, value in session.execute(select(GpuLabel.gpu_id, GpuLabel.key,
                                                         GpuLabel.value)):
            labels[gpu_id][key].add(value)
        allocated = set(session.scalars(select(Gpu.id).where(Gpu.allocated.is_(True))))
        assert allocated == set(held)
        for gpu_id in allocated:
            holders = [active[i] for i in held[gpu_id]]
            assert labels[gpu_id]["allocation"] == {request_code(r.id) for r in holders}
            assert labels[gpu_id]["project"] == {project_names[r.project_id] for r in holders}
        assert not any(labels[g]["allocation"] for g in set(labels) - allocated)

    # A second start on the same data dir seeds nothing and changes nothing.
    before = counts(gf)
    assert seed_lifecycle(gf, SEED) is None
    assert counts(gf) == before

    # The allocations held for seconds expire once their end has passed.
    clock.advance(seconds=10)
    expired, _ = gf.lifecycle.tick()
    assert expired
    assert lifecycle_summary(gf).gpus_allocated <= summary.gpus_allocated
