"""The Node page: its GPUs, each MIG GPU's layout drawn to scale, the processes on its units
with their attribution, health and recent XIDs; and the operator's cordon / uncordon /
retire (docs/dashboard.md, "Node"). Every figure is a service call the API makes, with the
viewer's principal, so a member sees what `GET /api/v1/...` shows them and no more."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from gpufleet.api.web import mig_layout
from gpufleet.api.web.mig_layout import Layout, layout_of
from gpufleet.api.web.page import (
    UI,
    Section,
    Viewer,
    api_url,
    checked_form,
    page_status,
    render,
    section,
    services,
    templates,
    ui_url,
    viewer,
)
from gpufleet.domain.access import Action, is_allowed
from gpufleet.domain.errors import GpufleetError, InvalidInput
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.base import Page
from gpufleet.wire.inventory import NodeDetail
from gpufleet.wire.telemetry_queries import ProcessView, RangeQueryResult, UnitSnapshotView

XID_METRIC = "gpu.xid_errors_total"
XID_WINDOW, XID_STEP = "24h", "1h"
DONE = {"cordon": "Node cordoned: no new placements; running work stays.",
        "uncordon": "Node uncordoned: placements may use it again.",
        "retire": "Node retired: its credential is revoked; it stays retired."}
ACTIONS = tuple(DONE)
mig_layout.install(templates.env)


@dataclass(frozen=True)
class Xid:
    """One XID code seen on one unit in the window: how often, and the last hour it rose."""

    gpu_uuid: str
    mig_uuid: str | None
    xid: str
    count: float
    last_hour: datetime


def _xids(result: RangeQueryResult) -> list[Xid]:
    found = []
    for series in result.series:
        risen = [(at, value) for at, value in series.points if value and value > 0]
        if risen:
            found.append(Xid(series.labels.get("gpu_uuid") or "", series.labels.get("mig_uuid"),
                             series.labels.get("xid") or "?", sum(v for _, v in risen),
                             max(at for at, _ in risen)))
    return sorted(found, key=lambda x: (x.last_hour, x.gpu_uuid, x.xid), reverse=True)


def _holders(units: Section) -> dict[str, dict[str | None, tuple[str, ...]]] | None:
    """Per GPU, the allocations holding each MIG instance as the viewer may see them."""
    if units.data is None:
        return None
    held: dict[str, dict[str | None, tuple[str, ...]]] = {}
    for unit in units.data.items:
        if unit.mig_uuid is not None:
            held.setdefault(unit.gpu_uuid, {})[unit.mig_uuid] = tuple(
                c.allocation for c in unit.charged_to)
    return held


def _layouts(node: NodeDetail, units: Section) -> list[Layout]:
    holders = _holders(units)
    return [layout_of(gpu, None if holders is None else holders.get(gpu.uuid, {}))
            for gpu in node.gpu_list if gpu.mig_instances or gpu.sharing_mode == "mig"]


def _health_details(gf: Gpufleet, p: Principal, node: NodeDetail) -> dict[str, object]:
    """The rule, evidence and time behind each GPU that is not healthy (or has an instance
    that is not), from `GET /api/v1/gpus/{uuid}/health`; a GPU the viewer may not read there
    (a member's view of another project's GPU) keeps only what the node shows."""
    details = {}
    for gpu in node.gpu_list:
        if gpu.health == "healthy" and all(m.health == "healthy" for m in gpu.mig_instances):
            continue
        try:
            details[gpu.uuid] = gf.gpu_health(p, gpu.uuid)
        except GpufleetError:
            continue
    return details


def node_page(gf: Gpufleet, p: Principal, name: str) -> dict[str, Section]:
    """Every section of the Node page for this caller; `node` failing (404) fails the page."""
    node = section(api_url(f"nodes/{name}"), lambda: gf.get_node(p, name))
    if node.error:
        return {"node": node}
    limit = gf.settings.page_size_max
    units = section(api_url("telemetry/latest", node=name, limit=limit),
                    lambda: gf.queries.latest_snapshots(p, node=name, limit=limit))
    xids = section(api_url("telemetry/query", metric=XID_METRIC, since=XID_WINDOW,
                           step=XID_STEP, filter=f"node={name}", by="gpu_uuid,mig_uuid,xid"),
                   lambda: _xids(gf.queries.range_query(
                       p, XID_METRIC, since=XID_WINDOW, step=XID_STEP,
                       filters={"node": [name]}, group_by=["gpu_uuid", "mig_uuid", "xid"])))
    return {
        "node": node,
        "layouts": Section(node.api, _layouts(node.data, units)),
        "units": units,
        "health": section(api_url(f"nodes/{name}"),
                          lambda: _health_details(gf, p, node.data)),
        "xids": xids,
    }


def _unit_rows(units: Page[UnitSnapshotView]) -> dict[tuple[str, str | None], UnitSnapshotView]:
    return {(u.gpu_uuid, u.mig_uuid): u for u in units.items}


def _process_rows(units: Page[UnitSnapshotView], gpu_index: dict[str, int],
                  layouts: list[Layout]) -> list[tuple[UnitSnapshotView, ProcessView]]:
    """Each process with its unit, by GPU index, then instance placement, then pid."""
    start = {i.mig_uuid: i.start for layout in layouts for i in layout.instances}
    rows = [(u, p) for u in units.items for p in u.processes]
    return sorted(rows, key=lambda row: (gpu_index.get(row[0].gpu_uuid, -1),
                                         start.get(row[0].mig_uuid) or -1, row[1].pid))


router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/nodes/{{name}}")
async def node(request: Request, name: str, done: str | None = None,
               who: Viewer = Depends(viewer)) -> Response:
    sections = await run_in_threadpool(node_page, services(request), who.principal, name)
    found = sections["node"]
    if found.error:
        return render(request, "error.html", who, found.error_status or 500,
                      heading=f"Node {name}", message=found.error,
                      back=(f"{UI}/nodes", "Back to the node list"))
    units, layouts = sections["units"], sections["layouts"].data
    gpu_index = {g.uuid: g.index for g in found.data.gpu_list}
    return render(request, "node.html", who, page_status(sections), sections=sections,
                  node=found.data, unit_rows=_unit_rows(units.data) if units.data else {},
                  process_rows=_process_rows(units.data, gpu_index, layouts)
                  if units.data else [], gpu_index=gpu_index,
                  instances={i.mig_uuid: i for la in layouts for i in la.instances},
                  can_manage=is_allowed(who.principal.role, Action.MANAGE_INVENTORY),
                  done=DONE.get(done or ""), current_page="nodes")


@router.post(f"{UI}/nodes/{{name}}/{{action}}")
async def change(request: Request, name: str, action: str,
                 who: Viewer = Depends(viewer)) -> Response:
    try:
        reason, confirm = await checked_form(request, who, "reason", "confirm")
        if action not in ACTIONS:
            raise InvalidInput(f"unknown node action '{action}'; choose from: "
                               f"{', '.join(ACTIONS)}", code="unknown_action")
        if action == "retire" and confirm != "yes":
            raise InvalidInput("retiring a node is for good: tick the confirmation box",
                               code="confirmation_required")
        await run_in_threadpool(services(request).change_node, who.principal, name, action,
                                reason.strip() or None)
    except GpufleetError as exc:
        return render(request, "error.html", who, exc.http_status, heading=f"Node {name}",
                      message=exc.message, back=(ui_url(f"nodes/{name}"), f"Back to {name}"))
    return RedirectResponse(ui_url(f"nodes/{name}", done=action), status_code=303)
