"""GPU health: a GPU's state, the rule and evidence behind it, its history; and the
operator's clear (docs/operations.md, "GPU health and quarantine")."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from gpufleet.api.deps import principal, services
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.health import GpuClear, GpuHealthClear, GpuHealthView

router = APIRouter(prefix="/api/v1", tags=["health"])


@router.get("/gpus/{uuid}/health", response_model=GpuHealthView)
def gpu_health(uuid: str, p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """The GPU's health, the rule and evidence that put it there, and its history (newest
    first). Members see only GPUs their projects hold a unit on."""
    return gf.gpu_health(p, uuid)


@router.post("/gpus/{uuid}/clear", response_model=GpuHealthView)
def clear_gpu(uuid: str, body: GpuHealthClear, p: Principal = Depends(principal),
              gf: Gpufleet = Depends(services)):
    """Return a suspect or quarantined GPU to healthy (operators); 409 when it is healthy
    already. With `mig_instance`, that MIG instance of the GPU instead (404 for an
    instance the GPU does not have). The history records who cleared it and why."""
    return gf.clear_gpu(p, uuid, body)


@router.post("/gpus/{uuid}/retire", response_model=GpuHealthView)
def retire_gpu(uuid: str, body: GpuClear, p: Principal = Depends(principal),
               gf: Gpufleet = Depends(services)):
    """Retire a quarantined GPU for good (operators): placement never uses it again and
    nothing returns it. 409 for a GPU that is not quarantined."""
    return gf.retire_gpu(p, uuid, body)
