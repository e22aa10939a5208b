"""Granting: from an approved request to bound units, through the placement engine.

Order of choice (docs/design.md, "Concepts"): a project's own pool of a matching flavour first;
otherwise free capacity, within the project's quota, that no pool has reserved. The placement engine
decides which concrete units; `bindings.open_bindings` makes the database hold them.

Everything a plan reads besides the request comes in: the fleet (the server's placement
cache, or a fresh read for `why`) and the quota and pool ledgers, so a batch of grants
reads them once and each grant sees the ones before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.admission import CapacityFact, QuotaFact
from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.inventory import OUT_OF_SERVICE, GpuStatus, NodeStatus
from gpufleet.domain.placement import Decision, Demand, Placer, Refusal, StaleDecision, UnitKind
from gpufleet.domain.requests import Flavour, FlavourKind, parse_flavour
from gpufleet.services.lifecycle import placement_state
from gpufleet.services.lifecycle.placement_state import MODE_OF_KIND
from gpufleet.services.lifecycle.quotas import QuotaLedger
from gpufleet.store.tables import Binding, Gpu, GpuRequest, Node, Pool


@dataclass(frozen=True)
class Grant:
    """A placement ready to be written, and the pool it draws from (if any)."""

    decision: Decision
    live: placement_state.LiveFleet
    pool_id: int | None


@dataclass(frozen=True)
class NoGrant:
    """Why a request cannot be granted now: a wait code and a sentence."""

    code: str
    message: str
    quotas: tuple[QuotaFact, ...] = ()
    capacity: CapacityFact | None = None


def fleet_models(session: Session, kind: FlavourKind) -> list[str]:
    mode = MODE_OF_KIND[kind].value
    return sorted(session.scalars(select(Gpu.model).where(Gpu.sharing_mode == mode)
                                  .distinct()))


def has_mig_profile(model_key: str, profile_name: str | None) -> bool:
    found = catalogue_model(model_key)
    return bool(found and found.mig and profile_name and found.mig.profile_named(profile_name))


def demand_milli(request: GpuRequest) -> int:
    """What the request counts against a quota or a pool."""
    per_unit = request.milli if request.kind == FlavourKind.SHARED.value else 1000
    return request.count * per_unit


def governing_quotas(facts: list[QuotaFact]) -> list[QuotaFact]:
    """The flavours a quota speaks for; when none has one, all of them (an operator decides)."""
    with_quota = [f for f in facts if f.limit_milli is not None]
    return with_quota or facts


def physical_milli(flavour: Flavour, count: int, unit_milli: int) -> int:
    """GPU capacity (milli-GPU) that `count` units of a flavour take (docs/design.md, "Funnel and
    activity" weights)."""
    if flavour.kind is FlavourKind.MIG:
        geometry = catalogue_model(flavour.model).mig
        profile = geometry.profile_named(flavour.mig_profile)
        return count * round(geometry.weight(profile) * 1000)
    if flavour.kind is FlavourKind.SHARED:
        return count * unit_milli
    return count * 1000


def _pool_use(session: Session, pool_ids: list[int]) -> dict[int, tuple[int, int]]:
    """Per pool: (units held, physical milli held) by open bindings."""
    if not pool_ids:
        return {}
    rows = session.execute(
        select(GpuRequest.pool_id, func.count(), func.sum(Binding.milli))
        .join(GpuRequest, GpuRequest.id == Binding.request_id)
        .where(GpuRequest.pool_id.in_(pool_ids), Binding.ended_at.is_(None))
        .group_by(GpuRequest.pool_id))
    return {pool_id: (int(n), int(milli or 0)) for pool_id, n, milli in rows}


def pool_units_used(session: Session, pool: Pool) -> float:
    """Units of the pool held now (shared pools: GPUs' worth)."""
    count, milli = _pool_use(session, [pool.id]).get(pool.id, (0, 0))
    shared = parse_flavour(pool.flavour).kind is FlavourKind.SHARED
    return milli / 1000 if shared else float(count)


@dataclass
class PoolLedger:
    """The active pools and what their projects hold of them, read once; a batch of grants
    keeps it current (`add`)."""

    pools: list[Pool]  # by id: a project's oldest pool is drawn from first
    use: dict[int, tuple[int, int]]  # pool id -> (units, physical milli) held

    @classmethod
    def read(cls, session: Session, project_id: int | None = None) -> PoolLedger:
        """Every active pool, or one project's (enough to ask `matching` for its request)."""
        query = select(Pool).where(Pool.state == "active").order_by(Pool.id)
        if project_id is not None:
            query = query.where(Pool.project_id == project_id)
        pools = list(session.scalars(query))
        return cls(pools, _pool_use(session, [p.id for p in pools]))

    def matching(self, request: GpuRequest, flavours: list[Flavour]
                 ) -> tuple[Pool, Flavour] | None:
        """The project's active pool of a candidate flavour with room for the request."""
        by_key = {f.key: f for f in flavours}
        for pool in self.pools:
            if pool.project_id != request.project_id or pool.flavour not in by_key:
                continue
            flavour = by_key[pool.flavour]
            units_held, milli_held = self.use.get(pool.id, (0, 0))
            if flavour.kind is FlavourKind.SHARED:
                room = pool.count * pool.unit_milli - milli_held >= demand_milli(request)
            else:
                room = pool.count - units_held >= request.count
            if room:
                return pool, flavour
        return None

    def unused_reservations(self) -> dict[tuple[str, str], int]:
        """Physical milli that pools reserve and do not use, per (kind, model)."""
        reserved: dict[tuple[str, str], int] = {}
        for pool in self.pools:
            flavour = parse_flavour(pool.flavour)
            total = physical_milli(flavour, pool.count, pool.unit_milli)
            held = self.use.get(pool.id, (0, 0))[1]
            key = (flavour.kind.value, flavour.model)
            reserved[key] = reserved.get(key, 0) + max(total - held, 0)
        return reserved

    def add(self, pool_id: int, decision: Decision) -> None:
        units, milli = self.use.get(pool_id, (0, 0))
        self.use[pool_id] = (units + len(decision.units), milli + decision.milli)


def lock_pools_drawn_on(session: Session, pool_ids: set[int]) -> None:
    """Share-lock the pools a batch of grants draws on, and refuse the batch (a stale
    decision: the granter tries again without them) if one was ended since the ledger was
    read. Ending a pool takes its row's exclusive lock (`pools.end_pool`), so a grant and an
    end never both believe the pool is theirs."""
    if not pool_ids:
        return
    still_active = set(session.scalars(
        select(Pool.id).where(Pool.id.in_(pool_ids), Pool.state == "active")
        .with_for_update(read=True)))
    if still_active != pool_ids:
        raise StaleDecision(f"pools {sorted(pool_ids - still_active)} ended meanwhile")


def free_capacity(session: Session, kind: FlavourKind, model: str) -> int:
    """Physical milli of `model` in `kind`'s sharing mode that new units could take now,
    read from the state store (pool approval; grants ask the placement cache)."""
    usable = (Gpu.model == model, Gpu.sharing_mode == MODE_OF_KIND[kind].value)
    if kind is FlavourKind.WHOLE:
        free = session.scalar(select(func.count()).select_from(Gpu).where(
            *usable, Gpu.status == GpuStatus.FREE.value))
        return int(free) * 1000
    ready = (select(Gpu.id).join(Node, Node.id == Gpu.node_id)
             .where(*usable, Node.status == NodeStatus.READY.value,
                    Gpu.health.not_in(OUT_OF_SERVICE)))
    gpu_ids = list(session.scalars(ready))
    if kind is FlavourKind.SHARED:
        used = session.scalar(select(func.coalesce(func.sum(Gpu.used_milli), 0))
                              .where(Gpu.id.in_(gpu_ids))) if gpu_ids else 0
    else:
        used = session.scalar(select(func.coalesce(func.sum(Binding.milli), 0)).where(
            Binding.gpu_id.in_(gpu_ids), Binding.ended_at.is_(None))) if gpu_ids else 0
    return len(gpu_ids) * 1000 - int(used)


class FleetSource(Protocol):
    """The fleet a plan decides against: the server's placement cache, or a fresh read."""

    @property
    def live(self) -> placement_state.LiveFleet: ...

    def models(self, kind: FlavourKind) -> list[str]: ...

    def decide(self, demand: Demand) -> Decision | Refusal: ...

    def free_milli(self, kind: FlavourKind, model: str) -> int: ...


class FreshFleet:
    """The fleet read from the state store for one plan (what `why` explains with): the
    request's kind, models and environment only; nothing cached, nothing learnt."""

    def __init__(self, session: Session, request: GpuRequest, policy: str):
        self._session = session
        self.live = placement_state.load(session, kinds=[FlavourKind(request.kind)],
                                         models=request.models or None,
                                         environment=request.environment)
        self._placer = Placer(self.live.state, policy, learn=False)

    def models(self, kind: FlavourKind) -> list[str]:
        return fleet_models(self._session, kind)

    def decide(self, demand: Demand) -> Decision | Refusal:
        return self._placer.decide(demand)

    def free_milli(self, kind: FlavourKind, model: str) -> int:
        free = placement_state.free_milli_by_mode(self.live.state.nodes)
        return free[(MODE_OF_KIND[kind].value, model)]


class DryRunFleet:
    """The placement cache for a plan that is never written (the request preview): it
    decides as the next grant would, and applies nothing."""

    def __init__(self, cache):
        self._cache = cache

    @property
    def live(self) -> placement_state.LiveFleet:
        return self._cache.live

    def models(self, kind: FlavourKind) -> list[str]:
        return self._cache.models(kind)

    def decide(self, demand: Demand) -> Decision | Refusal:
        return self._cache.preview(demand)

    def free_milli(self, kind: FlavourKind, model: str) -> int:
        return self._cache.free_milli(kind, model)


def candidate_flavours(request: GpuRequest, fleet_models: list[str]) -> list[Flavour]:
    """Every concrete flavour the request could be granted as (`fleet_models`: the models
    of its kind's sharing mode, for a request that accepts any)."""
    kind = FlavourKind(request.kind)
    models = request.models or fleet_models
    if kind is FlavourKind.MIG:
        return [Flavour(kind, m, request.mig_profile) for m in models
                if has_mig_profile(m, request.mig_profile)]
    return [Flavour(kind, m) for m in models]


def demand_of(request: GpuRequest, models: Iterable[str] | None = None) -> Demand:
    chosen = models if models is not None else request.models
    return Demand(
        kind=UnitKind(request.kind), count=request.count,
        models=frozenset(chosen) if chosen else None,
        mig_profile=request.mig_profile, milli=request.milli,
        cpu_milli=request.cpu_milli_per_unit * request.count,
        memory_mib=request.memory_mib_per_unit * request.count,
        same_node=request.same_node or request.nvlink, nvlink=request.nvlink,
        environments=frozenset({request.environment}) if request.environment else None)


def plan(session: Session, request: GpuRequest, *, fleet: FleetSource, quota: QuotaLedger,
         pools: PoolLedger) -> Grant | NoGrant:
    """Decide where the request would go now; writes nothing."""
    flavours = candidate_flavours(request, fleet.models(FlavourKind(request.kind)))
    if not flavours:  # not a quota matter: no usable GPU of the kind is known to the fleet
        return NoGrant("waiting_for_capacity", "no usable GPU in the fleet offers what the "
                       "request accepts")
    facts = quota.facts(request.project_id, flavours)
    pooled = pools.matching(request, flavours)
    if pooled is not None:
        pool, flavour = pooled
        allowed, pool_id = [flavour], pool.id
    else:
        pool_id = None
        governing = governing_quotas(facts)
        need = demand_milli(request)
        allowed_keys = {q.flavour for q in governing
                        if q.limit_milli is None or q.used_milli + need <= q.limit_milli}
        if not allowed_keys:
            return NoGrant("quota_exhausted", "the project holds its quota of every flavour "
                           "the request accepts", tuple(governing))
        reserved = pools.unused_reservations()
        allowed = [f for f in flavours if f.key in allowed_keys
                   and _unreserved_room(fleet, f, request, reserved)]
        if not allowed:
            return NoGrant("pool_reserved", "the free capacity of the flavours the request "
                           "accepts is reserved by projects' pools", tuple(governing))
    outcome = fleet.decide(demand_of(request, [f.model for f in allowed]))
    if isinstance(outcome, Refusal):
        return NoGrant("waiting_for_capacity", outcome.message, tuple(facts),
                       capacity_fact(session, request, outcome))
    return Grant(decision=outcome, live=fleet.live, pool_id=pool_id)


def quota_use(request: GpuRequest, decision: Decision, live: placement_state.LiveFleet
              ) -> dict[str, int]:
    """Milli per flavour a granted decision holds against the project's quotas."""
    use: dict[str, int] = {}
    for unit in decision.units:
        model = live.state.gpu(unit.gpu).model
        key = Flavour(FlavourKind(request.kind), model, request.mig_profile).key
        use[key] = use.get(key, 0) + (unit.milli if unit.kind is UnitKind.SHARED else 1000)
    return use


def _unreserved_room(fleet: FleetSource, flavour: Flavour, request: GpuRequest,
                     reservations: dict[tuple[str, str], int]) -> bool:
    """Whether the free capacity left after every pool's unused reservation fits it."""
    reserved = reservations.get((flavour.kind.value, flavour.model), 0)
    if not reserved:
        return True
    need = physical_milli(flavour, request.count, request.milli)
    return fleet.free_milli(flavour.kind, flavour.model) - reserved >= need


def capacity_fact(session: Session, request: GpuRequest, refusal: Refusal) -> CapacityFact:
    """How many matching GPUs exist, and how many are excluded by health or node status."""
    query = (select(Gpu.health, Node.status, func.count()).join(Node, Node.id == Gpu.node_id)
             .where(Gpu.sharing_mode == MODE_OF_KIND[FlavourKind(request.kind)].value)
             .group_by(Gpu.health, Node.status))
    if request.models:
        query = query.where(Gpu.model.in_(request.models))
    usable = quarantined = unschedulable = 0
    for health, node_status, n in session.execute(query):
        if node_status != NodeStatus.READY.value:
            unschedulable += n
        elif health in OUT_OF_SERVICE:
            quarantined += n
        else:
            usable += n
    return CapacityFact(usable_gpus=usable, quarantined_gpus=quarantined,
                        unschedulable_gpus=unschedulable, placement_refusal=refusal.reason,
                        placement_message=refusal.message)


def end_time(request: GpuRequest, now: datetime) -> datetime | None:
    """When an activated request ends: its fixed end, or its duration from now."""
    if request.ends_at is not None:
        return request.ends_at
    if request.duration_s:
        return now + timedelta(seconds=request.duration_s)
    return None
