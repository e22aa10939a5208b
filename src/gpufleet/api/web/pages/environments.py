"""The Environments list and one environment's page: GPUs held over time, activity, usage,
its projects, capacity and idle allocations — each from the service call its API endpoint
makes, with the viewer's principal (docs/dashboard.md, "Environment")."""

from __future__ import annotations

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
from gpufleet.api.web.pages.usage import IDLE_SHOWN, row_of, trend_step, usage
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet

NAV = ("environments", "Environments", f"{UI}/environments")
DEFAULT_WINDOW = "24h"


def list_page(gf: Gpufleet, p: Principal, window: str,
              cursor: str | None) -> dict[str, Section]:
    limit = gf.settings.page_size_default
    return {
        "environments": section(api_url("environments", cursor=cursor, limit=limit),
                                lambda: gf.list_environments(p, cursor, limit)),
        "held": section(api_url("telemetry/funnel", by="environment", window=window),
                        lambda: {row.group["environment"]: usage(view, row)
                                 for view in [gf.queries.recent_funnel(p, ["environment"],
                                                                       window)]
                                 for row in view.rows}),
    }


def environment_page(gf: Gpufleet, p: Principal, name: str,
                     window: str) -> dict[str, Section]:
    step = trend_step(window)
    pair = "environment,project"
    # Rows of the fleet-wide funnels (`recent_funnel`: the upkeep loop keeps the default
    # window's warm), not one environment's own: at 100,000 GPUs counting even one
    # environment's allocations costs about a second (BENCHMARKS.md, "Dashboard pages").

    def funnel():
        view = gf.queries.recent_funnel(p, ["environment"], window, step)
        row = row_of(view, environment=name)
        return {"view": view, "row": row, "usage": usage(view, row) if row else None}

    def projects():
        view = gf.queries.recent_funnel(p, pair.split(","), window)
        return [(row.group["project"], usage(view, row)) for row in view.rows
                if row.group["environment"] == name]

    def capacity():
        return [cell for cell in gf.fleet_summary(p).cells if cell.environment == name]

    return {
        "environment": section(api_url("environments"), lambda: gf.show_environment(p, name)),
        "funnel": section(api_url("telemetry/funnel", by="environment", window=window,
                                  step=step), funnel),
        "projects": section(api_url("telemetry/funnel", by=pair, window=window), projects),
        "capacity": section(api_url("fleet/summary"), capacity),
        "idle": section(api_url("telemetry/idle", environment=name, limit=IDLE_SHOWN),
                        lambda: gf.queries.recent_idle(p, environment=name,
                                                       limit=IDLE_SHOWN)),
    }


router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/environments")
async def environments(request: Request, window: str = DEFAULT_WINDOW,
                       cursor: str | None = None, who: Viewer = Depends(viewer)) -> Response:
    sections = await run_in_threadpool(list_page, services(request), who.principal, window,
                                       cursor)
    return render(request, "environments.html", who, page_status(sections),
                  sections=sections, window=window, current_page="environments")


@router.get(f"{UI}/environments/{{name}}")
async def environment(request: Request, name: str, window: str = DEFAULT_WINDOW,
                      who: Viewer = Depends(viewer)) -> Response:
    sections = await run_in_threadpool(environment_page, services(request), who.principal,
                                       name, window)
    found = sections["environment"]
    if found.error_status == 404:
        return render(request, "error.html", who, 404, heading="No such environment",
                      message=found.error)
    return render(request, "environment.html", who, page_status(sections), sections=sections,
                  subject=name, window=window, current_page="environments")
