"""The Projects list and one project's page: GPUs held over time, activity, usage, where it
holds GPUs, quotas, pools, requests and idle allocations — each from the service call its
API endpoint makes, with the viewer's principal, so a member sees only their own projects
(docs/dashboard.md, "Project")."""

from __future__ import annotations

from urllib.parse import quote

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
    ui_url,
    viewer,
)
from gpufleet.api.web.pages.usage import IDLE_SHOWN, row_of, trend_step, usage
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.billing.statements import month_window

NAV = ("projects", "Projects", f"{UI}/projects")
DEFAULT_WINDOW = "24h"
SHOWN = 20  # pools and requests: the newest (requests) or oldest (pools) of them


def list_page(gf: Gpufleet, p: Principal, window: str,
              cursor: str | None) -> dict[str, Section]:
    limit = gf.settings.page_size_default
    return {
        "projects": section(api_url("projects", cursor=cursor, limit=limit),
                            lambda: gf.list_projects(p, cursor, limit)),
        "held": section(api_url("telemetry/funnel", by="project", window=window),
                        lambda: {row.group["project"]: usage(view, row)
                                 for view in [gf.queries.recent_funnel(p, ["project"], window)]
                                 for row in view.rows}),
    }


def project_page(gf: Gpufleet, p: Principal, name: str, window: str) -> dict[str, Section]:
    step = trend_step(window)
    pair = "environment,project"  # the Fleet page's and Environment page's question too
    # Rows of the fleet-wide funnels (`recent_funnel`: the upkeep loop keeps the default
    # window's warm), as on the Environment page.

    def funnel():
        view = gf.queries.recent_funnel(p, ["project"], window, step)
        row = row_of(view, project=name)
        return {"view": view, "row": row, "usage": usage(view, row) if row else None}

    def environments():
        view = gf.queries.recent_funnel(p, pair.split(","), window)
        return [(row.group["environment"], usage(view, row)) for row in view.rows
                if row.group["project"] == name]

    lc, quoted = gf.lifecycle, quote(name, safe="")
    return {
        "project": section(api_url(f"projects/{quoted}"), lambda: gf.show_project(p, name)),
        "funnel": section(api_url("telemetry/funnel", by="project", window=window, step=step),
                          funnel),
        "environments": section(api_url("telemetry/funnel", by=pair, window=window),
                                environments),
        "quotas": section(api_url(f"projects/{quoted}/quotas"),
                          lambda: lc.project_quotas(p, name)),
        "pools": section(api_url("pools", project=name, limit=SHOWN),
                         lambda: lc.list_pools(p, project=name, state=None, cursor=None,
                                               limit=SHOWN)),
        "requests": section(api_url("requests", project=name, limit=SHOWN),
                            lambda: lc.list_requests(p, state=None, project=name, cursor=None,
                                                     limit=SHOWN)),
        "idle": section(api_url("telemetry/idle", project=name, limit=IDLE_SHOWN),
                        lambda: gf.queries.recent_idle(p, project=name, limit=IDLE_SHOWN)),
        "cost": month_cost(gf, p, name),
    }


def month_cost(gf: Gpufleet, p: Principal, name: str) -> Section:
    """This month's cost line (docs/dashboard.md, "Billing"): the project's row of the
    month's statement, the Billing page's own question — only when the service keeps it
    fresh: counting a month afresh takes seconds at 100,000 bindings, which this page
    must not wait for; then the line says so and the upkeep loop counts it."""
    month = gf.clock.now().strftime("%Y-%m")

    def compute():
        view = gf.billing.kept_view(p, month_window(month), project=name)
        return {"month": month, "url": ui_url("billing", project=name), "view": view,
                "currency": view and view.currency, "totals": view and view.total}
    return section(api_url("billing/statements", month=month, project=name), compute)


router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/projects")
async def projects(request: Request, window: str = DEFAULT_WINDOW, cursor: str | None = None,
                   who: Viewer = Depends(viewer)) -> Response:
    sections = await run_in_threadpool(list_page, services(request), who.principal, window,
                                       cursor)
    return render(request, "projects.html", who, page_status(sections), sections=sections,
                  window=window, current_page="projects")


@router.get(f"{UI}/projects/{{name}}")
async def project(request: Request, name: str, window: str = DEFAULT_WINDOW,
                  who: Viewer = Depends(viewer)) -> Response:
    sections = await run_in_threadpool(project_page, services(request), who.principal, name,
                                       window)
    found = sections["project"]
    if found.error_status == 404:  # the API's answer for another's project, too
        return render(request, "error.html", who, 404, heading="No such project",
                      message=found.error)
    return render(request, "project.html", who, page_status(sections), sections=sections,
                  subject=name, window=window, current_page="projects")
