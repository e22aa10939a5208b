"""The demo's fleet in use: seeding requests, pools and quotas through the lifecycle services.

A small fleet of every kind (whole GPUs with and without NVLink, MIG, shared) registers
through the services as the simulated agents would, the demo's people are seeded, then the
lifecycle: the allocated share, the queue, the labels on the GPUs, idempotence, and a seeding
stopped part-way (Ctrl-C during the first start) that the next start finishes.
"""

from __future__ import annotations

import shutil
import threading
from collections import defaultdict

import pytest
from sqlalchemy import func, select

from gpufleet.clock import ManualClock
from gpufleet.demo.lifecycle_seed import lifecycle_summary, seed_lifecycle, seeding_todo
from gpufleet.demo.seed import seed_people
from gpufleet.demo.seed_journal import FILE_NAME as JOURNAL
from gpufleet.demo.seeder import SEED_STEPS, SeedProgress
from gpufleet.domain.access import Role
from gpufleet.domain.requests import request_code
from gpufleet.services.access.principal import SYSTEM, Principal
from gpufleet.services.app import Gpufleet
from gpufleet.sim.fleet_spec import load_default_spec, parse_spec
from gpufleet.sim.nodes import iter_nodes
from gpufleet.store.database import StateStore
from gpufleet.store.tables import (
    AuditEvent,
    Binding,
    Gpu,
    GpuLabel,
    GpuRequest,
    Pool,
    Project,
    ProjectMember,
    Quota,
    User,
)
from gpufleet.wire import requests as wr
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
def test_the_seeded_fleet_is_in_use_and_seeding_is_done_once(gf, clock, settings):
    journal = settings.data_dir / JOURNAL
    gpus = register(gf, small_spec())
    assert gpus == 76
    seed_people(gf, SEED)
    assert seeding_todo(gf, journal) == "seed"
    progress = SeedProgress()
    summary = seed_lifecycle(gf, SEED, progress=progress, journal=journal)
    assert summary is not None and summary.gpus_total == gpus
    assert summary.complete and not summary.resumed
    # What the demo prints while it waits: the last step, and every call the journal holds.
    assert progress.step == SEED_STEPS[-1]
    assert progress.calls == len(journal.read_text().splitlines()) - 2  # header, "completed"
    assert progress.line().startswith(f"step {len(SEED_STEPS)} of {len(SEED_STEPS)} (queue)")

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
    assert seeding_todo(gf, journal) is None
    assert seed_lifecycle(gf, SEED, journal=journal) is None
    assert counts(gf) == before

    # The allocations held for seconds expire once their end has passed.
    clock.advance(seconds=10)
    expired, _ = gf.lifecycle.tick()
    assert expired
    assert lifecycle_summary(gf).gpus_allocated <= summary.gpus_allocated

    # What a user makes in the demo afterwards is theirs: later starts leave it alone.
    member, project = a_member(gf)
    mine = gf.lifecycle.create_request(member, wr.RequestCreate(
        project=project, count=1, duration_hours=1, reason="mine"))
    before = rows(gf)
    assert seed_lifecycle(gf, SEED, journal=journal) is None
    assert rows(gf) == before
    assert mine.code in {request_code(row[0]) for row in before[GpuRequest.__tablename__]}


def a_member(gf) -> tuple[Principal, str]:
    """A member user of the demo's people, and one of their projects."""
    with gf.store.read() as session:
        user_id, user, project = session.execute(
            select(User.id, User.name, Project.name)
            .join(ProjectMember, ProjectMember.user_id == User.id)
            .join(Project, Project.id == ProjectMember.project_id)
            .where(User.role == Role.MEMBER.value).order_by(User.id).limit(1)).one()
    return Principal(role=Role.MEMBER, user_id=user_id, user_name=user,
                     project_names=frozenset({project})), project


SEEDED_TABLES = (GpuRequest, Pool, Quota, Binding, GpuLabel, AuditEvent)


def rows(gf) -> dict[str, list[tuple]]:
    """Every row the seeding writes, column by column (the clock is fixed, so times too)."""
    with gf.store.read() as session:
        return {table.__tablename__: [
            tuple(getattr(row, c.key) for c in table.__mapper__.column_attrs)
            for row in session.scalars(select(table).order_by(*table.__table__.primary_key))]
            for table in SEEDED_TABLES}


class CtrlC:
    """Ctrl-C while the seeding's n-th grant is being made: the halt the demo sets on SIGINT
    is set during that call, which completes; the seeding makes no call after it."""

    def __init__(self, gf, monkeypatch, during_grant: int):
        self.halt = threading.Event()
        approve, made = gf.lifecycle.approve, []

        def approving(*args, **kwargs):
            made.append(args)
            if len(made) == during_grant:
                self.halt.set()
            return approve(*args, **kwargs)

        monkeypatch.setattr(gf.lifecycle, "approve", approving)


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_a_seeding_stopped_part_way_is_finished_by_the_next_start(
        gf, settings, clock, sqlite_template, tmp_path, monkeypatch):
    journal = settings.data_dir / JOURNAL
    # What one uninterrupted seeding leaves, in a store of its own at the same time.
    shutil.copy(sqlite_template, tmp_path / "fresh.db")
    fresh = Gpufleet(StateStore(f"sqlite:///{tmp_path / 'fresh.db'}"), settings,
                     ManualClock(clock.now()))
    for each in (fresh, gf):
        register(each, small_spec())
        seed_people(each, SEED)
    assert seed_lifecycle(fresh, SEED, journal=tmp_path / "fresh" / JOURNAL).complete
    expected = rows(fresh)
    fresh.store.dispose()

    # First start: Ctrl-C during the 20th grant (the allocations); the data dir holds
    # requests now, so before the journal the next start seeded nothing more.
    with monkeypatch.context() as patch:
        stopped = seed_lifecycle(gf, SEED, CtrlC(gf, patch, 20).halt, journal=journal)
    assert stopped is not None and not stopped.complete
    assert 0 < stopped.gpus_allocated < len(expected["bindings"])
    assert seeding_todo(gf, journal) == "resume"
    with journal.open("a") as torn:  # killed while writing a line: the half line is dropped
        torn.write('{"call": "crea')

    # Second start: stopped again, during its own 3rd grant; its --seed is not the first's.
    with monkeypatch.context() as patch:
        again = seed_lifecycle(gf, SEED + 1, CtrlC(gf, patch, 3).halt, journal=journal)
    assert again is not None and again.resumed and not again.complete
    assert again.gpus_allocated > stopped.gpus_allocated

    # Third start finishes it: row for row what the uninterrupted seeding made.
    done = seed_lifecycle(gf, SEED, journal=journal)
    assert done is not None and done.resumed and done.complete
    assert rows(gf) == expected
    assert seeding_todo(gf, journal) is None

