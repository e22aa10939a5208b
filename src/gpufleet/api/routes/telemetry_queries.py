"""Telemetry queries: range queries, latest snapshots, funnel, idle / zombie / unattributed
lists and the fleet view behind `gpufleet top`. Readers only (viewer, member, operator,
admin); members see their own projects' allocations."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, Query

from gpufleet.api.deps import page_limit, principal, services
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.inventory.fleet import parse_labels
from gpufleet.wire import telemetry_queries as wt
from gpufleet.wire.base import Page

router = APIRouter(prefix="/api/v1/telemetry", tags=["telemetry"])


def _by(by: list[str]) -> list[str]:
    """`by=environment,project` and repeated `by=` alike."""
    return [name.strip() for value in by for name in value.split(",") if name.strip()]


@router.get("/query", response_model=wt.RangeQueryResult)
def range_query(
    metric: str,
    since: str | None = Query(default=None, description="a duration back from `end` (`6h`)"),
    start: datetime | None = None,
    end: datetime | None = None,
    step: str | None = Query(default=None, description="`1m`, `5m`, `1h`; default: ~240 "
                                                        "points"),
    by: list[str] = Query(default=[], description="labels to group by, e.g. `environment`"),
    filter: list[str] = Query(default=[], description="`label=value`; repeat a label for "
                                                       "several values"),
    p: Principal = Depends(principal),
    gf: Gpufleet = Depends(services),
):
    """A metric per step, aggregated by its class per group (docs/design.md, "Telemetry model")."""
    filters: dict[str, list[str]] = {}
    for key, value in parse_labels(filter):
        filters.setdefault(key, []).append(value)
    return gf.queries.range_query(p, metric, start=start, end=end, since=since, step=step,
                                  filters=filters, group_by=_by(by))


@router.get("/latest", response_model=Page[wt.UnitSnapshotView])
def latest(
    environment: list[str] = Query(default=[]),
    model: list[str] = Query(default=[]),
    node: str | None = None,
    project: str | None = None,
    allocation: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
    p: Principal = Depends(principal),
    gf: Gpufleet = Depends(services),
):
    """Each GPU's units (the GPU, its MIG instances) with their latest values, processes
    and the allocations their usage is charged to; paged by GPU UUID."""
    return gf.queries.latest_snapshots(p, environment=environment, node=node, model=model,
                                       project=project, allocation=allocation, cursor=cursor,
                                       limit=page_limit(limit, gf))


@router.get("/funnel", response_model=wt.FunnelView)
def funnel(
    by: list[str] = Query(default=[], description="environment, model, node, project, "
                                                  "allocation"),
    window: str = Query(default="24h"),
    end: datetime | None = None,
    step: str | None = Query(default=None, description="`1h`: each row's trend in steps "
                                                       "of this length, and its allocations"),
    project: str | None = Query(default=None, description="only this project's allocations"),
    environment: str | None = Query(default=None, description="only units in this "
                                                              "environment"),
    p: Principal = Depends(principal),
    gf: Gpufleet = Depends(services),
):
    """Total / allocated / active / effective GPU-hours over the window (docs/design.md, "Funnel and
    activity"); `project` / `environment`: only those allocations (no inventory totals)."""
    return gf.queries.funnel(p, _by(by), end, window, step, project=project,
                             environment=environment)


@router.get("/idle", response_model=wt.IdleList)
def idle(held_only: bool = False, project: str | None = None,
         environment: str | None = None, cursor: str | None = None,
         limit: int | None = None, p: Principal = Depends(principal),
         gf: Gpufleet = Depends(services)):
    """Allocated units idle for the whole idle window; `held_only`: those holding memory.
    Paged like the other listings (`limit`, then `cursor=next_cursor`), longest idle first;
    `unknown` counts the whole list's units whose activity is unknown."""
    return gf.queries.idle(p, held_only=held_only, project=project, environment=environment,
                           cursor=cursor, limit=page_limit(limit, gf))


@router.get("/zombies", response_model=list[wt.ZombieProcess])
def zombies(p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Processes holding GPU memory with no binding, after their binding ended, or with no
    SM activity of their own for the idle window."""
    return gf.queries.zombies(p)


@router.get("/unattributed", response_model=list[wt.UnattributedUsage])
def unattributed(p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Usage charged to nobody, or claiming an allocation that does not hold the unit."""
    return gf.queries.unattributed(p)


@router.get("/top", response_model=wt.TopView)
def top(limit: int = Query(default=10, ge=1, le=100), p: Principal = Depends(principal),
        gf: Gpufleet = Depends(services)):
    """The fleet now: per environment and project, the busiest and the idlest units."""
    return gf.queries.top(p, limit)
