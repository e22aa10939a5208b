"""The demo fleet in use: quotas, auto-approval, pools, history, allocations and a queue.

Runs once the simulated fleet has registered its GPUs, and only through the lifecycle
services (`gf.lifecycle`): requests are created by the projects' member users and decided
by operator users, so `requested_by`, `decided_by` and the audit log read like a real
fleet's. The demo's clock is the system clock and nothing is back-dated: the "past" is what
this creates and then releases, rejects or cancels now, and a few allocations last seconds
so that the lifecycle loop expires them.

Deterministic for a seed and a fleet (the placement engine is too), and done once per data
dir: a store that already holds requests or pools is left as it is, unless the journal
(`demo.seed_journal`) shows a seeding that was stopped part-way — Ctrl-C during the first
start — which the next start finishes: the calls already made are replayed from the journal,
the rest are made, and the fleet ends as one uninterrupted seeding would have left it.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
import time
from collections import defaultdict
from dataclasses import astuple, dataclass, field
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select

from gpufleet.demo.seed_journal import Header, JournalMismatch, SeedJournal, read_header
from gpufleet.demo.seeder import People, Seeder, SeedingHalted, SeedProgress
from gpufleet.domain.access import Role
from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.requests import RequestState, request_code
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.store.tables import (
    Environment,
    Gpu,
    GpuRequest,
    Node,
    Pool,
    Project,
    ProjectMember,
    User,
)
from gpufleet.wire import requests as wr

# Share of each sharing mode's GPUs the seeding allocates (the whole fleet lands near 70 %).
TARGET_SHARE = {"exclusive": 0.72, "mig": 0.70, "shared": 0.70}
# Whole-GPU models differ: training GPUs are busier than inference ones.
MODEL_SHARE = {"H100-80GB": 0.78, "A100-80GB": 0.66, "L40S-48GB": 0.58}
BIG_PROJECTS = ("llm-pretrain", "korean-llm", "sovereign-ai", "multimodal",
                "autonomous-driving", "public-sector-llm")
MIG_USERS = ("notebook-service", "eval-harness", "speech-asr", "ocr-documents",
             "chatbot-cs", "rag-search", "clinical-nlp", "fraud-detection")
SHARED_USERS = ("notebook-service", "model-serving", "rag-search", "voc-analytics",
                "content-tagging", "customer-360")
AUTO_APPROVE_PROJECTS = ("notebook-service", "eval-harness", "voc-analytics",
                         "churn-prediction")
NO_QUOTA_SHARE = 0.12  # of the long tail: no quota at all, so every request needs an operator
SHORT_LIVED_S = 2      # "expired" history: allocations that end seconds after they start

WHOLE_REASONS = ("pretraining run", "fine-tuning sweep", "distributed training",
                 "hyper-parameter search", "inference benchmark", "evaluation run",
                 "ablation study", "batch inference", "model distillation")
SMALL_REASONS = ("notebook", "prototype", "evaluation", "debugging a training job",
                 "serving a demo", "data preprocessing with CUDA")


@dataclass
class LifecycleSummary:
    """What the fleet's lifecycle looks like now (counted from the store)."""

    gpus_total: int
    gpus_allocated: int
    active_requests: int
    projects_holding: int
    pending_requests: int
    waiting_requests: int
    expiring_24h: int
    pools_active: int
    pools_pending: int
    waiting_code: str | None = None  # an approved request that waits: `request why` has a story
    seconds: float | None = None  # how long the seeding took; None when nothing was seeded
    resumed: bool = False   # it finished a seeding an earlier start left part-way
    complete: bool = True   # False: stopped part-way (the demo is stopping); the next start
                            # finishes it

    @property
    def allocated_share(self) -> float:
        return self.gpus_allocated / self.gpus_total if self.gpus_total else 0.0

    def line(self) -> str:
        return (f"{self.gpus_allocated:,} of {self.gpus_total:,} GPUs allocated "
                f"({self.allocated_share:.0%}) to {self.active_requests} requests of "
                f"{self.projects_holding} projects; {self.pending_requests} requests await "
                f"approval, {self.waiting_requests} approved wait, {self.expiring_24h} end "
                f"within 24 h; {self.pools_active} pools ({self.pools_pending} requested)")


def lifecycle_summary(gf: Gpufleet, seconds: float | None = None, resumed: bool = False,
                      complete: bool = True) -> LifecycleSummary:
    now = gf.clock.now()
    with gf.store.read() as session:
        total = session.scalar(select(func.count()).select_from(Gpu)) or 0
        allocated = session.scalar(select(func.count()).select_from(Gpu)
                                   .where(Gpu.allocated.is_(True))) or 0
        by_state = dict(session.execute(select(GpuRequest.state, func.count())
                                        .group_by(GpuRequest.state)).all())
        holding = session.scalar(select(func.count(func.distinct(GpuRequest.project_id)))
                                 .where(GpuRequest.state == RequestState.ACTIVE.value)) or 0
        expiring = session.scalar(select(func.count()).select_from(GpuRequest).where(
            GpuRequest.state == RequestState.ACTIVE.value,
            GpuRequest.ends_at <= now + timedelta(hours=24))) or 0
        pools = dict(session.execute(select(Pool.state, func.count())
                                     .group_by(Pool.state)).all())
        waiting = session.scalar(select(GpuRequest.id).where(
            GpuRequest.state == RequestState.APPROVED.value).order_by(GpuRequest.id).limit(1))
    return LifecycleSummary(
        gpus_total=total, gpus_allocated=allocated,
        active_requests=by_state.get(RequestState.ACTIVE.value, 0),
        projects_holding=holding, pending_requests=by_state.get(RequestState.PENDING.value, 0),
        waiting_requests=by_state.get(RequestState.APPROVED.value, 0), expiring_24h=expiring,
        pools_active=pools.get("active", 0), pools_pending=pools.get("pending", 0),
        waiting_code=request_code(waiting) if waiting is not None else None, seconds=seconds,
        resumed=resumed, complete=complete)


# --- what the store holds before seeding ----------------------------------------------------
@dataclass(frozen=True)
class GpuGroup:
    """GPUs of one model, sharing mode and environment."""

    mode: str
    model: str
    environment: str
    gpus: int
    per_node: int  # the most GPUs one node of the group has
    nvlink: bool   # its GPUs report NVLink peers

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.mode, self.model, self.environment)

    @property
    def target(self) -> int:
        """GPUs of the group the seeding allocates."""
        share = MODEL_SHARE.get(self.model, TARGET_SHARE[self.mode]) \
            if self.mode == "exclusive" else TARGET_SHARE.get(self.mode, 0.7)
        return round(self.gpus * share)


@dataclass
class _World:
    groups: list[GpuGroup]
    projects: list[str]                 # ranked: the biggest users first
    members: dict[str, list[Principal]]  # project -> its member users
    operators: list[Principal]

    def digest(self) -> str:
        """What the plan is made from; a resumed seeding needs the same."""
        return hashlib.sha256(json.dumps([
            [astuple(g) for g in self.groups],
            self.projects,
            {p: [m.user_name for m in people] for p, people in sorted(self.members.items())},
            [o.user_name for o in self.operators]]).encode()).hexdigest()


def _read_world(gf: Gpufleet, rng: random.Random) -> _World:
    with gf.store.read() as session:
        gpus = session.execute(
            select(Gpu.sharing_mode, Gpu.model, Environment.name, Node.id, Gpu.nvlink_peers)
            .join(Node, Node.id == Gpu.node_id)
            .join(Environment, Environment.id == Node.environment_id)).all()
        project_names = sorted(session.scalars(select(Project.name)))
        memberships = session.execute(
            select(Project.name, User.id, User.name)
            .join(ProjectMember, ProjectMember.project_id == Project.id)
            .join(User, User.id == ProjectMember.user_id)
            .where(User.role == Role.MEMBER.value)
            .order_by(Project.name, User.name)).all()
        operators = session.execute(select(User.id, User.name).where(
            User.role == Role.OPERATOR.value).order_by(User.name)).all()
    on_node: dict[tuple[str, str, str], dict[int, list[int]]] = defaultdict(
        lambda: defaultdict(list))
    for mode, model, environment, node_id, peers in gpus:
        on_node[(mode, model, environment)][node_id].append(len(peers or ()))
    groups = []
    for (mode, model, env), nodes in sorted(on_node.items()):
        counts = [len(peers) for peers in nodes.values()]
        # NVLink across the whole node: every GPU sees every other one.
        linked = all(all(p == len(peers) - 1 for p in peers) for peers in nodes.values())
        groups.append(GpuGroup(mode, model, env, sum(counts), max(counts),
                               linked and max(counts) > 1))
    projects_of: dict[int, set[str]] = defaultdict(set)
    names: dict[int, str] = {}
    for project, user_id, user_name in memberships:
        projects_of[user_id].add(project)
        names[user_id] = user_name
    members: dict[str, list[Principal]] = defaultdict(list)
    for project, user_id, _ in memberships:
        members[project].append(Principal(role=Role.MEMBER, user_id=user_id,
                                          user_name=names[user_id],
                                          project_names=frozenset(projects_of[user_id])))
    tail = [p for p in project_names if p not in BIG_PROJECTS and p in members]
    rng.shuffle(tail)
    ranked = [p for p in BIG_PROJECTS if p in members] + tail
    return _World(groups=groups, projects=ranked, members=dict(members),
                  operators=[Principal(role=Role.OPERATOR, user_id=i, user_name=n)
                             for i, n in operators])


# --- the plan ---------------------------------------------------------------------------
@dataclass
class _Planned:
    project: str
    body: wr.RequestCreate
    flavour: str
    milli: int  # what it counts against its flavour's quota
    group: tuple[str, str, str]


@dataclass
class _Plan:
    requests: list[_Planned] = field(default_factory=list)
    holding: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))

    def add(self, group: GpuGroup, project: str, flavour: str, milli: int, **body) -> None:
        self.requests.append(_Planned(project, wr.RequestCreate(project=project, **body),
                                      flavour, milli, group.key))
        self.holding[(project, flavour)] += milli


def _weights(projects: list[str]) -> list[float]:
    """A long tail: the first project is ~60 times the last."""
    return [1 / (rank + 1) ** 1.0 for rank in range(len(projects))]


def _duration(rng: random.Random, big: bool) -> float:
    if rng.random() < 0.12:
        return round(rng.uniform(1.5, 9), 1)  # ends within hours
    return float(rng.choice((168, 336, 720) if big else (24, 48, 72, 168, 336)))


def _whole_sizes(rank: int, per_node: int) -> tuple[int, ...]:
    """Request sizes by project rank; never more than one node holds (the placement engine
    does not span a request over identical nodes: see the module's notes)."""
    if rank < 6:
        sizes = (per_node,)
    elif rank < 16:
        sizes = (per_node, per_node, per_node, max(per_node // 2, 1), 2)
    else:
        sizes = (1, 2, 2, 4, per_node)
    return tuple(min(n, per_node) for n in sizes)


def _plan_whole(rng: random.Random, world: _World, group: GpuGroup, plan: _Plan) -> None:
    target = group.target
    projects = world.projects
    weights = _weights(projects)
    planned: list[tuple[int, str, int]] = []
    left = target
    while left > 0:
        project = rng.choices(projects, weights)[0]
        rank = projects.index(project)
        count = min(rng.choice(_whole_sizes(rank, group.per_node)), left)
        planned.append((count, project, rank))
        left -= count
    # Biggest first: whole nodes are still whole when the 8-GPU jobs ask for them.
    for count, project, rank in sorted(planned, key=lambda p: -p[0]):
        same_node = 1 < count <= group.per_node
        plan.add(group, project, group.model, count * 1000, count=count, models=[group.model],
                 environment=group.environment, same_node=same_node,
                 nvlink=same_node and group.nvlink and count == group.per_node,
                 duration_hours=_duration(rng, rank < 6), reason=rng.choice(WHOLE_REASONS))


MIG_ASKS = (("1g.10gb", (4, 7, 7)), ("1g.20gb", (4,)), ("2g.20gb", (3, 6)),
            ("3g.40gb", (2, 4)), ("4g.40gb", (2,)), ("7g.80gb", (1, 2, 2)))


def _plan_mig(rng: random.Random, world: _World, group: GpuGroup, plan: _Plan) -> None:
    geometry = catalogue_model(group.model).mig
    asks = [(name, counts) for name, counts in MIG_ASKS if geometry.profile_named(name)]
    users = [p for p in MIG_USERS if p in world.members] or world.projects[-12:]
    weights = _weights(users)
    budget = group.target * 1.5  # GPUs' worth of instances: the fill stops at the target
    while budget > 0:
        project = rng.choices(users, weights)[0]
        profile, counts = rng.choice(asks)
        count = rng.choice(counts)
        budget -= count * geometry.weight(geometry.profile_named(profile))
        plan.add(group, project, f"{group.model}/{profile}", count * 1000, count=count,
                 models=[group.model], mig_profile=profile, environment=group.environment,
                 duration_hours=_duration(rng, False), reason=rng.choice(SMALL_REASONS))


def _plan_shared(rng: random.Random, world: _World, group: GpuGroup, plan: _Plan) -> None:
    users = [p for p in SHARED_USERS if p in world.members] or world.projects[-8:]
    weights = _weights(users)
    budget = group.target * 1.5
    while budget > 0:
        project = rng.choices(users, weights)[0]
        fraction = rng.choice((0.25, 0.5, 0.5))
        count = rng.choice((1, 2))
        budget -= count * fraction
        plan.add(group, project, f"{group.model}/shared", round(count * fraction * 1000),
                 count=count, fraction=fraction, models=[group.model],
                 environment=group.environment,
                 duration_hours=_duration(rng, False), reason=rng.choice(SMALL_REASONS))


def _nice(units: float) -> int:
    """A quota an operator would write: 1, 2, 4, 8, then multiples of 8."""
    if units <= 8:
        return next(n for n in (1, 2, 4, 8) if n >= units)
    return math.ceil(units / 8) * 8


# --- doing it ---------------------------------------------------------------------------
def _past(seeder: Seeder, plan: _Plan, rng: random.Random) -> list[str]:
    """History: released, rejected and cancelled requests, and short-lived ones to expire.

    Returns the codes of the short-lived ones."""
    small = [p for p in plan.requests if p.body.count <= 4][:]
    rng.shuffle(small)
    short_lived = []
    for i, planned in enumerate(small[:24]):
        body = planned.body
        if i < 10:  # granted, used, released
            made = seeder.create_and_approve(planned.project, body)
            if made.state == RequestState.ACTIVE.value:
                seeder.release(planned.project, made.code, "job finished")
        elif i < 15:  # turned down
            made = seeder.create(planned.project, body)
            if made.state == RequestState.PENDING.value:
                seeder.reject(made.code, rng.choice((
                    "please use the project's pool", "duplicate of an earlier request",
                    "the justification does not say what it is for")))
        elif i < 20:  # withdrawn by the requester
            made = seeder.create(planned.project, body)
            if made.state == RequestState.PENDING.value:
                seeder.cancel(planned.project, made.code, "not needed any more")
        else:  # held for seconds: the lifecycle loop expires them
            short = body.model_copy(update={"duration_hours": SHORT_LIVED_S / 3600,
                                            "reason": "smoke test of the training image"})
            made = seeder.create_and_approve(planned.project, short)
            if made.state == RequestState.ACTIVE.value:
                short_lived.append(made.code)
    return short_lived


def _set_policies(seeder: Seeder, world: _World, plan: _Plan,
                  pools: list[tuple[str, str, int]], rng: random.Random) -> None:
    admin = seeder.operator()
    tail = world.projects[12:]
    no_quota = set(rng.sample(tail, round(len(tail) * NO_QUOTA_SHARE))) - set(
        AUTO_APPROVE_PROJECTS)
    quota: dict[tuple[str, str], float] = defaultdict(float)
    for (project, flavour), milli in plan.holding.items():
        quota[(project, flavour)] += milli / 1000
    for project, flavour, count in pools:
        quota[(project, flavour)] += count
    for (project, flavour), units in sorted(quota.items()):
        if project in no_quota:
            continue
        limit = _nice(units * rng.choice((1.25, 1.5, 2.0)))
        seeder.set_quota(admin, project, flavour, limit)
    for project in AUTO_APPROVE_PROJECTS:
        if project in world.members:
            seeder.set_auto_approve(admin, project, wr.AutoApproveSet(max_gpus=1,
                                                                      max_hours=24))


def _pools(world: _World, groups: list[GpuGroup]) -> tuple[list[tuple[str, str, int]],
                                                           list[tuple[str, str, int]]]:
    """(approved, pending) pools: (project, flavour, count), sized from the fleet."""
    whole = defaultdict(int)
    for g in groups:
        if g.mode == "exclusive":
            whole[g.model] += g.gpus
    mig_models = sorted({g.model for g in groups if g.mode == "mig"})
    big = world.projects
    approved, pending = [], []
    for i, (model, share) in enumerate((("H100-80GB", 0.06), ("H100-80GB", 0.03),
                                        ("A100-80GB", 0.06), ("L40S-48GB", 0.1))):
        if whole.get(model) and i < len(big):
            approved.append((big[i], model, max(_nice(whole[model] * share) // 8 * 8, 2)))
    if "H100-80GB" in whole and len(big) > 6:
        pending.append((big[6], "H100-80GB", 16))
    if mig_models and "speech-asr" in world.members:
        pending.append(("speech-asr", f"{mig_models[-1]}/1g.10gb", 14))
    return approved, pending


def needs_lifecycle_seed(gf: Gpufleet) -> bool:
    """True while the store holds no request and no pool (a fresh data dir)."""
    with gf.store.read() as session:
        return (session.scalar(select(GpuRequest.id).limit(1)) is None
                and session.scalar(select(Pool.id).limit(1)) is None)


def seeding_todo(gf: Gpufleet, journal: Path | None) -> str | None:
    """"seed" for a fresh data dir, "resume" when the journal shows a seeding an earlier
    start stopped part-way, None when the fleet is already in use (or in the user's hands)."""
    if needs_lifecycle_seed(gf):
        return "seed"
    if journal is not None:
        header, complete = read_header(journal)
        if header is not None and not complete:
            return "resume"
    return None


def seed_lifecycle(gf: Gpufleet, seed: int, halt: threading.Event | None = None,
                   progress: SeedProgress | None = None,
                   journal: Path | None = None) -> LifecycleSummary | None:
    """Make the registered fleet look used, or finish the seeding `journal` shows was stopped
    part-way (with the journal's seed; `seed` is then not used).

    None when there is nothing to do: the store already has requests or pools and no
    unfinished seeding, or there are no GPUs or projects to use. With `halt` set the seeding
    stops before its next call and the summary says `complete=False`; `journal` (None: keep
    none) lets the next start finish it. Raises JournalMismatch when the fleet or its people
    changed since the seeding was stopped, so that it cannot be finished as it was planned.
    """
    started_s = time.monotonic()
    todo = seeding_todo(gf, journal)
    if todo is None:
        return None
    resumed = todo == "resume"
    header = read_header(journal)[0] if resumed else None
    rng = random.Random(header.seed if header else seed)
    world = _read_world(gf, rng)
    if not world.groups or not world.projects or not world.operators:
        return None
    if header is None:
        log = SeedJournal.start(journal, Header(seed, world.digest()))
    elif header.world == world.digest():
        log = SeedJournal.resume(journal)
    else:
        raise JournalMismatch("the fleet or its people changed since it was stopped")
    progress = progress or SeedProgress()
    seeder = Seeder(gf, People(world.members, world.operators), rng, log, halt, progress)
    try:
        short_lived = _seed(seeder, world, rng, progress)
    except SeedingHalted:
        return lifecycle_summary(gf, time.monotonic() - started_s, resumed=resumed,
                                 complete=False)
    if short_lived:
        gf.lifecycle.expire_due()  # those whose seconds have passed; the loop does the rest
    log.complete()
    return lifecycle_summary(gf, time.monotonic() - started_s, resumed=resumed)


def _seed(seeder: Seeder, world: _World, rng: random.Random,
          progress: SeedProgress) -> list[str]:
    """The seeding's calls, in order; returns the codes of the short-lived allocations."""
    plan = _Plan()
    for group in world.groups:
        if group.mode == "exclusive":
            _plan_whole(rng, world, group, plan)
        elif group.mode == "mig":
            _plan_mig(rng, world, group, plan)
        elif group.mode == "shared":
            _plan_shared(rng, world, group, plan)
    approved_pools, pending_pools = _pools(world, world.groups)

    progress.step = "quotas"
    _set_policies(seeder, world, plan, approved_pools, rng)
    progress.step = "pools"
    for project, flavour, count in approved_pools + pending_pools:
        pool = seeder.request_pool(wr.PoolCreate(
            project=project, flavour=flavour, count=count,
            reason="dedicated capacity for the quarter's roadmap"))
        if (project, flavour, count) in approved_pools:
            seeder.approve_pool(pool.code, "budget approved")

    progress.step = "history"
    short_lived = _past(seeder, plan, rng)

    progress.step = "allocations"
    _allocate(seeder, world, plan)

    progress.step = "queue"
    _queue(seeder, world, rng)
    return short_lived


def _allocate(seeder: Seeder, world: _World, plan: _Plan) -> None:
    stuck: list[tuple[str, str]] = []
    targets = {g.key: g.target for g in world.groups}
    allocated: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for planned in plan.requests:
        have, target = len(allocated[planned.group]), targets[planned.group]
        if have >= target or (planned.body.kind.value == "whole"
                              and have + planned.body.count > target):
            continue  # the plan over-asks; the fill stops near the group's target
        made = seeder.create_and_approve(planned.project, planned.body)
        allocated[planned.group].update(made.gpus)
        if made.state == RequestState.APPROVED.value:
            stuck.append((planned.project, made.code))
    for project, code in stuck:  # fragmentation left a plan without room: withdraw it
        seeder.cancel(project, code, "ran it elsewhere")


def _model_to_wait_for(seeder: Seeder, groups: list[GpuGroup]
                       ) -> tuple[GpuGroup, int, int] | None:
    """The first group whose model has GPUs in use (so a request can wait for them): the
    group, its free and its total exclusive GPUs."""
    with seeder.gf.store.read() as session:
        for group in groups:
            in_model = (select(func.count()).select_from(Gpu)
                        .where(Gpu.model == group.model, Gpu.sharing_mode == "exclusive"))
            total = session.scalar(in_model) or 0
            free = session.scalar(in_model.where(Gpu.allocated.is_(False))) or 0
            if free < total:
                return group, free, total
    return None


def _queue(seeder: Seeder, world: _World, rng: random.Random) -> None:
    """Pending requests, and approved ones that wait (for capacity, for their start)."""
    whole = [g for g in world.groups if g.mode == "exclusive"]
    mig = [g for g in world.groups if g.mode == "mig"]
    projects = world.projects
    asks: list[tuple[str, dict]] = []
    for i, group in enumerate(whole[:4]):
        project = projects[(3 + 5 * i) % len(projects)]
        asks.append((project, dict(count=group.per_node, models=[group.model],
                                   same_node=group.per_node > 1, duration_hours=336,
                                   reason="next training milestone")))
    for project in projects[-3:]:
        group = rng.choice(whole)
        asks.append((project, dict(count=rng.choice((1, 2)), models=[group.model],
                                   duration_hours=72, reason="first experiments")))
    if mig:
        asks.append((projects[20 % len(projects)], dict(
            count=2, models=[mig[0].model], mig_profile="3g.40gb", duration_hours=168,
            reason="evaluation of the distilled model")))
    for project, body in asks:
        # A quota smaller than the ask refuses it: that request simply is not made.
        seeder.create(project, wr.RequestCreate(project=project, **body), refusable=True)

    # Waiting for capacity: more L40S (or another whole model) than are free, yet no more
    # than the fleet has (a request larger than the fleet is refused at once).
    waiting = _model_to_wait_for(seeder, sorted(whole, key=lambda g: g.model != "L40S-48GB"))
    if waiting is not None:
        group, free, total = waiting
        project = projects[7 % len(projects)]
        count = min(free + 8, total)
        admin = seeder.operator()
        held = seeder.lc.project_quotas(admin, project)
        used = next((q.used for q in held.quotas if q.flavour == group.model), 0)
        seeder.set_quota(admin, project, group.model, _nice(used + count))
        seeder.create_and_approve(project, wr.RequestCreate(
            project=project, count=count, models=[group.model], duration_hours=168,
            reason="nightly batch inference for the whole catalogue"),
            "approved; it starts when capacity frees up")
    # Waiting for its start: a reservation for tomorrow morning.
    if whole:
        project = projects[1 % len(projects)]
        starts = (seeder.gf.clock.now() + timedelta(days=1)).replace(
            hour=0, minute=0, second=0, microsecond=0)
        seeder.create_and_approve(project, wr.RequestCreate(  # over the quota: not made
            project=project, count=whole[0].per_node, models=[whole[0].model],
            same_node=True, starts_at=starts, ends_at=starts + timedelta(days=2),
            reason="reserved for the quarterly benchmark"), refusable=True)
