"""Reclamation: policies, exemptions, warnings, a round now, and the report
(docs/operations.md, "Reclamation")."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Response

from gpufleet.api.deps import principal, services
from gpufleet.domain.operations.reclaim_policy import Scope
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.reclaim import (
    EffectivePolicyView,
    ExemptCreate,
    ExemptionView,
    PolicyList,
    PolicySet,
    PolicyView,
    ReclaimReport,
    RoundView,
    WarningView,
)

router = APIRouter(prefix="/api/v1")
TAGS = ["reclamation"]


@router.get("/reclaim/policies", response_model=PolicyList, tags=TAGS)
def list_policies(scope: Scope | None = None, p: Principal = Depends(principal),
                  gf: Gpufleet = Depends(services)):
    """The server's default and every environment's and project's policy (members: the
    environments' and their own projects')."""
    return gf.reclaim.list_policies(p, scope)


@router.get("/reclaim/policies/effective", response_model=EffectivePolicyView, tags=TAGS)
def effective_policy(project: str, environment: str | None = None,
                     p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """The policy an allocation of `project` in `environment` gets, and who decided each
    field: the project, else the environment, else the server's default."""
    return gf.reclaim.effective_policy(p, project, environment)


@router.put("/reclaim/policies/{scope}/{name}", response_model=PolicyView, tags=TAGS)
def set_policy(scope: Scope, name: str, body: PolicySet, p: Principal = Depends(principal),
               gf: Gpufleet = Depends(services)):
    """Set fields of an environment's or a project's policy (operators); fields not given
    keep their value, `unset` clears fields."""
    return gf.reclaim.set_policy(p, scope, name, body)


@router.delete("/reclaim/policies/{scope}/{name}", status_code=204, tags=TAGS)
def remove_policy(scope: Scope, name: str, p: Principal = Depends(principal),
                  gf: Gpufleet = Depends(services)):
    """Remove an environment's or a project's policy: the next scope decides again."""
    gf.reclaim.remove_policy(p, scope, name)
    return Response(status_code=204)


@router.post("/reclaim/run", response_model=RoundView, tags=TAGS)
def run_round(dry_run: bool = False, p: Principal = Depends(principal),
              gf: Gpufleet = Depends(services)):
    """Run a round now (operators). `dry_run`: decide, write nothing, show the steps."""
    return gf.reclaim.run(p, dry_run=dry_run)


@router.get("/reclaim/warnings", response_model=list[WarningView], tags=TAGS)
def list_warnings(open_only: bool = Query(default=False, alias="open"),
                  allocation: str | None = None, p: Principal = Depends(principal),
                  gf: Gpufleet = Depends(services)):
    """Warnings and how they ended, newest first (`open=true`: idle warnings awaiting
    their deadline)."""
    return gf.reclaim.list_warnings(p, open_only=open_only, allocation=allocation)


@router.get("/reclaim/exemptions", response_model=list[ExemptionView], tags=TAGS)
def list_exemptions(expired: bool = False, p: Principal = Depends(principal),
                    gf: Gpufleet = Depends(services)):
    """Exemptions granted and asked for, newest first (`expired=true`: the ended ones too)."""
    return gf.reclaim.list_exemptions(p, include_expired=expired)


@router.get("/reclaim/report", response_model=ReclaimReport, tags=TAGS)
def reclaim_report(window: str = "30d", project: str | None = None,
                   p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """What came back over the window (GPU-hours, per project and environment), what was
    warned but saved by use, and what was exempted."""
    return gf.reclaim.report(p, window, project)


@router.post("/requests/{code}/exempt", response_model=ExemptionView, status_code=201,
             tags=TAGS)
def exempt_request(code: str, body: ExemptCreate, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    """Keep an allocation from reclamation until a time: granted when an operator asks;
    recorded as asked (protecting nothing until an operator grants it) when its owner does."""
    return gf.reclaim.exempt(p, code, body)
