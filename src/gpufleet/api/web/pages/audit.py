"""The Audit page: the audit log, filtered as GET /api/v1/audit-events filters it and paged
by that endpoint's cursor, from the same service call (docs/dashboard.md, "Audit")."""

from __future__ import annotations

from dataclasses import dataclass

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
from gpufleet.domain.access import GRANTS, Action, AuditSubject
from gpufleet.domain.errors import InvalidInput

NAV = ("audit", "Audit", f"{UI}/audit")
# The entry is shown to the roles the API lets read the audit log; the service still
# checks every request (a member who types the URL gets the API's 403).
NAV_ROLES = GRANTS[Action.READ_AUDIT]
# "Previous" links carry the cursors of the pages before this one; past this many the
# oldest are dropped (their "previous" then leads to the newest page).
TRAIL_MAX = 50


@dataclass(frozen=True)
class Filters:
    """The API's filters, as the page's query string carries them ("" = not filtered)."""

    subject_kind: str = ""
    subject: str = ""
    action: str = ""

    def query(self) -> dict[str, str | None]:
        return {"subject_kind": self.subject_kind or None, "subject": self.subject or None,
                "action": self.action or None}

    def check(self) -> None:
        kinds = [k.value for k in AuditSubject]
        if self.subject_kind and self.subject_kind not in kinds:
            raise InvalidInput(f"unknown subject kind '{self.subject_kind}'; choose one of: "
                               f"{', '.join(kinds)}", code="invalid_subject_kind")


@dataclass(frozen=True)
class Paging:
    """Where this page is: the API's cursor (None: the newest page) and the cursors of
    the pages before it, oldest first, for the "previous" link."""

    cursor: str | None
    trail: tuple[str, ...]

    def next_url(self, filters: Filters, next_cursor: str) -> str:
        trail = (*self.trail, self.cursor) if self.cursor else self.trail
        return _url(filters, next_cursor, trail[-TRAIL_MAX:])

    def previous_url(self, filters: Filters) -> str | None:
        if self.cursor is None:
            return None
        if not self.trail:
            return _url(filters, None, ())
        return _url(filters, self.trail[-1], self.trail[:-1])


def _url(filters: Filters, cursor: str | None, trail: tuple[str, ...]) -> str:
    return ui_url("audit", **filters.query(), cursor=cursor, back=",".join(trail) or None)


def audit_section(gf, p, filters: Filters, cursor: str | None) -> Section:
    """The events for this caller: the service checks the role (the API's 403) and the
    cursor (the API's 400)."""
    def compute():
        filters.check()
        return gf.audit_events(p, subject_kind=filters.subject_kind or None,
                               subject=filters.subject or None,
                               action=filters.action or None, cursor=cursor,
                               limit=gf.settings.page_size_default)
    return section(api_url("audit-events", **filters.query(), cursor=cursor), compute)


router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/audit")
async def audit(request: Request, subject_kind: str = "", subject: str = "", action: str = "",
                cursor: str = "", back: str = "", who: Viewer = Depends(viewer)) -> Response:
    filters = Filters(subject_kind.strip(), subject.strip(), action.strip())
    paging = Paging(cursor or None, tuple(c for c in back.split(",") if c))
    events = await run_in_threadpool(audit_section, services(request), who.principal,
                                     filters, paging.cursor)
    if events.error_status == 403:
        return render(request, "error.html", who, 403, heading="Audit log: not allowed",
                      message=f"{events.error}; roles that may: "
                              f"{', '.join(sorted(NAV_ROLES))}.", current_page="audit")
    next_url = None
    if events.data is not None and events.data.next_cursor:
        next_url = paging.next_url(filters, events.data.next_cursor)
    return render(request, "audit.html", who, page_status({"events": events}), events=events,
                  filters=filters, kinds=[k.value for k in AuditSubject],
                  next_url=next_url, previous_url=paging.previous_url(filters),
                  newest_url=_url(filters, None, ()) if paging.cursor else None,
                  current_page="audit")
