"""The Requests pages: the list with the API's filters, one request's detail, and its
action buttons (docs/dashboard.md, "Requests"). Every figure and every action is the
service call its API route makes, with the viewer's principal."""

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
from gpufleet.domain.requests import TRANSITIONS, RequestState
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.requests import Extend, RequestView

NAV = ("requests", "Requests", f"{UI}/requests")
STATES = [s.value for s in RequestState]
HISTORY_SHOWN = 50


def _checked_state(state: str | None) -> str | None:
    """The `state` filter as the API takes it; a clear 400 naming it otherwise."""
    if state and state not in STATES:
        raise InvalidInput(f"state '{state}' is not a request state; one of "
                           f"{', '.join(STATES)}", code="invalid_state")
    return state or None


def list_page(gf: Gpufleet, p: Principal, state: str | None, project: str | None,
              cursor: str | None, limit: int | None) -> dict:
    def listing():
        chosen = _checked_state(state)
        return gf.lifecycle.list_requests(p, state=chosen, project=project, cursor=cursor,
                                          limit=page_limit(limit, gf))
    return {"requests": section(api_url("requests", state=state or None,
                                        project=project or None, cursor=cursor, limit=limit),
                                listing)}


# Which button a state allows: the transition it makes (extend: any open request).
ACTION_TARGETS = {"approve": RequestState.APPROVED, "reject": RequestState.REJECTED,
                  "cancel": RequestState.CANCELLED, "release": RequestState.RELEASED}
ACTION_NEEDS = {"approve": Action.APPROVE_REQUESTS, "reject": Action.APPROVE_REQUESTS,
                "cancel": Action.REQUEST_GPUS, "release": Action.REQUEST_GPUS,
                "extend": Action.REQUEST_GPUS}


def actions_for(p: Principal, view: RequestView) -> list[str]:
    """The buttons to show: the viewer's role may do it and the request's state allows it.
    The service decides again when one is pressed (self-approval, a state that moved)."""
    state = RequestState(view.state)
    allowed = []
    for action, needs in ACTION_NEEDS.items():
        if not is_allowed(p.role, needs):
            continue
        target = ACTION_TARGETS.get(action)
        if (target is None and not state.is_final) or (state, target) in TRANSITIONS:
            allowed.append(action)
    return allowed


def detail_page(gf: Gpufleet, p: Principal, code: str) -> dict:
    lifecycle = gf.lifecycle
    return {
        "request": section(api_url(f"requests/{code}"), lambda: lifecycle.show_request(p, code)),
        "why": section(api_url(f"requests/{code}/why"), lambda: lifecycle.why(p, code)),
        "history": section(api_url(f"requests/{code}/history", limit=HISTORY_SHOWN),
                           lambda: lifecycle.history(p, code, None, HISTORY_SHOWN)),
    }


def act(gf: Gpufleet, p: Principal, code: str, action: str, reason: str,
        hours: str) -> RequestView:
    """The service method the API route of `action` calls."""
    reason_or_none = reason.strip() or None
    lifecycle = gf.lifecycle
    if action == "extend":
        return lifecycle.extend(p, code, Extend(hours=_hours(hours), reason=reason_or_none))
    methods = {"approve": lifecycle.approve, "reject": lifecycle.reject,
               "cancel": lifecycle.cancel, "release": lifecycle.release}
    return methods[action](p, code, reason_or_none)


def _hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        raise InvalidInput(f"hours '{text}' is not a number of hours",
                           code="invalid_hours") from None
    if not 0 < hours <= 24 * 366:
        raise InvalidInput("hours must be more than 0 and at most 8784 (366 days)",
                           code="invalid_hours")
    return hours


DONE = {"approve": "approved", "reject": "rejected", "cancel": "cancelled",
        "release": "released", "extend": "extended", "created": "created"}

router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/requests")
async def requests_list(request: Request, state: str | None = None, project: str | None = None,
                        cursor: str | None = None, limit: int | None = None,
                        who: Viewer = Depends(viewer)) -> Response:
    sections = await run_in_threadpool(list_page, services(request), who.principal, state,
                                       project, cursor, limit)
    listing = sections["requests"]
    next_url = None
    if listing.data is not None and listing.data.next_cursor:
        next_url = ui_url("requests", state=state or None, project=project or None,
                          cursor=listing.data.next_cursor, limit=limit)
    return render(request, "requests.html", who, page_status(sections), sections=sections,
                  state=state or "", project=project or "", states=STATES, next_url=next_url,
                  may_create=is_allowed(who.principal.role, Action.REQUEST_GPUS),
                  current_page="requests")


@router.get(UI + "/requests/{code}")
async def request_detail(request: Request, code: str, done: str | None = None,
                         who: Viewer = Depends(viewer)) -> Response:
    sections = await run_in_threadpool(detail_page, services(request), who.principal, code)
    found = sections["request"]
    if found.error:
        return render(request, "error.html", who, found.error_status or 500,
                      heading=f"Request {code}", message=found.error, current_page="requests")
    return render(request, "request.html", who, page_status(sections), sections=sections,
                  code=code, actions=actions_for(who.principal, found.data),
                  done=DONE.get(done or ""), current_page="requests")


@router.post(UI + "/requests/{code}/{action}")
async def request_action(request: Request, code: str, action: str,
                         who: Viewer = Depends(viewer)) -> Response:
    if action not in ACTION_NEEDS:
        return render(request, "error.html", who, 404, heading="No such action",
                      message=f"'{action}' is not an action on a request; one of "
                              f"{', '.join(ACTION_NEEDS)}", current_page="requests")
    try:
        reason, hours = await checked_form(request, who, "reason", "hours")
        await run_in_threadpool(act, services(request), who.principal, code, action,
                                reason, hours)
    except GpufleetError as exc:
        return render(request, "error.html", who, exc.http_status,
                      heading=f"Could not {action} {code}", message=exc.message,
                      back=(ui_url(f"requests/{code}"), f"Back to {code}"), current_page="requests")
    return RedirectResponse(ui_url(f"requests/{code}", done=action), status_code=303)
