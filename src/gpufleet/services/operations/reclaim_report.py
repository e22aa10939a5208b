"""What reclamation did over a window: warnings, what came back, what was saved by use
(`gpufleet reclaim report --window 30d`; docs/operations.md, "The report")."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.operations.reclamation import Outcome
from gpufleet.domain.requests import request_code
from gpufleet.services.access.principal import Principal
from gpufleet.store.tables import ReclaimWarning
from gpufleet.wire.reclaim import ReclaimReport, ReportRow, WarningView

_WOULD = {Outcome.WOULD_RELEASE.value, Outcome.WOULD_SHRINK.value, Outcome.WOULD_NOTIFY.value}
_COUNTED = {Outcome.RELEASED.value: "released", Outcome.SHRUNK.value: "shrunk",
            Outcome.NOTIFIED.value: "notified", Outcome.SAVED.value: "saved_by_use",
            Outcome.EXEMPTED.value: "exempted"}
_BACK = {Outcome.RELEASED.value, Outcome.SHRUNK.value}


def gpu_hours_back(row: ReclaimWarning, since: datetime, until: datetime) -> float:
    """GPUs taken × the part of [taken, planned end) inside [since, until), in hours."""
    if row.outcome not in _BACK or row.outcome_at is None:
        return 0.0
    start = max(row.outcome_at, since)
    end = min(row.planned_end_at or until, until)
    return row.gpus_taken * max(0.0, (end - start).total_seconds()) / 3600


def report(session: Session, principal: Principal, since: datetime, until: datetime,
           project: str | None = None) -> ReclaimReport:
    principal.require(Action.READ_RECLAIM)
    query = select(ReclaimWarning).where(
        ReclaimWarning.kind == "idle",
        or_(ReclaimWarning.warned_at.between(since, until),
            ReclaimWarning.outcome_at.between(since, until)))
    if project:
        query = query.where(ReclaimWarning.project == project)
    rows: dict[tuple[str, str | None], dict] = defaultdict(lambda: defaultdict(float))
    for w in session.scalars(query):
        if not principal.sees_project(w.project):
            continue
        row = rows[(w.project, w.environment)]
        if since <= w.warned_at <= until and not w.dry_run:
            row["warned"] += 1
        if w.outcome_at is None or not since <= w.outcome_at <= until:
            continue
        if w.outcome in _WOULD:
            row["would_act"] += 1
        elif w.outcome in _COUNTED:
            row[_COUNTED[w.outcome]] += 1
        if w.outcome in _BACK:
            row["units_taken"] += w.units_taken
            row["gpu_hours_back"] += gpu_hours_back(w, since, until)
    items = [_row(p, e, counts) for (p, e), counts in sorted(
        rows.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))]
    total: dict[str, float] = defaultdict(float)
    for counts in rows.values():
        for k, v in counts.items():
            total[k] += v
    return ReclaimReport(since=since, until=until, rows=items, total=_row("*", None, total))


def _row(project: str, environment: str | None, counts: dict[str, float]) -> ReportRow:
    ints = ("warned", "released", "shrunk", "notified", "saved_by_use", "exempted",
            "would_act", "units_taken")
    return ReportRow(project=project, environment=environment,
                     gpu_hours_back=round(counts.get("gpu_hours_back", 0.0), 3),
                     **{k: int(counts.get(k, 0)) for k in ints})


def warning_view(w: ReclaimWarning) -> WarningView:
    return WarningView(id=w.id, allocation=request_code(w.request_id), kind=w.kind,
                       project=w.project, environment=w.environment, owner=w.owner,
                       action=w.action, dry_run=w.dry_run, units=w.units,
                       idle_units=list(w.idle_units or []), summary=w.summary,
                       warned_at=w.warned_at, deadline_at=w.deadline_at, outcome=w.outcome,
                       outcome_at=w.outcome_at, units_taken=w.units_taken,
                       gpus_taken=w.gpus_taken)


def list_warnings(session: Session, principal: Principal, *, open_only: bool,
                  allocation_id: int | None = None, limit: int = 1000) -> list[WarningView]:
    """Newest first."""
    principal.require(Action.READ_RECLAIM)
    query = select(ReclaimWarning).order_by(ReclaimWarning.id.desc()).limit(limit)
    if open_only:
        query = query.where(ReclaimWarning.outcome.is_(None), ReclaimWarning.kind == "idle")
    if allocation_id is not None:
        query = query.where(ReclaimWarning.request_id == allocation_id)
    return [warning_view(w) for w in session.scalars(query)
            if principal.sees_project(w.project)]
