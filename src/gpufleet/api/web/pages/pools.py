"""Pools and quotas: the pools asked for and held (approve / reject for operators; end for
operators and the pool's project), and one project's quotas and their use (docs/dashboard.md,
"Pools and quotas")."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from gpufleet.api.deps import page_limit
from gpufleet.api.web.page import (
    UI,
    Viewer,
    api_url,
    checked_form,
    page_status,
    render,
    section,
    services,
    ui_url,
    viewer,
)
from gpufleet.domain.access import Action, is_allowed
from gpufleet.domain.errors import GpufleetError, InvalidInput
from gpufleet.domain.requests import PoolState
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet

POOL_STATES = [s.value for s in PoolState]
DONE = {"approve": "approved", "reject": "rejected", "end": "ended"}
POOL_ACTIONS = tuple(DONE)


def _checked_state(state: str | None) -> str | None:
    if state and state not in POOL_STATES:
        raise InvalidInput(f"state '{state}' is not a pool state; one of "
                           f"{', '.join(POOL_STATES)}", code="invalid_state")
    return state or None


def pools_page(gf: Gpufleet, p: Principal, state: str | None, project: str | None,
               cursor: str | None) -> dict:
    limit = gf.settings.page_size_default
    lifecycle = gf.lifecycle
    sections = {
        "pools": section(api_url("pools", project=project, state=state, cursor=cursor),
                         lambda: lifecycle.list_pools(p, project=project,
                                                      state=_checked_state(state),
                                                      cursor=cursor, limit=page_limit(limit, gf))),
        "projects": section(api_url("projects"), lambda: gf.list_projects(p, None, limit)),
    }
    if project:
        sections["quotas"] = section(api_url(f"projects/{project}/quotas"),
                                     lambda: lifecycle.project_quotas(p, project))
    return sections


router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/pools")
async def pools(request: Request, state: str | None = None, project: str | None = None,
                cursor: str | None = None, done: str | None = None,
                who: Viewer = Depends(viewer)) -> Response:
    state, project = state or None, project or None
    sections = await run_in_threadpool(pools_page, services(request), who.principal, state,
                                       project, cursor)
    listing = sections["pools"]
    next_url = None
    if listing.data is not None and listing.data.next_cursor:
        next_url = ui_url("pools", state=state, project=project,
                          cursor=listing.data.next_cursor)
    return render(request, "pools.html", who, page_status(sections), sections=sections,
                  state=state or "", project=project or "", states=POOL_STATES,
                  next_url=next_url, done=done if done in DONE.values() else None,
                  may_decide=is_allowed(who.principal.role, Action.APPROVE_REQUESTS),
                  # a member lists only their own projects' pools, so any listed is theirs
                  may_end=is_allowed(who.principal.role, Action.REQUEST_GPUS),
                  current_page="requests")


@router.post(UI + "/pools/{code}/{action}")
async def pool_action(request: Request, code: str, action: str,
                      who: Viewer = Depends(viewer)) -> Response:
    if action not in POOL_ACTIONS:
        return render(request, "error.html", who, 404, heading="No such action",
                      message=f"'{action}' is not an action on a pool; approve, reject or end",
                      current_page="requests")
    lifecycle = services(request).lifecycle
    decide = {"approve": lifecycle.approve_pool, "reject": lifecycle.reject_pool,
              "end": lifecycle.end_pool}[action]
    try:
        (reason,) = await checked_form(request, who, "reason")
        pool = await run_in_threadpool(decide, who.principal, code, reason.strip() or None)
    except GpufleetError as exc:
        return render(request, "error.html", who, exc.http_status,
                      heading=f"Could not {action} {code}", message=exc.message,
                      back=(ui_url("pools"), "Back to pools and quotas"), current_page="requests")
    return RedirectResponse(ui_url("pools", project=pool.project, done=DONE[action]),
                            status_code=303)
