"""Fleet inventory: summary, GPUs, nodes and environments."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from gpufleet.api.deps import PageRequest, page_limit, page_request, principal, services
from gpufleet.domain.inventory import GpuHealth, GpuStatus, NodeStatus, SharingMode
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.inventory.fleet import GPU_SORTS, NODE_SORTS, GpuFilter, NodeFilter
from gpufleet.wire.base import Page
from gpufleet.wire.inventory import (
    EnvironmentCreate,
    EnvironmentView,
    FleetSummary,
    GpuHealthChange,
    GpuMoveApprovalCreate,
    GpuMoveApprovalView,
    GpuView,
    NodeDetail,
    NodeView,
    ReasonBody,
)
from gpufleet.wire.requests import GpuBindingView

router = APIRouter(prefix="/api/v1", tags=["inventory"])

_LABEL_HELP = "`key=value`; repeat to require several"


@router.get("/fleet/summary", response_model=FleetSummary)
def fleet_summary(p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """GPUs by environment × model × status (`total_gpus` excludes retired GPUs)."""
    return gf.fleet_summary(p)


@router.get("/gpus", response_model=Page[GpuView])
def list_gpus(
    environment: list[str] = Query(default=[]),
    model: list[str] = Query(default=[]),
    status: list[GpuStatus] = Query(default=[]),
    health: list[GpuHealth] = Query(default=[]),
    sharing_mode: list[SharingMode] = Query(default=[]),
    node: str | None = None,
    label: list[str] = Query(default=[], description=_LABEL_HELP),
    node_label: list[str] = Query(default=[], description=_LABEL_HELP),
    model_known: bool | None = None,
    sort: str = Query(default="node", description=f"one of {', '.join(GPU_SORTS)}; "
                                                    "prefix `-` for descending"),
    cursor: str | None = None,
    limit: int | None = None,
    p: Principal = Depends(principal),
    gf: Gpufleet = Depends(services),
):
    f = GpuFilter(environment=environment, model=model, status=[s.value for s in status],
                  health=[h.value for h in health],
                  sharing_mode=[m.value for m in sharing_mode], node=node, label=label,
                  node_label=node_label, model_known=model_known)
    return gf.list_gpus(p, f, sort, cursor, page_limit(limit, gf))


@router.get("/gpus/{uuid}", response_model=GpuView)
def get_gpu(uuid: str, p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    return gf.get_gpu(p, uuid)


@router.get("/gpus/{uuid}/bindings", response_model=Page[GpuBindingView])
def gpu_bindings(uuid: str, page: PageRequest = Depends(page_request),
                 p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """The GPU's allocation history: which allocation held which of its units, from when
    to when; newest first. Members see their own projects' bindings."""
    return gf.gpu_bindings(p, uuid, page.cursor, page.limit)


@router.post("/gpus/{uuid}/health", response_model=GpuView)
def set_gpu_health(uuid: str, body: GpuHealthChange, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    """Quarantine a GPU (placement skips it) or return it to `healthy`."""
    return gf.set_gpu_health(p, uuid, body)


@router.post("/gpus/{uuid}/move-approvals", response_model=GpuMoveApprovalView,
             status_code=201)
def approve_gpu_move(uuid: str, body: GpuMoveApprovalCreate, p: Principal = Depends(principal),
                     gf: Gpufleet = Depends(services)):
    """Let `to_node` take this GPU at its next registration although its node is live."""
    return gf.approve_gpu_move(p, uuid, body)


@router.get("/nodes", response_model=Page[NodeView])
def list_nodes(
    environment: list[str] = Query(default=[]),
    status: list[NodeStatus] = Query(default=[]),
    model: list[str] = Query(default=[], description="nodes with at least one GPU of a model"),
    health: list[GpuHealth] = Query(default=[],
                                    description="nodes with at least one GPU of a health"),
    label: list[str] = Query(default=[], description=_LABEL_HELP),
    sort: str = Query(default="name", description=f"one of {', '.join(NODE_SORTS)}; "
                                                    "prefix `-` for descending"),
    cursor: str | None = None,
    limit: int | None = None,
    p: Principal = Depends(principal),
    gf: Gpufleet = Depends(services),
):
    f = NodeFilter(environment=environment, status=[s.value for s in status], model=model,
                   health=[h.value for h in health], label=label)
    return gf.list_nodes(p, f, sort, cursor, page_limit(limit, gf))


@router.get("/nodes/{name}", response_model=NodeDetail)
def get_node(name: str, p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    return gf.get_node(p, name)


def _node_action(action: str):
    def handler(name: str, body: ReasonBody | None = None, p: Principal = Depends(principal),
                gf: Gpufleet = Depends(services)):
        return gf.change_node(p, name, action, body.reason if body else None)

    handler.__name__ = f"{action}_node"
    handler.__doc__ = {"cordon": "Stop new placements on the node; running work stays.",
                       "uncordon": "Allow new placements on the node again.",
                       "retire": "Take the node out of the fleet for good; its credential is "
                                 "revoked and its GPUs may move to other nodes."}[action]
    return handler


for _action in ("cordon", "uncordon", "retire"):
    router.add_api_route(f"/nodes/{{name}}/{_action}", _node_action(_action), methods=["POST"],
                         response_model=NodeDetail)


@router.get("/environments", response_model=Page[EnvironmentView])
def list_environments(page: PageRequest = Depends(page_request),
                      p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Environments by name, with their node and GPU counts."""
    return gf.list_environments(p, page.cursor, page.limit)


@router.post("/environments", response_model=EnvironmentView, status_code=201)
def create_environment(body: EnvironmentCreate, p: Principal = Depends(principal),
                       gf: Gpufleet = Depends(services)):
    return gf.create_environment(p, body)
