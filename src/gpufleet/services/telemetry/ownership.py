"""Who held which unit when, read from the state store for a telemetry query's window.

Ownership is never a series label (docs/design.md, "Telemetry model"): the binding intervals are
read here, once per query, and passed to the telemetry store (`Bindings`) or to the funnel
arithmetic (`Slot`s). A unit is (gpu_uuid, mig_uuid): a MIG binding names (GPU, profile id,
placement start), which maps to the instance's current MIG UUID through the inventory's MIG rows.
Members see only their own projects' bindings.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from operator import attrgetter

from sqlalchemy import exists, func, or_, select
from sqlalchemy.orm import Session

from gpufleet.clock import Clock
from gpufleet.domain.inventory import GpuStatus, SharingMode
from gpufleet.domain.placement.model import MILLI
from gpufleet.domain.requests import request_code
from gpufleet.domain.telemetry.dcgm_mapping import derived_mig_uuid
from gpufleet.services.access.principal import Principal
from gpufleet.store.tables import Binding, Environment, Gpu, MigInstance, Node, Project
from gpufleet.tsdb import Binding as TelemetryBinding
from gpufleet.tsdb import Bindings
from gpufleet.tsdb.protocol import to_ms

UnitKey = tuple[str, str | None]  # (gpu_uuid, mig_uuid)


@dataclass(frozen=True)
class Slot:
    """One binding on one unit, as the telemetry queries need it."""

    unit: UnitKey
    node: str
    environment: str
    model: str
    kind: str
    mig_profile: str | None
    allocation: str
    project: str
    weight: float
    start: datetime
    end: datetime | None
    # The binding's row id: billing asks the masks per binding (services/billing).
    binding_id: int | None = None
    start_ms: int = field(init=False, compare=False)
    end_ms: int | None = field(init=False, compare=False)
    # What the telemetry store is given, made once: slots live in the SlotCache across
    # queries, and a range query at 100,000 GPUs passes 75,000 of them.
    binding: TelemetryBinding = field(init=False, compare=False, repr=False)
    # The binding alone, as `telemetry_bindings` hands a unit held once: no new object per
    # binding and question (see tsdb.masks.SpanColumns on why that matters).
    held: tuple[TelemetryBinding, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        binding = TelemetryBinding(self.start, self.end, self.allocation, self.project)
        object.__setattr__(self, "binding", binding)
        object.__setattr__(self, "held", (binding,))
        object.__setattr__(self, "start_ms", binding.start_ms)
        object.__setattr__(self, "end_ms", binding.end_ms)

    def label(self, name: str) -> str | None:
        get = _SLOT_LABELS.get(name)  # a question at 100,000 GPUs asks 75,000 slots
        return None if get is None else get(self)


_SLOT_LABELS: dict[str, Callable[[Slot], str | None]] = {
    "gpu_uuid": lambda s: s.unit[0], "mig_uuid": lambda s: s.unit[1],
    **{name: attrgetter(name) for name in ("node", "environment", "model", "mig_profile",
                                           "allocation", "project")}}


class SlotCache:
    """Every binding of the last `keep` (and every open one) as slots, re-read only when the
    binding table changed: bindings are only ever added or ended, so (rows, newest id, ended
    rows) changes with every write. A MIG instance recreated under the same binding gets a
    new UUID without such a change, so after `max_age_s` the MIG UUIDs alone are read again
    (a few rows: the MIG GPUs' instances) and the slots whose UUID changed are remade —
    re-reading every binding each minute cost ~1.2 s of CPU at 100,000 GPUs."""

    def __init__(self, keep: timedelta, clock: Clock, max_age_s: float = 60.0):
        self.keep = keep
        self.clock = clock
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._slots: list[Slot] = []
        self._mig_refs: list[tuple[int, MigKey]] = []
        self._mig_read_at = 0.0

    def covers(self, start: datetime) -> bool:
        """Whether every binding overlapping a window from `start` on is in the cache."""
        return start >= self.clock.now() - self.keep

    def slots(self, session: Session) -> list[Slot]:
        key = tuple(session.execute(select(func.count(), func.max(Binding.id),
                                           func.count(Binding.ended_at))).one())
        read_at = time.monotonic()
        with self._lock:
            fresh = self._key == key
            if fresh and read_at - self._mig_read_at < self.max_age_s:
                return self._slots
            slots, refs = self._slots, self._mig_refs
        if fresh:
            slots = _with_mig_uuids(slots, refs, _mig_instances(
                session, {gpu_id for _, (gpu_id, _, _) in refs}))
        else:
            slots, refs = _query_slots_and_refs(session, self.clock.now() - self.keep, None,
                                                None)
        with self._lock:
            self._key, self._slots, self._mig_refs = key, slots, refs
            self._mig_read_at = read_at
        return slots


def read_slots(session: Session, principal: Principal, start: datetime, end: datetime,
               *, projects: list[str] | None = None,
               allocations: list[str] | None = None,
               gpu_uuids: list[str] | None = None,
               cache: SlotCache | None = None) -> list[Slot]:
    """Bindings that overlap [start, end), as slots: from the cache where it holds the
    window (it keeps only bindings ended within its `keep`), else in one query (plus one
    for MIG UUIDs)."""
    own = principal.visible_projects
    if cache is None or gpu_uuids is not None or not cache.covers(start):
        slots = _query_slots(session, start, end, own, projects, gpu_uuids)
    else:
        start_ms, end_ms = to_ms(start), to_ms(end)
        wanted = None if own is None else set(own)
        if projects:
            wanted = set(projects) if wanted is None else wanted & set(projects)
        slots = [s for s in cache.slots(session)
                 if s.start_ms < end_ms and (s.end_ms is None or s.end_ms > start_ms)
                 and (wanted is None or s.project in wanted)]
    if allocations:
        slots = [s for s in slots if s.allocation in allocations]
    return slots


def _query_slots(session: Session, start: datetime, end: datetime | None,
                 own: frozenset[str] | None, projects: list[str] | None = None,
                 gpu_uuids: list[str] | None = None) -> list[Slot]:
    return _query_slots_and_refs(session, start, end, own, projects, gpu_uuids)[0]


# A MIG binding's instance: (GPU id, profile id, placement start).
MigKey = tuple[int, int, int | None]


def _query_slots_and_refs(session: Session, start: datetime, end: datetime | None,
                          own: frozenset[str] | None, projects: list[str] | None = None,
                          gpu_uuids: list[str] | None = None
                          ) -> tuple[list[Slot], list[tuple[int, MigKey]]]:
    """The slots, and for each MIG slot its index and instance key (to refresh its UUID)."""
    query = (select(Binding.kind, Binding.mig_profile_id, Binding.mig_start, Binding.milli,
                    Binding.started_at, Binding.ended_at, Binding.request_id, Binding.gpu_id,
                    Gpu.uuid, Gpu.model, Node.name, Environment.name, Project.name, Binding.id)
             .join(Gpu, Gpu.id == Binding.gpu_id).join(Node, Node.id == Binding.node_id)
             .join(Environment, Environment.id == Gpu.environment_id)
             .join(Project, Project.id == Binding.project_id)
             .where(or_(Binding.ended_at.is_(None), Binding.ended_at > start)))
    if end is not None:
        query = query.where(Binding.started_at < end)
    if own is not None:
        query = query.where(Project.name.in_(sorted(own)))
    if projects:
        query = query.where(Project.name.in_(projects))
    if gpu_uuids is not None:
        query = query.where(Gpu.uuid.in_(gpu_uuids))
    rows = session.execute(query).all()
    mig = _mig_instances(session, {r.gpu_id for r in rows if r.kind == "mig"})
    slots: list[Slot] = []
    refs: list[tuple[int, MigKey]] = []
    for (kind, profile_id, mig_start, milli, started, ended, request_id, gpu_id, uuid, model,
         node, environment, project, binding_id) in rows:
        code = request_code(request_id)
        mig_uuid, profile = None, None
        if kind == "mig":
            instance = (gpu_id, profile_id, mig_start)
            mig_uuid, profile = mig.get(instance, _pending(instance))
            refs.append((len(slots), instance))
        slots.append(Slot((uuid, mig_uuid), node, environment, model, kind, profile, code,
                          project, milli / MILLI, started, ended, binding_id))
    return slots, refs


def _pending(instance: MigKey) -> tuple[str, None]:
    """A MIG binding whose instance no agent reported yet."""
    _, profile_id, start = instance
    return f"pending:{profile_id}@{start}", None


def _with_mig_uuids(slots: list[Slot], refs: list[tuple[int, MigKey]],
                    mig: dict[MigKey, tuple[str, str]]) -> list[Slot]:
    """`slots` with each MIG slot's UUID and profile as `mig` says now (a new list where
    any changed: readers may hold the old one)."""
    changed: dict[int, Slot] = {}
    for index, instance in refs:
        slot = slots[index]
        mig_uuid, profile = mig.get(instance, _pending(instance))
        if (mig_uuid, profile) != (slot.unit[1], slot.mig_profile):
            changed[index] = replace(slot, unit=(slot.unit[0], mig_uuid), mig_profile=profile)
    if not changed:
        return slots
    return [changed.get(i, slot) for i, slot in enumerate(slots)]


def _mig_instances(session: Session, gpu_ids: set[int]) -> dict[tuple, tuple[str, str]]:
    if not gpu_ids:
        return {}
    rows = session.execute(select(MigInstance.gpu_id, MigInstance.profile_id,
                                  MigInstance.placement_start, MigInstance.mig_uuid,
                                  MigInstance.profile_name)
                           .where(MigInstance.gpu_id.in_(gpu_ids)))
    return {(g, p, s): (u or f"pending:{p}@{s}", name) for g, p, s, u, name in rows}


def mig_instance_units(session: Session, gpu_uuids: list[str] | None = None
                       ) -> list[tuple[str, str, str | None]]:
    """(GPU UUID, MIG UUID, profile name) of every MIG instance the inventory knows (on
    `gpu_uuids` when given), the MIG UUID as telemetry names the instance: its real one,
    else — a node read through dcgm-exporter, which never says it — the stand-in that
    telemetry derives from (GPU UUID, GPU instance id), so both sides name one unit."""
    query = (select(Gpu.uuid, MigInstance.mig_uuid, MigInstance.gpu_instance_id,
                    MigInstance.profile_name).join(Gpu, Gpu.id == MigInstance.gpu_id)
             .where(or_(MigInstance.mig_uuid.is_not(None),
                        MigInstance.gpu_instance_id.is_not(None))))
    if gpu_uuids is not None:
        query = query.where(Gpu.uuid.in_(gpu_uuids))
    return [(gpu, mig or derived_mig_uuid(gpu, instance_id), name)
            for gpu, mig, instance_id, name in session.execute(query)]


def mig_mode_gpus(session: Session) -> frozenset[str]:
    """UUIDs of the GPUs in MIG mode, as their nodes last reported them.

    A MIG-enabled GPU is handed out as its instances only: no binding ever holds its
    whole-GPU unit (gpu, None), so what that unit reports (engine activity, memory used)
    is its instances' usage summed, never usage of its own — the instances are judged on
    their own series. The state store is the authority here, not the series: the node's
    inventory is what placement and the bindings go by, and a series with a MIG label
    proves MIG mode only where the source reports per-instance values at all (NVML on
    Ampere gives an instance no activity series). MIG mode is the mode the node runs
    now — `pending_sharing_mode` where open bindings keep the old one — or instances it
    listed (identified or not)."""
    query = select(Gpu.uuid).where(or_(
        func.coalesce(Gpu.pending_sharing_mode, Gpu.sharing_mode) == SharingMode.MIG.value,
        Gpu.mig_instances_unread > 0,
        exists().where(MigInstance.gpu_id == Gpu.id)))
    return frozenset(session.scalars(query))


def mig_profiles(session: Session) -> dict[str, str]:
    """MIG UUID (as telemetry names it) → profile name, for every MIG instance the
    inventory knows."""
    return {mig: name for _, mig, name in mig_instance_units(session)}


def telemetry_bindings(slots: list[Slot]) -> Bindings:
    by_unit: dict[UnitKey, tuple[TelemetryBinding, ...]] = {}
    for s in slots:
        held = by_unit.get(s.unit)
        by_unit[s.unit] = s.held if held is None else (*held, s.binding)
    return by_unit


INVENTORY_LABELS = ("environment", "model", "node")


def inventory_gpu_seconds(session: Session, by: tuple[str, ...], start: datetime,
                          end: datetime) -> dict[tuple, float]:
    """GPU-seconds of the inventory's GPUs (not retired) over [start, end), per group of
    `by` (a subset of environment, model, node). A GPU counts from when it was first seen."""
    columns = {"environment": Environment.name, "model": Gpu.model, "node": Node.name}
    chosen = [columns[name] for name in by]
    base = (select(*chosen, func.count()).select_from(Gpu)
            .join(Node, Node.id == Gpu.node_id)
            .join(Environment, Environment.id == Gpu.environment_id)
            .where(Gpu.status != GpuStatus.RETIRED.value))
    span = (end - start).total_seconds()
    totals: dict[tuple, float] = defaultdict(float)
    for *key, count in session.execute(base.where(Gpu.first_seen_at <= start)
                                       .group_by(*chosen)):
        totals[tuple(key)] += count * span
    late = (select(*chosen, Gpu.first_seen_at).select_from(Gpu)
            .join(Node, Node.id == Gpu.node_id)
            .join(Environment, Environment.id == Gpu.environment_id)
            .where(Gpu.status != GpuStatus.RETIRED.value, Gpu.first_seen_at > start,
                   Gpu.first_seen_at < end))
    for *key, first_seen in session.execute(late):
        totals[tuple(key)] += (end - first_seen).total_seconds()
    return dict(totals)
