"""The node list: one page of `GET /api/v1/nodes` at a time, filtered as the API filters and
paged with its cursor, so it stays one indexed query at 12,500 nodes (docs/dashboard.md,
"Nodes")."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from gpufleet.api.web.page import (
    UI,
    Section,
    Viewer,
    page_status,
    render,
    section,
    services,
    viewer,
)
from gpufleet.domain.inventory import NodeStatus
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.inventory.fleet import NodeFilter

NAV = ("nodes", "Nodes", f"{UI}/nodes")
NODES_PER_PAGE = 50
STATUSES = [s.value for s in NodeStatus]


def _filled(values: list[str]) -> list[str]:
    """A form's empty field means "any", as an absent query parameter does."""
    return [v.strip() for v in values if v.strip()]


def _query(environment: list[str], status: list[str], **more) -> str:
    """The filters as the API takes them: each value its own parameter."""
    pairs = [*(("environment", e) for e in environment), *(("status", s) for s in status),
             *((k, v) for k, v in more.items() if v is not None)]
    return f"?{urlencode(pairs)}" if pairs else ""


def node_list(gf: Gpufleet, p: Principal, environment: list[str], status: list[str],
              cursor: str | None) -> Section:
    api = "/api/v1/nodes" + _query(environment, status, limit=NODES_PER_PAGE)
    if bad := [s for s in status if s not in STATUSES]:
        return Section(api, error=f"unknown node status '{bad[0]}'; choose from: "
                                  f"{', '.join(STATUSES)}", error_status=400)
    f = NodeFilter(environment=environment, status=status)
    return section(api, lambda: gf.list_nodes(p, f, "name", cursor, NODES_PER_PAGE))


router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/nodes")
async def nodes(request: Request, environment: list[str] = Query(default=[]),
                status: list[str] = Query(default=[]), cursor: str | None = None,
                who: Viewer = Depends(viewer)) -> Response:
    environment, status = _filled(environment), _filled(status)
    listed = await run_in_threadpool(node_list, services(request), who.principal,
                                     environment, status, cursor or None)
    here = f"{UI}/nodes"
    next_page = None
    if listed.data is not None and listed.data.next_cursor:
        next_page = here + _query(environment, status, cursor=listed.data.next_cursor)
    return render(request, "nodes.html", who, page_status({"nodes": listed}), nodes=listed,
                  environment=environment[0] if environment else "",
                  status=status[0] if status else "", statuses=STATUSES,
                  next_page=next_page,
                  first_page=here + _query(environment, status) if cursor else None,
                  filtered=bool(environment or status), current_page="nodes")
