"""The Fleet page's figures, each from the service call its API endpoint makes — never
recomputed here, so the page and the JSON cannot disagree (docs/dashboard.md, "Fleet")."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from gpufleet.api.web.page import (
    UI,
    Section,
    Viewer,
    api_url,
    page_status,
    render,
    section,
    services,
    viewer,
)
from gpufleet.api.web.pages.usage import trend_step
from gpufleet.domain.inventory import GpuHealth, NodeStatus
from gpufleet.domain.operations.alert_state import AlertState
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.inventory.fleet import GpuFilter, NodeFilter
from gpufleet.services.operations.alert_queries import AlertFilter

NAV = ("fleet", "Fleet", f"{UI}/")
DEFAULT_WINDOW = "24h"  # the funnel endpoint's own default
FIRING_ALERTS_SHOWN = 20


@dataclass
class Matrix:
    """Environment × project: average GPUs held over the window and their efficiency."""

    environments: list[str] = field(default_factory=list)
    projects: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str], dict] = field(default_factory=dict)


@dataclass
class Counted:
    """A count read from one page of a listing: `more` when the page was full."""

    count: int
    more: bool
    api: str


def _matrix(view) -> Matrix:
    window_h = (view.window_end - view.window_start).total_seconds() / 3600
    matrix = Matrix()
    for row in view.rows:
        env = row.group.get("environment") or "—"
        project = row.group.get("project") or "(none)"
        matrix.cells[(env, project)] = {
            "gpus_held": row.allocated_gpu_hours / window_h if window_h else 0.0,
            "allocated_gpu_hours": row.allocated_gpu_hours,
            "efficiency_percent": row.efficiency_percent}
    matrix.environments = sorted({e for e, _ in matrix.cells})
    matrix.projects = sorted({p for _, p in matrix.cells})
    return matrix


def _count_gpus(gf: Gpufleet, p: Principal, health: str) -> Counted:
    limit = gf.settings.page_size_max
    page = gf.list_gpus(p, GpuFilter(health=[health]), "node", None, limit)
    return Counted(len(page.items), page.next_cursor is not None,
                   api_url("gpus", health=health, limit=limit))


def _count_nodes(gf: Gpufleet, p: Principal, status: str) -> Counted:
    limit = gf.settings.page_size_max
    page = gf.list_nodes(p, NodeFilter(status=[status]), "name", None, limit)
    return Counted(len(page.items), page.next_cursor is not None,
                   api_url("nodes", status=status, limit=limit))


def fleet_page(gf: Gpufleet, p: Principal, window: str) -> dict[str, Section]:
    """Every section of the Fleet page for this caller (the API's role model scopes each)."""
    pair = "environment,project"
    firing = AlertFilter(states=[AlertState.FIRING])
    step = trend_step(window)
    # One funnel for three sections: the grouped funnel's fleet line is the ungrouped one's
    # (its rows summed, the total and reporting hours the inventory's) and carries the
    # fleet's trend; each funnel is most of the page's time at 100,000 GPUs (BENCHMARKS.md,
    # "Dashboard pages"), so it is the recent answer (`recent_funnel`: at most 90 s old,
    # kept warm by the upkeep loop). The links name the API call each section's figures
    # equal.
    by_pair = section(api_url("telemetry/funnel", by=pair, window=window),
                      lambda: gf.queries.recent_funnel(p, pair.split(","), window, step))
    return {
        "funnel": replace(by_pair, api=api_url("telemetry/funnel", window=window)),
        "trend": replace(by_pair, api=api_url("telemetry/funnel", window=window, step=step)),
        "capacity": section(api_url("fleet/summary"), lambda: gf.fleet_summary(p)),
        "matrix": by_pair if by_pair.error else replace(by_pair, data=_matrix(by_pair.data)),
        "health": section(api_url("gpus", health="quarantined"), lambda: {
            "suspect_gpus": _count_gpus(gf, p, GpuHealth.SUSPECT.value),
            "quarantined_gpus": _count_gpus(gf, p, GpuHealth.QUARANTINED.value),
            "unreachable_nodes": _count_nodes(gf, p, NodeStatus.UNREACHABLE.value)}),
        "alerts": section(api_url("alerts", state="firing", limit=FIRING_ALERTS_SHOWN),
                           lambda: gf.list_alerts(p, firing, None, FIRING_ALERTS_SHOWN)),
    }


router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/")
async def fleet(request: Request, window: str = DEFAULT_WINDOW,
                who: Viewer = Depends(viewer)) -> Response:
    sections = await run_in_threadpool(fleet_page, services(request), who.principal, window)
    return render(request, "fleet.html", who, page_status(sections), sections=sections,
                  window=window, current_page="fleet")
