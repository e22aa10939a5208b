"""The GPU lifecycle: requests and their transitions, pools, quotas and approval policies."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from gpufleet.api.deps import PageRequest, page_limit, page_request, principal, services
from gpufleet.domain.requests import PoolState, RequestState
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.base import Page
from gpufleet.wire.inventory import AuditEventView
from gpufleet.wire.requests import (
    AutoApproveSet,
    Decide,
    Extend,
    PoolCreate,
    PoolEnd,
    PoolView,
    ProjectQuotas,
    QuotaSet,
    RequestCreate,
    RequestPreview,
    RequestView,
    RequestWhy,
)

router = APIRouter(prefix="/api/v1")
REQUESTS = ["requests"]
POOLS = ["pools"]
QUOTAS = ["quotas"]


def _reason(body: Decide | None) -> str | None:
    return body.reason if body else None


@router.post("/requests", response_model=RequestView, status_code=201, tags=REQUESTS)
def create_request(body: RequestCreate, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    """Ask for GPU units. Within an auto-approve policy it is approved (and, when capacity
    allows, granted) at once; otherwise it is `pending` until an operator decides."""
    return gf.lifecycle.create_request(p, body)


@router.post("/requests/preview", response_model=RequestPreview, tags=REQUESTS)
def preview_request(body: RequestCreate, p: Principal = Depends(principal),
                    gf: Gpufleet = Depends(services)):
    """What `POST /requests` with this body would come to now, writing nothing: its
    admission verdicts, whether it would be approved at once, and where the placement
    engine would put it on the live fleet if it were approved. Refused as creation is."""
    return gf.lifecycle.preview_request(p, body)


@router.get("/requests", response_model=Page[RequestView], tags=REQUESTS)
def list_requests(state: RequestState | None = None, project: str | None = None,
                  node: str | None = Query(default=None, description=(
                      "Only those holding a unit on this node now.")),
                  gpu: str | None = Query(default=None, description=(
                      "Only those holding a unit on this GPU (UUID) now.")),
                  cursor: str | None = None, limit: int | None = Query(default=None),
                  p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Newest first. Members see their own projects' requests."""
    return gf.lifecycle.list_requests(p, state=state.value if state else None, project=project,
                                      node=node, gpu=gpu, cursor=cursor,
                                      limit=page_limit(limit, gf))


@router.get("/requests/{code}", response_model=RequestView, tags=REQUESTS)
def show_request(code: str, p: Principal = Depends(principal),
                 gf: Gpufleet = Depends(services)):
    """The request, its units (past and present) and what a workload exports to use them."""
    return gf.lifecycle.show_request(p, code)


@router.get("/requests/{code}/why", response_model=RequestWhy, tags=REQUESTS)
def why_request(code: str, p: Principal = Depends(principal),
                gf: Gpufleet = Depends(services)):
    """Why the request waits: each admission rule's verdict, its queue position, its quota."""
    return gf.lifecycle.why(p, code)


@router.get("/requests/{code}/history", response_model=Page[AuditEventView], tags=REQUESTS)
def request_history(code: str, page: PageRequest = Depends(page_request),
                    p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Every transition of the request, oldest first: who, when, why."""
    return gf.lifecycle.history(p, code, page.cursor, page.limit)


@router.post("/requests/{code}/approve", response_model=RequestView, tags=REQUESTS)
def approve_request(code: str, body: Decide | None = None, p: Principal = Depends(principal),
                    gf: Gpufleet = Depends(services)):
    return gf.lifecycle.approve(p, code, _reason(body))


@router.post("/requests/{code}/reject", response_model=RequestView, tags=REQUESTS)
def reject_request(code: str, body: Decide | None = None, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    return gf.lifecycle.reject(p, code, _reason(body))


@router.post("/requests/{code}/cancel", response_model=RequestView, tags=REQUESTS)
def cancel_request(code: str, body: Decide | None = None, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    return gf.lifecycle.cancel(p, code, _reason(body))


@router.post("/requests/{code}/release", response_model=RequestView, tags=REQUESTS)
def release_request(code: str, body: Decide | None = None, p: Principal = Depends(principal),
                    gf: Gpufleet = Depends(services)):
    """Close the allocation's bindings and remove its labels."""
    return gf.lifecycle.release(p, code, _reason(body))


@router.post("/requests/{code}/extend", response_model=RequestView, tags=REQUESTS)
def extend_request(code: str, body: Extend, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    return gf.lifecycle.extend(p, code, body)


@router.get("/placement/fleet-state", tags=["placement"])
def placement_fleet_state(p: Principal = Depends(principal), gf: Gpufleet = Depends(services)
                          ) -> dict[str, Any]:
    """The live fleet as the placement engine sees it (what `gpufleet whatif --live` replays
    against): schedulable nodes, usable GPUs, what is bound and what is free."""
    return gf.lifecycle.placement_fleet_state(p)


@router.post("/pools", response_model=PoolView, status_code=201, tags=POOLS)
def request_pool(body: PoolCreate, p: Principal = Depends(principal),
                 gf: Gpufleet = Depends(services)):
    """Ask for capacity dedicated to a project; it exists once an operator approves it."""
    return gf.lifecycle.request_pool(p, body)


@router.get("/pools", response_model=Page[PoolView], tags=POOLS)
def list_pools(project: str | None = None,
               state: PoolState | None = None,
               page: PageRequest = Depends(page_request), p: Principal = Depends(principal),
               gf: Gpufleet = Depends(services)):
    """Pools, oldest first; members see their own projects'."""
    return gf.lifecycle.list_pools(p, project=project, state=state.value if state else None,
                                   cursor=page.cursor,
                                   limit=page.limit)


@router.get("/pools/{code}", response_model=PoolView, tags=POOLS)
def show_pool(code: str, p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    return gf.lifecycle.show_pool(p, code)


@router.post("/pools/{code}/approve", response_model=PoolView, tags=POOLS)
def approve_pool(code: str, body: Decide | None = None, p: Principal = Depends(principal),
                 gf: Gpufleet = Depends(services)):
    """Reserve the pool out of free capacity (409 when there is not enough)."""
    return gf.lifecycle.approve_pool(p, code, _reason(body))


@router.post("/pools/{code}/reject", response_model=PoolView, tags=POOLS)
def reject_pool(code: str, body: Decide | None = None, p: Principal = Depends(principal),
                gf: Gpufleet = Depends(services)):
    return gf.lifecycle.reject_pool(p, code, _reason(body))


@router.post("/pools/{code}/end", response_model=PoolView, tags=POOLS)
def end_pool(code: str, body: PoolEnd | None = None, p: Principal = Depends(principal),
             gf: Gpufleet = Depends(services)):
    """End an active pool now: its reservation and quota are freed and its charge stops.
    A member of its project or an operator may; 409 while requests hold its units (named),
    or when the pool is not active."""
    return gf.lifecycle.end_pool(p, code, body.reason if body else None)


@router.get("/projects/{name}/quotas", response_model=ProjectQuotas, tags=QUOTAS)
def project_quotas(name: str, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    """Quota, usage and availability per flavour, and the auto-approve policy."""
    return gf.lifecycle.project_quotas(p, name)


@router.put("/projects/{name}/quotas", response_model=ProjectQuotas, tags=QUOTAS)
def set_quota(name: str, body: QuotaSet, p: Principal = Depends(principal),
              gf: Gpufleet = Depends(services)):
    return gf.lifecycle.set_quota(p, name, body)


@router.delete("/projects/{name}/quotas/{flavour:path}", response_model=ProjectQuotas,
               tags=QUOTAS)
def remove_quota(name: str, flavour: str, p: Principal = Depends(principal),
                 gf: Gpufleet = Depends(services)):
    return gf.lifecycle.remove_quota(p, name, flavour)


@router.put("/projects/{name}/auto-approve", response_model=ProjectQuotas, tags=QUOTAS)
def set_auto_approve(name: str, body: AutoApproveSet, p: Principal = Depends(principal),
                     gf: Gpufleet = Depends(services)):
    """Requests at most `max_gpus` large and `max_hours` long are approved without a person."""
    return gf.lifecycle.set_auto_approve(p, name, body)


@router.delete("/projects/{name}/auto-approve", response_model=ProjectQuotas, tags=QUOTAS)
def remove_auto_approve(name: str, p: Principal = Depends(principal),
                        gf: Gpufleet = Depends(services)):
    return gf.lifecycle.remove_auto_approve(p, name)
