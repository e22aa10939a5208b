"""One evaluation of alert rules: which series' conditions hold *now* (docs/operations.md,
"Alert rules").

Each rule asks the telemetry store or the state store one question in aggregate — a range
query with one step over the rule's window, the store's latest values, the funnel's minute
masks, one SQL read — never a Python loop over samples. A threshold or increase rule hands
its comparison to the telemetry store (`ValueFilter`), which answers only the series that
pass it: at 100,000 GPUs, a handful instead of a value per GPU. The answer is a list of
`Observation`s; the alert state machine applies each rule's `for`.

A rule whose source could not answer (the telemetry store down, a store without minute
masks) is reported in `unavailable`, not in `evaluated`: "no observations" would resolve
its alerts, and a store outage is not every GPU recovering.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.errors import GpufleetError
from gpufleet.domain.inventory import GpuHealth, NodeAdminState
from gpufleet.domain.operations.evidence import evidence_line
from gpufleet.domain.operations.matchers import all_match
from gpufleet.domain.operations.observations import Observation
from gpufleet.domain.operations.quantities import show
from gpufleet.domain.operations.rules import (
    Absent,
    Rule,
    RuleKind,
    StateCondition,
    render_summary,
)
from gpufleet.domain.requests import (
    PoolState,
    RequestState,
    pool_code,
    request_code,
    request_id_from_code,
)
from gpufleet.domain.telemetry.catalogue import COUNTED_FROM_READER_START
from gpufleet.domain.telemetry.catalogue import metric as catalogue_metric
from gpufleet.domain.telemetry.vocabulary import AcrossSeries, OverTime
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.lifecycle import granting, quotas
from gpufleet.services.telemetry.first_values import seen_before, series_key
from gpufleet.services.telemetry.ownership import UnitKey, read_slots
from gpufleet.services.telemetry.queries import TelemetryQueries
from gpufleet.store.tables import (
    Environment,
    Gpu,
    GpuRequest,
    Node,
    Pool,
    Project,
    Quota,
    User,
)
from gpufleet.tsdb import LatestValue, SeriesLabels, ValueFilter
from gpufleet.tsdb.protocol import UNIT_LABELS as SERIES_UNIT_LABELS
from gpufleet.wire.telemetry_queries import IdleAllocation

log = logging.getLogger(__name__)

# A window's first minute is floored to the tier's minute: one step a minute longer than
# the window keeps the whole window in one step.
_STEP_MARGIN = timedelta(minutes=1)
# How far back an absent metric is looked for: a series silent longer is gone, not absent.
ABSENCE_LOOKBACK = timedelta(hours=1)
_EPSILON = timedelta(microseconds=1)


@dataclass
class EvaluationResult:
    """`evaluated`: the rules that evaluated (their observations are complete);
    `unavailable`: rule → why its source could not answer (keep its alerts as they are)."""

    observations: list[Observation] = field(default_factory=list)
    evaluated: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Seen:
    """One series whose condition holds: identifying labels, the value compared, extra
    annotations, and the unit (for the owner annotations) where it is about one."""

    labels: dict[str, str]
    value: float | None = None
    unit: UnitKey | None = None
    annotations: dict[str, str] = field(default_factory=dict)


def evaluate(queries: TelemetryQueries, rules: Sequence[Rule], now: datetime
             ) -> EvaluationResult:
    """Evaluate the enabled `rules` at `now`; one rule's failure never stops the others."""
    result = EvaluationResult()
    found: list[tuple[Rule, list[Seen]]] = []
    for rule in rules:
        if not rule.enabled:
            continue
        try:
            found.append((rule, _CHECKS[rule.kind](queries, rule, now)))
        except GpufleetError as exc:  # Unavailable and its kin: the source did not answer
            result.unavailable[rule.name] = exc.message
        except Exception as exc:  # a defect in one rule's check must not stop the rest
            log.exception("alert rule %s could not be evaluated", rule.name)
            result.unavailable[rule.name] = f"{type(exc).__name__}: {exc}"
        else:
            result.evaluated.append(rule.name)
    owners = _owners(queries, now, [s for _, seen in found for s in seen])
    for rule, seen in found:
        for s in seen:
            observation = _observation(rule, s, owners.get(s.unit) if s.unit else None, now)
            if all_match(rule.matchers, {**observation.annotations, **observation.labels}):
                result.observations.append(observation)
    return result


def _observation(rule: Rule, seen: Seen, owner: Mapping[str, str] | None,
                 now: datetime) -> Observation:
    labels = {**rule.labels, **seen.labels}
    annotations = {**(owner or {}), **seen.annotations}
    summary = render_summary(rule, {**annotations, **labels}, seen.value)
    evidence = _evidence(rule, seen.value, {**annotations, **labels})
    if summary:
        annotations["summary"] = summary
    if seen.value is not None:  # the value as the evidence shows it, for `alerts show`
        annotations["value"] = show(seen.value, rule.value_unit)
    if rule.description:
        annotations["description"] = rule.description
    return Observation(rule=rule.name, labels=labels, at=now, value=seen.value,
                       evidence=evidence if not summary else f"{summary} ({evidence})"
                       if evidence else summary, annotations=annotations)


def _evidence(rule: Rule, value: float | None, facts: Mapping[str, str]) -> str:
    """In the value's unit, as an operator reads it (domain/operations/evidence.py)."""
    return evidence_line(rule, value, facts)


# --- telemetry rules ------------------------------------------------------------------------


def _unit_labels(labels: Mapping[str, str | None], extra: Iterable[str]) -> dict[str, str]:
    found = {"environment": labels.get("environment"), "node": labels.get("node"),
             "gpu": labels.get("gpu_uuid"), "mig_instance": labels.get("mig_uuid")}
    found.update({name: labels.get(name) for name in extra})
    return {k: v for k, v in found.items() if v}


def _latest(queries: TelemetryQueries, metric: str, now: datetime, window_s: float,
            where: ValueFilter | None = None) -> list[LatestValue]:
    """Each series' latest value in [now − window, now) (that passes `where`): the store's
    latest-value path (the raw tier's newest rows)."""
    found = queries.telemetry.latest(metric=metric, since=now - timedelta(seconds=window_s),
                                     where=where)
    return [v for v in found if v.at < now]


def _per_series(queries: TelemetryQueries, metric: str, now: datetime, window_s: float,
                over_time: OverTime, by: Sequence[str] | None = None,
                across: AcrossSeries | None = None, where: ValueFilter | None = None
                ) -> list[tuple[Mapping[str, str | None], float]]:
    """Each series' (or, with `by`, each group's) labels and mean, increase or last value
    over [now − window, now) (that passes `where`): one range query, one step."""
    row = catalogue_metric(metric)
    group = list(by) if by is not None else [*SERIES_UNIT_LABELS[:4], *row.labels]
    window = timedelta(seconds=window_s)
    # Per series, a group is one series: combined by what keeps its own value (the
    # metric class's way across series would not: a state's COUNT makes every value 1).
    results = queries.telemetry.query_range(metric, now - window, now, window + _STEP_MARGIN,
                                            group_by=group, over_time=over_time,
                                            across=across or _ONE_SERIES[over_time],
                                            where=where)
    return [(r.labels, r.points[-1][1]) for r in results if r.points]


_ONE_SERIES = {OverTime.MEAN: AcrossSeries.MEAN, OverTime.INCREASE: AcrossSeries.SUM,
               OverTime.LAST: AcrossSeries.MAX}


def _threshold(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    assert rule.metric and rule.op is not None and rule.value is not None
    if rule.across is None and rule.over_time == "last":
        return _threshold_latest(queries, rule, now)
    by = rule.by if rule.across is not None else None
    over_time = OverTime(rule.over_time)
    # Compared in the store, unless the value compared is a ratio made here.
    where = None if rule.ratio_to else _condition(rule)
    values = _per_series(queries, rule.metric, now, rule.over_s, over_time, by, rule.across,
                         where)
    if rule.ratio_to:  # the denominator: the same unit's (or group's) series of the other
        key = _group_key(by)
        totals = {key(labels): v for labels, v in _per_series(
            queries, rule.ratio_to, now, rule.over_s, over_time, by, rule.across)}
        values = [(labels, 100.0 * v / total) for labels, v in values
                  if (total := totals.get(key(labels)))]
    holds, limit = rule.op.holds, rule.value
    if by is not None:
        return [Seen({n: str(labels[n]) for n in by if labels.get(n)}, value)
                for labels, value in values if holds(value, limit)]
    extra = catalogue_metric(rule.metric).labels
    return [Seen(_unit_labels(labels, extra), value, _unit_of(labels))
            for labels, value in values if holds(value, limit)]


def _group_key(by: Sequence[str] | None) -> Callable[[Mapping[str, str | None]], tuple]:
    names = list(by) if by is not None else ["gpu_uuid", "mig_uuid"]
    return lambda labels: tuple(labels.get(n) for n in names)


def _threshold_latest(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    """Per series, its latest value — or, with `ratio_to`, its percentage of the unit's
    latest total — compared in the store: only the series that pass come back (at 100,000
    GPUs most do not)."""
    assert rule.metric and rule.op is not None and rule.value is not None
    where = ValueFilter(rule.op, rule.value, percent_of=rule.ratio_to)
    found = _latest(queries, rule.metric, now, rule.over_s, where)
    if rule.ratio_to and found:  # the percentages shown: the totals of those units only
        gpus = sorted({v.series.gpu_uuid for v in found})
        totals = {(v.series.gpu_uuid, v.series.mig_uuid): v.value
                  for v in queries.telemetry.latest(
                      {"gpu_uuid": gpus}, metric=rule.ratio_to,
                      since=now - timedelta(seconds=rule.over_s)) if v.at < now}
        hits = [(v.series, 100.0 * v.value / total) for v in found
                if (total := totals.get((v.series.gpu_uuid, v.series.mig_uuid)))]
    else:
        hits = [(v.series, v.value) for v in found]
    extra = catalogue_metric(rule.metric).labels
    return [Seen(_series_labels(s, extra), value, (s.gpu_uuid, s.mig_uuid or None))
            for s, value in hits]


def _series_labels(s: SeriesLabels, extra: Iterable[str]) -> dict[str, str]:
    found = {"environment": s.environment, "node": s.node, "gpu": s.gpu_uuid,
             "mig_instance": s.mig_uuid, **{n: s.label(n) for n in extra}}
    return {k: v for k, v in found.items() if v}


def _unit_of(labels: Mapping[str, str | None]) -> UnitKey | None:
    gpu = labels.get("gpu_uuid")
    return (gpu, labels.get("mig_uuid") or None) if gpu else None


def _increase(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    assert rule.metric and rule.op is not None and rule.value is not None
    values = _per_series(queries, rule.metric, now, rule.over_s, OverTime.INCREASE,
                         where=_condition(rule))
    extra = catalogue_metric(rule.metric).labels
    names = (*SERIES_UNIT_LABELS[:4], *extra)
    increases = {series_key(labels, names): (labels, value)
                 for labels, value in values}
    if rule.metric in COUNTED_FROM_READER_START:
        for labels, value in _born_in_window(queries, rule, now, names):
            key = series_key(labels, names)
            if key not in increases or increases[key][1] < value:
                increases[key] = (labels, value)
    return [Seen(_unit_labels(labels, extra), value, _unit_of(labels))
            for labels, value in increases.values()]


def _born_in_window(queries: TelemetryQueries, rule: Rule, now: datetime,
                    names: Sequence[str]) -> list[tuple[dict[str, str | None], float]]:
    """Series of a counter its reader starts at zero (an XID code's, born at its first
    event) first seen inside the window, whose value passes: their whole value is new.
    A store's increase has no sample before such a series' first, so it cannot see it."""
    window = timedelta(seconds=rule.over_s)
    start = now - window
    passing = [v for v in queries.telemetry.latest(metric=rule.metric, since=start,
                                                   where=_condition(rule)) if v.at < now]
    if not passing:
        return []
    seen = seen_before(queries.telemetry, rule.metric, start,
                       (v.series.gpu_uuid for v in passing), names)
    born = []
    for v in passing:
        labels = {n: v.series.label(n) for n in names}
        if series_key(labels, names) not in seen:
            born.append((labels, v.value))
    return born


def _condition(rule: Rule) -> ValueFilter:
    """The rule's comparison, for the store to make where the data is (the store answers
    only the series that pass it)."""
    assert rule.op is not None and rule.value is not None
    return ValueFilter(rule.op, rule.value)


def _absence(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    after = timedelta(seconds=rule.after_s or 0)
    if rule.absent is Absent.AGENT:
        with queries.state.read() as session:
            rows = session.execute(
                select(Node.name, Environment.name, Node.last_seen_at, Node.registered_at)
                .join(Environment, Environment.id == Node.environment_id)
                .where(Node.admin_state != NodeAdminState.RETIRED.value))
            return [Seen({"environment": env, "node": node},
                         (now - (seen or registered)).total_seconds())
                    for node, env, seen, registered in rows
                    if (seen or registered) <= now - after]
    assert rule.metric
    latest = queries.telemetry.latest(metric=rule.metric, since=now - after - ABSENCE_LOOKBACK)
    extra = catalogue_metric(rule.metric).labels
    found = []
    for v in latest:
        if v.at <= now - after:
            labels = {n: v.series.label(n) for n in (*SERIES_UNIT_LABELS[:4], *extra)}
            found.append(Seen(_unit_labels(labels, extra), (now - v.at).total_seconds(),
                              _unit_of(labels)))
    return found


# --- fleet state rules ----------------------------------------------------------------------


def _state(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    assert rule.condition is not None
    return _STATES[rule.condition](queries, rule, now)


def _nodes_unreachable(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    with queries.state.read() as session:
        rows = session.execute(
            select(Node.name, Environment.name, Node.last_seen_at)
            .join(Environment, Environment.id == Node.environment_id)
            .where(Node.reachable.is_(False),
                   Node.admin_state != NodeAdminState.RETIRED.value))
        return [Seen({"environment": env, "node": node},
                     annotations={"last_seen_at": seen.isoformat()} if seen else {})
                for node, env, seen in rows]


def _gpus_quarantined(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    with queries.state.read() as session:
        rows = session.execute(
            select(Gpu.uuid, Node.name, Environment.name, Gpu.health_reason)
            .join(Node, Node.id == Gpu.node_id)
            .join(Environment, Environment.id == Gpu.environment_id)
            .where(Gpu.health == GpuHealth.QUARANTINED.value))
        return [Seen({"environment": env, "node": node, "gpu": uuid}, unit=(uuid, None),
                     annotations={"reason": reason} if reason else {})
                for uuid, node, env, reason in rows]


def _requests_pending(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    before = now - timedelta(seconds=rule.after_s or 0)
    with queries.state.read() as session:
        rows = session.execute(
            select(GpuRequest.id, Project.name, User.name, GpuRequest.created_at)
            .join(Project, Project.id == GpuRequest.project_id)
            .outerjoin(User, User.id == GpuRequest.requester_user_id)
            .where(GpuRequest.state == RequestState.PENDING.value,
                   GpuRequest.created_at <= before))
        return [Seen({"project": project, "request": request_code(rid), "owner": owner or ""},
                     (now - created).total_seconds() / 3600)
                for rid, project, owner, created in rows]


def _quotas_nearly_exhausted(queries: TelemetryQueries, rule: Rule,
                             now: datetime) -> list[Seen]:
    assert rule.value is not None
    with queries.state.read() as session:
        names = dict(session.execute(select(Project.id, Project.name).where(
            Project.id.in_(select(Quota.project_id)))).all())
        limits = quotas.limits(session, names)
        held = quotas.held_outside_pools(session, names)
        pooled = quotas.pooled(session, names)
    found = []
    for project_id, flavours in limits.items():
        for flavour, limit in flavours.items():
            used = held.get(project_id, {}).get(flavour, 0) + \
                pooled.get(project_id, {}).get(flavour, 0)
            percent = 100.0 * used / limit if limit > 0 else (100.0 if used else 0.0)
            if percent >= rule.value:
                found.append(Seen({"project": names[project_id], "flavour": flavour},
                                  round(percent, 1)))
    return found


def _pools_nearly_exhausted(queries: TelemetryQueries, rule: Rule,
                            now: datetime) -> list[Seen]:
    """Active pools whose units held now are ≥ `value` % of their units (few pools: one
    read each, as `gpufleet pool show` counts them)."""
    assert rule.value is not None
    found = []
    with queries.state.read() as session:
        for pool in session.scalars(select(Pool).where(Pool.state == PoolState.ACTIVE.value)):
            used = granting.pool_units_used(session, pool)
            percent = 100.0 * used / pool.count if pool.count > 0 else 100.0
            if percent >= rule.value:
                found.append(Seen({"project": pool.project.name, "pool": pool_code(pool.id),
                                   "flavour": pool.flavour}, round(percent, 1)))
    return found


def _idle_allocations(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    """One observation per allocation with units on the idle list — an 8-GPU allocation
    left idle is one alert, as its owner's reclamation warning is one — idle for as long
    as its most recently idle unit, memory held if any unit holds some."""
    by_allocation: dict[str, list[IdleAllocation]] = defaultdict(list)
    for item in queries.idle(SYSTEM).items:
        by_allocation[item.allocation].append(item)
    with queries.state.read() as session:
        owners = _requesters(session, list(by_allocation))
    found = []
    for code, items in by_allocation.items():
        since = max(i.idle_since for i in items)
        units = sum(i.weight for i in items)
        models = {i.model for i in items}
        notes = {"state": "idle_held" if any(i.state == "idle_held" for i in items)
                 else "idle", "idle_since": since.isoformat(),
                 "units": f"{units:g} × {models.pop()}" if len(models) == 1
                 else f"{units:g} units",
                 "gpus": ",".join(sorted({i.gpu_uuid for i in items}))}
        if code in owners:
            notes["owner"] = owners[code]
        found.append(Seen({"environment": items[0].environment, "allocation": code,
                           "project": items[0].project},
                          round((now - since).total_seconds() / 3600, 2), None, notes))
    return found


def _zombies(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    found = []
    for z in queries.zombies(SYSTEM):
        labels = {"environment": z.environment, "node": z.node, "gpu": z.gpu_uuid,
                  "mig_instance": z.mig_uuid, "pid": str(z.pid)}
        notes = {"reason": z.reason, "process": z.name or ""}
        found.append(Seen({k: v for k, v in labels.items() if v}, z.memory_used_bytes,
                          (z.gpu_uuid, z.mig_uuid), {k: v for k, v in notes.items() if v}))
    return found


def _unattributed(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    """Usage charged to nobody, or claiming another allocation. A process on a unit no
    binding holds is also a zombie (docs/design.md's two definitions overlap there); the
    zombie rule tells of it, so one process is one alert, not two."""
    found = []
    for u in queries.unattributed(SYSTEM):
        if u.kind == "process" and u.reason == "unbound":
            continue
        labels = {"environment": u.environment, "node": u.node, "gpu": u.gpu_uuid,
                  "mig_instance": u.mig_uuid, "kind": u.kind,
                  "pid": None if u.pid is None else str(u.pid)}
        notes = {"reason": u.reason, "claimed_allocation": u.claimed_allocation or ""}
        found.append(Seen({k: v for k, v in labels.items() if v}, u.memory_used_bytes,
                          (u.gpu_uuid, u.mig_uuid), {k: v for k, v in notes.items() if v}))
    return found


_STATES: dict[StateCondition, Callable[[TelemetryQueries, Rule, datetime], list[Seen]]] = {
    StateCondition.NODE_UNREACHABLE: _nodes_unreachable,
    StateCondition.GPU_QUARANTINED: _gpus_quarantined,
    StateCondition.REQUEST_PENDING: _requests_pending,
    StateCondition.QUOTA_NEARLY_EXHAUSTED: _quotas_nearly_exhausted,
    StateCondition.POOL_NEARLY_EXHAUSTED: _pools_nearly_exhausted,
    StateCondition.IDLE_ALLOCATION: _idle_allocations,
    StateCondition.ZOMBIE_PROCESS: _zombies,
    StateCondition.UNATTRIBUTED_USAGE: _unattributed,
}


def _efficiency(queries: TelemetryQueries, rule: Rule, now: datetime) -> list[Seen]:
    """Projects whose active GPU-hours are below `value` % of their allocated GPU-hours
    whose activity is known, over the window (unknown activity is never idle:
    docs/design.md, "Funnel and activity"); at least one known GPU-hour to judge."""
    assert rule.value is not None
    view = queries.funnel(SYSTEM, ["project"], window_end=now, window=f"{rule.over_s:g}s")
    found = []
    for row in view.rows:
        known = row.allocated_gpu_hours - (row.unknown_gpu_hours or 0.0)
        if known < 1.0:
            continue
        percent = 100.0 * row.active_gpu_hours / known
        if percent < rule.value:
            found.append(Seen({"project": str(row.group["project"])}, round(percent, 2),
                              annotations={"allocated_gpu_hours":
                                           f"{row.allocated_gpu_hours:.1f}"}))
    return found


_CHECKS: dict[RuleKind, Callable[[TelemetryQueries, Rule, datetime], list[Seen]]] = {
    RuleKind.THRESHOLD: _threshold,
    RuleKind.INCREASE: _increase,
    RuleKind.ABSENCE: _absence,
    RuleKind.STATE: _state,
    RuleKind.EFFICIENCY: _efficiency,
}


# --- owners -------------------------------------------------------------------------------


def _owners(queries: TelemetryQueries, now: datetime, seen: list[Seen]
            ) -> dict[UnitKey, dict[str, str]]:
    """allocation / project / owner of each unit held now, from the binding intervals
    (non-identifying annotations: docs/operations.md, "Labels"). Only the units some
    observation is about are looked up; a unit two allocations share names both."""
    units = {s.unit for s in seen if s.unit is not None}
    if not units:
        return {}
    with queries.state.read() as session:
        slots = [s for s in read_slots(session, SYSTEM, now, now + _EPSILON,
                                       cache=queries.slot_cache)
                 if s.unit in units and s.start <= now and (s.end is None or s.end > now)]
        requesters = _requesters(session, [s.allocation for s in slots])
    held: dict[UnitKey, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for s in sorted(slots, key=lambda s: s.allocation):
        owner = requesters.get(s.allocation)
        for name, value in (("allocation", s.allocation), ("project", s.project),
                            ("owner", owner)):
            if value and value not in held[s.unit][name]:
                held[s.unit][name].append(value)
    return {unit: {k: ",".join(v) for k, v in names.items()} for unit, names in held.items()}


def _requesters(session: Session, codes: Iterable[str]) -> dict[str, str]:
    """Allocation code → the user who requested it (in one read)."""
    ids = {request_id_from_code(code): code for code in codes}
    ids.pop(None, None)
    if not ids:
        return {}
    return {ids[rid]: name for rid, name in session.execute(
        select(GpuRequest.id, User.name).join(User, User.id == GpuRequest.requester_user_id)
        .where(GpuRequest.id.in_(list(ids))))}
