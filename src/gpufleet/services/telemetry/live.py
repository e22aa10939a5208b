"""The live side of telemetry queries: each unit's latest values and processes and whom they
are charged to, zombie processes, unattributed usage, and the fleet view behind `top`.

"Live" means a value from the last `FRESH` (five minutes): a unit or process silent longer is not
shown as running. Charges come from the bindings open now (the truth, docs/design.md, "Concepts"); a
workload's claim (`GPUFLEET_ALLOCATION`, `gpufleet.tag`) is checked against them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import exists, select

from gpufleet.domain.requests import request_id_from_code
from gpufleet.domain.telemetry.funnel import (
    GR_ENGINE_ACTIVE,
    MEMORY_USED,
    PROCESS_MEMORY,
    PROCESS_SM,
    SM_ACTIVE,
    UTILIZATION,
    WORKLOAD_CLAIMED,
    BindingState,
    ClaimMatch,
    IdleState,
    Thresholds,
    activity_signal,
    architecture_of_model,
    check_claim,
    idle_verdict,
    is_unattributed,
    unit_activity,
    zombie_reason,
)
from gpufleet.services.access.principal import SYSTEM, Principal
from gpufleet.services.paging import SortSpec, apply_page, split_page
from gpufleet.services.telemetry.ownership import (
    Slot,
    UnitKey,
    mig_instance_units,
    mig_mode_gpus,
    read_slots,
)
from gpufleet.store.tables import Binding, Environment, Gpu, Node, Project
from gpufleet.tsdb import LatestValue, SeriesLabels, TelemetryStore
from gpufleet.tsdb.protocol import to_ms
from gpufleet.wire import telemetry_queries as wt
from gpufleet.wire.base import Page

if TYPE_CHECKING:
    from gpufleet.clock import Clock
    from gpufleet.services.telemetry.ownership import SlotCache
    from gpufleet.store.database import StateStore
    from gpufleet.tsdb.masks import MaskStore, MinuteMasks


class LiveSources(Protocol):
    """What the live questions read: `TelemetryQueries` offers it. Named here, not imported,
    so this module depends on nothing above it (queries.py calls in, never the reverse)."""

    state: StateStore
    clock: Clock
    thresholds: Thresholds

    @property
    def telemetry(self) -> TelemetryStore: ...

    @property
    def slot_cache(self) -> SlotCache: ...

    @property
    def masks(self) -> MinuteMasks: ...

    def mask_store(self) -> MaskStore: ...


FRESH = timedelta(minutes=5)
_ACTIVITY_METRICS = (GR_ENGINE_ACTIVE, UTILIZATION)
_EPSILON = timedelta(microseconds=1)


@dataclass(frozen=True)
class UnitFilter:
    environment: list[str]
    node: str | None
    model: list[str]
    project: str | None
    allocation: str | None


def idle_state(t: Thresholds, *, known_minutes: float, memory: float | None) -> str | None:
    """`idle` / `idle_held` for a unit bound all window with no active minute; None when its
    activity was unknown for too much of the window."""
    state = idle_verdict(window_minutes=t.idle_window_minutes,
                         bound_minutes=t.idle_window_minutes,
                         known_minutes=round(known_minutes), active_minutes=0,
                         memory_used_bytes=memory, t=t)
    return state.value if state in (IdleState.IDLE, IdleState.IDLE_HELD) else None


def latest_memory(store: TelemetryStore, units: list[UnitKey], now: datetime
                  ) -> dict[UnitKey, float]:
    """Each unit's fresh memory used (the idle list's idle / idle-held split): by unit,
    not by series, so a fleet's candidates cost no `LatestValue` each."""
    if not units:
        return {}
    return store.latest_of_units(MEMORY_USED, units, since=now - FRESH)


def _unit(labels: SeriesLabels) -> UnitKey:
    return (labels.gpu_uuid, labels.mig_uuid)


def _mig_parent(unit: UnitKey, mig_gpus: frozenset[str]) -> bool:
    """Whether `unit` is the whole-GPU unit of a GPU in MIG mode (`mig_mode_gpus`): not a
    unit anyone can hold, so what it reports is never unbound, never a zombie's and never a
    unit of its own in `top` — its instances are judged, each on its own series."""
    return unit[1] is None and unit[0] in mig_gpus


def _open_now(slots: list[Slot], now: datetime) -> dict[UnitKey, list[Slot]]:
    held: dict[UnitKey, list[Slot]] = defaultdict(list)
    for slot in slots:
        if slot.start <= now and (slot.end is None or slot.end > now):
            held[slot.unit].append(slot)
    return held


def _charges(slots: list[Slot]) -> list[wt.Charge]:
    return [wt.Charge(allocation=s.allocation, project=s.project, weight=s.weight)
            for s in sorted(slots, key=lambda s: s.allocation)]


def _owned(principal: Principal, slots: list[Slot]) -> bool:
    """Whether the caller may see this unit's usage: everyone but members, and members on
    units their projects hold."""
    return principal.visible_projects is None or any(principal.sees_project(s.project)
                                                     for s in slots)


def _visible(principal: Principal, slots: list[Slot]) -> list[Slot]:
    """The slots whose allocations the caller may see."""
    return [s for s in slots if principal.sees_project(s.project)]


def _sees_workload(principal: Principal, holders: list[Slot], claimed: str | None) -> bool:
    """Whether the caller may see one workload (a process, a workload claim) on a unit
    `holders` hold now: everyone but members; members when the unit is held by their
    projects alone, or the workload claims one of their allocations. On a GPU shared with
    another project a workload that claims none of theirs may be the other project's:
    its pid, pod, namespace and claim are not theirs to see."""
    if principal.visible_projects is None:
        return True
    mine = _visible(principal, holders)
    return bool(mine) and (len(mine) == len(holders)
                           or claimed in {s.allocation for s in mine})


def _open_slots(session, principal: Principal, start: datetime, now: datetime, **options
                ) -> tuple[list[Slot], dict[UnitKey, list[Slot]]]:
    """The slots the caller may see over [start, now], and every binding holding each unit
    now, whoever's: what decides which of a shared unit's workloads a member may see."""
    every = read_slots(session, SYSTEM, start, now + _EPSILON, **options)
    return _visible(principal, every), _open_now(every, now)


# --- latest snapshots ---------------------------------------------------------------------

def latest_snapshots(q: LiveSources, principal: Principal, f: UnitFilter,
                     cursor: str | None, limit: int) -> Page[wt.UnitSnapshotView]:
    now = q.clock.now()
    with q.state.read() as session:
        page, next_cursor = _gpu_page(session, principal, f, cursor, limit)
        uuids = [g[0] for g in page]
        slots, holders = _open_slots(session, principal, now, now, gpu_uuids=uuids)
        mig_rows = mig_instance_units(session, uuids)
    held = _open_now(slots, now)
    values = q.telemetry.latest({"gpu_uuid": uuids}, since=now - FRESH) if uuids else []
    by_unit: dict[UnitKey, list[LatestValue]] = defaultdict(list)
    for v in values:
        by_unit[_unit(v.series)].append(v)
    profiles = {m: p for _, m, p in mig_rows}
    units_of: dict[str, set[str | None]] = defaultdict(lambda: {None})
    for g, m, _ in mig_rows:
        units_of[g].add(m)
    for g, m in by_unit:
        units_of[g].add(m)
    items = []
    for uuid, node, environment, model in page:
        for mig in sorted(units_of[uuid], key=lambda m: (m is not None, m or "")):
            unit = (uuid, mig)
            if not _owned(principal, held.get(unit, [])):
                continue
            items.append(_snapshot(principal, unit, node, environment, model,
                                   profiles.get(mig or ""), by_unit.get(unit, []),
                                   held.get(unit, []), holders.get(unit, [])))
    return Page[wt.UnitSnapshotView](items=items, next_cursor=next_cursor)


_BY_UUID = SortSpec((Gpu.uuid,))


def _gpu_page(session, principal: Principal, f: UnitFilter, cursor: str | None, limit: int
              ) -> tuple[list[tuple[str, str, str, str]], str | None]:
    """One page of the GPUs the filter names (by UUID) and the next page's cursor."""
    query = (select(Gpu.uuid, Node.name, Environment.name, Gpu.model)
             .join(Node, Node.id == Gpu.node_id)
             .join(Environment, Environment.id == Gpu.environment_id))
    if f.environment:
        query = query.where(Environment.name.in_(f.environment))
    if f.model:
        query = query.where(Gpu.model.in_(f.model))
    if f.node:
        query = query.where(Node.name == f.node)
    held = (exists().where(Binding.gpu_id == Gpu.id, Binding.ended_at.is_(None))
            .correlate(Gpu))
    projects = principal.visible_projects
    if f.project:
        projects = {f.project} if projects is None else projects & {f.project}
    if projects is not None:
        held = held.where(Binding.project_id == Project.id,
                          Project.name.in_(projects or {""}))
    if f.allocation:
        held = held.where(Binding.request_id == (request_id_from_code(f.allocation) or -1))
    if projects is not None or f.allocation:
        query = query.where(held)
    rows = [tuple(r) for r in session.execute(apply_page(query, _BY_UUID, cursor, limit))]
    return split_page(rows, limit, lambda row: [row[0]])


def _snapshot(principal: Principal, unit: UnitKey, node: str, environment: str, model: str,
              profile: str | None, values: list[LatestValue], held: list[Slot],
              holders: list[Slot]) -> wt.UnitSnapshotView:
    """One unit as the caller may see it: `held` (its visible bindings) are the charges,
    `holders` (all of them) the truth the claims are checked against."""
    plain = {v.series.metric: v for v in values if not v.series.labels}
    activity, source = _activity({m: v.value for m, v in plain.items()}, unit, model,
                                 any(v.series.metric == PROCESS_MEMORY for v in values))
    processes = [p for p in _processes(values, [s.allocation for s in holders])
                 if _sees_workload(principal, holders, p.claimed_allocation)]
    claims = [dict(v.series.labels) for v in values
              if v.series.metric == WORKLOAD_CLAIMED and v.value >= 1
              and _sees_workload(principal, holders, None)]
    newest = max((v.at for v in values), default=None)
    return wt.UnitSnapshotView(
        gpu_uuid=unit[0], mig_uuid=unit[1], mig_profile=profile, node=node,
        environment=environment, model=model, at=newest, activity_percent=activity,
        activity_source=source, values={m: v.value for m, v in sorted(plain.items())},
        charged_to=_charges(held), processes=processes, workload_claims=claims)


def _activity(latest: dict[str, float], unit: UnitKey, model: str,
              process_running: bool) -> tuple[float | None, str]:
    activity, source = unit_activity(latest, process_running=process_running,
                                     is_mig=unit[1] is not None,
                                     architecture=architecture_of_model(model))
    return activity, source.value


def _processes(values: list[LatestValue], bound: list[str]) -> list[wt.ProcessView]:
    found: dict[tuple, dict] = {}
    for v in values:
        if v.series.metric not in (PROCESS_MEMORY, PROCESS_SM):
            continue
        labels = dict(v.series.labels)
        entry = found.setdefault(v.series.labels, {"labels": labels, "at": v.at})
        entry[v.series.metric] = v.value
        entry["at"] = max(entry["at"], v.at)
    views = []
    for entry in found.values():
        labels = entry["labels"]
        claimed = labels.get("claimed_allocation")
        views.append(wt.ProcessView(
            pid=int(labels.get("pid", "0") or 0), name=labels.get("process_name"),
            memory_used_bytes=entry.get(PROCESS_MEMORY),
            sm_utilization_percent=entry.get(PROCESS_SM), container=labels.get("container"),
            pod=labels.get("pod"), namespace=labels.get("namespace"),
            slurm_job=labels.get("slurm_job"), claimed_allocation=claimed,
            tags={k.removeprefix("tag."): val for k, val in labels.items()
                  if k.startswith("tag.")},
            claim=check_claim(claimed, bound).value, last_seen_at=entry["at"]))
    return sorted(views, key=lambda p: p.pid)


# --- zombies and unattributed usage ---------------------------------------------------------

def _live_processes(q: LiveSources, now: datetime) -> list[LatestValue]:
    return [v for v in q.telemetry.latest(metric=PROCESS_MEMORY, since=now - FRESH)
            if v.value > 0]


def zombies(q: LiveSources, principal: Principal) -> list[wt.ZombieProcess]:
    store = q.mask_store()  # a store without minute counts: 503 before any work
    now = q.clock.now()
    t = q.thresholds
    with q.state.read() as session:
        slots, holders = _open_slots(session, principal, now - timedelta(days=1), now,
                                     cache=q.slot_cache)
        mig_gpus = mig_mode_gpus(session)
    held = _open_now(slots, now)
    ended: dict[UnitKey, Slot] = {}
    for s in slots:
        if s.end is not None and s.end <= now and (s.unit not in ended
                                                   or s.end > ended[s.unit].end):
            ended[s.unit] = s
    processes = [p for p in _live_processes(q, now)
                 if not _mig_parent(_unit(p.series), mig_gpus)]
    done = min(q.masks.refresh(), to_ms(now))
    lo = done - t.idle_window_minutes * 60_000
    bound_processes = [p.series for p in processes if _unit(p.series) in held]
    as_sm = {s: _relabel(s, PROCESS_SM) for s in bound_processes}
    seen = store.series_minutes(bound_processes, lo, done, 0.0) if bound_processes else {}
    busy = store.series_minutes(list(as_sm.values()), lo, done, 0.0) if as_sm else {}
    found = []
    for p in processes:
        unit = _unit(p.series)
        state = BindingState.BOUND if unit in held else \
            BindingState.ENDED if unit in ended else BindingState.NEVER
        owner = held.get(unit) or ([ended[unit]] if unit in ended else [])
        labels = dict(p.series.labels)
        if not _owned(principal, owner) or not _sees_workload(
                principal, holders.get(unit) or owner, labels.get("claimed_allocation")):
            continue
        sm = busy.get(as_sm.get(p.series), (0, 0, None))
        reason = zombie_reason(memory_used_bytes=p.value, binding=state,
                               window_minutes=t.idle_window_minutes,
                               seen_minutes=seen.get(p.series, (0, 0, None))[0],
                               sm_known_minutes=sm[0], sm_busy_minutes=sm[1])
        if reason is None:
            continue
        last_owner = owner[0] if owner else None
        found.append(wt.ZombieProcess(
            gpu_uuid=unit[0], mig_uuid=unit[1], node=p.series.node,
            environment=p.series.environment, pid=int(labels.get("pid", "0") or 0),
            name=labels.get("process_name"), memory_used_bytes=p.value, reason=reason.value,
            allocation=last_owner.allocation if last_owner else None,
            project=last_owner.project if last_owner else None,
            binding_ended_at=ended[unit].end if state is BindingState.ENDED else None,
            last_seen_at=p.at))
    return sorted(found, key=lambda z: (z.node, z.gpu_uuid, z.mig_uuid or "", z.pid))


def _relabel(labels: SeriesLabels, metric: str) -> SeriesLabels:
    return SeriesLabels(metric, labels.gpu_uuid, labels.mig_uuid, labels.labels, labels.node,
                        labels.environment, labels.model)


def unattributed(q: LiveSources, principal: Principal) -> list[wt.UnattributedUsage]:
    now = q.clock.now()
    with q.state.read() as session:
        _, held = _open_slots(session, principal, now, now, cache=q.slot_cache)
        mig_gpus = mig_mode_gpus(session)
    found: list[wt.UnattributedUsage] = []
    # Units already reported, and the whole-GPU units of MIG-mode GPUs: never unbound.
    busy_units: set[UnitKey] = {(gpu, None) for gpu in mig_gpus}

    def visible(unit: UnitKey, claimed: str | None = None) -> bool:
        holders = held.get(unit, [])
        return _owned(principal, holders) and _sees_workload(principal, holders, claimed)

    for p in _live_processes(q, now):
        unit, labels = _unit(p.series), dict(p.series.labels)
        if _mig_parent(unit, mig_gpus):
            continue
        holders = held.get(unit, [])
        match = check_claim(labels.get("claimed_allocation"), [s.allocation for s in holders])
        busy_units.add(unit)
        if is_unattributed(match) and visible(unit, labels.get("claimed_allocation")):
            bound = [s.allocation for s in _visible(principal, holders)]
            found.append(_usage(p, "process", match, bound, pid=int(labels.get("pid", "0")),
                                name=labels.get("process_name"),
                                claimed_allocation=labels.get("claimed_allocation"),
                                memory_used_bytes=p.value,
                                workload={k: v for k, v in labels.items()
                                          if k in ("container", "pod", "namespace",
                                                   "slurm_job")}))
    for c in q.telemetry.latest(metric=WORKLOAD_CLAIMED, since=now - FRESH):
        unit = _unit(c.series)
        if c.value >= 1 and unit not in held and unit not in busy_units and visible(unit):
            busy_units.add(unit)
            found.append(_usage(c, "workload_claim", ClaimMatch.UNBOUND, [],
                                workload=dict(c.series.labels)))
    for name in _ACTIVITY_METRICS:
        for a in q.telemetry.latest(metric=name, since=now - FRESH):
            unit = _unit(a.series)
            if activity_signal(name, is_mig=unit[1] is not None,
                               architecture=architecture_of_model(a.series.model)) \
                    and a.value >= q.thresholds.activity_percent and unit not in held \
                    and unit not in busy_units and visible(unit):
                busy_units.add(unit)
                found.append(_usage(a, "activity", ClaimMatch.UNBOUND, [],
                                    activity_percent=a.value))
    return sorted(found, key=lambda u: (u.node, u.gpu_uuid, u.mig_uuid or "", u.pid or 0))


def _usage(v: LatestValue, kind: str, match: ClaimMatch, bound: list[str],
           **extra) -> wt.UnattributedUsage:
    return wt.UnattributedUsage(
        gpu_uuid=v.series.gpu_uuid, mig_uuid=v.series.mig_uuid, node=v.series.node,
        environment=v.series.environment, kind=kind,
        reason="unbound" if match is ClaimMatch.UNBOUND else "mismatch",
        bound_allocations=bound, last_seen_at=v.at, **extra)


# --- top ----------------------------------------------------------------------------------

def top(q: LiveSources, principal: Principal, limit: int) -> wt.TopView:
    now = q.clock.now()
    with q.state.read() as session:
        slots = read_slots(session, principal, now, now + _EPSILON, cache=q.slot_cache)
        mig_gpus = mig_mode_gpus(session)
    held = _open_now(slots, now)
    latest: dict[UnitKey, dict[str, LatestValue]] = defaultdict(dict)
    for name in (*_ACTIVITY_METRICS, SM_ACTIVE, MEMORY_USED):
        for v in q.telemetry.latest(metric=name, since=now - FRESH):
            if not v.series.labels and not _mig_parent(_unit(v.series), mig_gpus):
                latest[_unit(v.series)][name] = v
    running = {_unit(v.series) for v in q.telemetry.latest(metric=PROCESS_MEMORY,
                                                           since=now - FRESH)}
    units = []
    for unit, metrics in latest.items():
        if not _owned(principal, held.get(unit, [])):
            continue
        any_value = next(iter(metrics.values())).series
        activity, _ = _activity({m: v.value for m, v in metrics.items()}, unit,
                                any_value.model, unit in running)
        if activity is None:
            continue
        units.append(wt.TopUnit(
            gpu_uuid=unit[0], mig_uuid=unit[1], node=any_value.node,
            environment=any_value.environment, model=any_value.model,
            activity_percent=activity,
            sm_active_percent=metrics[SM_ACTIVE].value if SM_ACTIVE in metrics else None,
            memory_used_bytes=metrics[MEMORY_USED].value if MEMORY_USED in metrics else None,
            charged_to=_charges(held.get(unit, []))))
    by_env: dict[str, list[wt.TopUnit]] = defaultdict(list)
    by_project: dict[str, list[wt.TopUnit]] = defaultdict(list)
    for u in units:
        by_env[u.environment].append(u)
        for c in u.charged_to:
            by_project[c.project].append(u)
    allocated_env: dict[str, float] = defaultdict(float)
    allocated_project: dict[str, float] = defaultdict(float)
    for s in (s for ss in held.values() for s in ss):
        allocated_env[s.environment] += s.weight
        allocated_project[s.project] += s.weight
    busiest = sorted(units, key=lambda u: (-u.activity_percent, u.gpu_uuid))[:limit]
    idlest = sorted((u for u in units if u.charged_to),
                    key=lambda u: (u.activity_percent, u.gpu_uuid))[:limit]
    return wt.TopView(
        at=now, fleet=_group({}, units, sum(allocated_env.values())),
        by_environment=[_group({"environment": e}, us, allocated_env[e])
                        for e, us in sorted(by_env.items())],
        # Projects holding the most first: a fleet has dozens, and `top` shows the head.
        by_project=[_group({"project": p}, by_project.get(p, []), allocated_project[p])
                    for p in sorted(allocated_project,
                                    key=lambda p: (-allocated_project[p], p))],
        busiest=busiest, idlest_allocated=idlest)


def _group(group: dict, units: list[wt.TopUnit], allocated: float) -> wt.TopGroup:
    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None
    return wt.TopGroup(
        group=group, units=len(units), allocated_gpus=allocated,
        activity_percent=mean([u.activity_percent for u in units]),
        sm_active_percent=mean([u.sm_active_percent for u in units
                                if u.sm_active_percent is not None]),
        memory_used_bytes=_sum_known([u.memory_used_bytes for u in units]))


def _sum_known(values: list[float | None]) -> float | None:
    """The sum of the values reported; None (not 0) where none was."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None
