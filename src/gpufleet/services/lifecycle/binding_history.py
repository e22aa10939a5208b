"""A GPU's allocation history: which allocation held which of its units, and when — the
binding intervals (`bindings` table), newest first (docs/dashboard.md, "GPU").

Bindings are history, never rewritten, so this is the record of who held the GPU. A member
sees only their projects' bindings, as everywhere (docs/design.md, "Security")."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.inventory import canonical_gpu_uuid
from gpufleet.domain.placement import UnitKind
from gpufleet.domain.requests import request_code
from gpufleet.services.access.principal import Principal
from gpufleet.services.lifecycle.bindings import mig_uuids_of, profile_name
from gpufleet.services.lookup import not_found
from gpufleet.services.paging import SortSpec, keyset_page
from gpufleet.store.tables import Binding, Gpu, Project
from gpufleet.wire.base import Page
from gpufleet.wire.requests import GpuBindingView

# Bindings are made when they start (granting stamps `started_at` = now), so the newest id
# is the newest start; an integer key also makes a cursor a plain JSON number.
_NEWEST_FIRST = SortSpec((Binding.id,), descending=True)


def gpu_bindings(session: Session, principal: Principal, uuid: str, cursor: str | None,
                 limit: int) -> Page[GpuBindingView]:
    """One page of the GPU's bindings, the newest start first (404 for an unknown GPU, as
    `GET /api/v1/gpus/{uuid}` answers)."""
    principal.require(Action.READ_INVENTORY)
    gpu = session.execute(select(Gpu.id, Gpu.model)
                          .where(Gpu.uuid == canonical_gpu_uuid(uuid))).first()
    if gpu is None:
        raise not_found("gpu", uuid, label="GPU")
    gpu_id, model = gpu
    query = (select(Binding, Project.name).join(Project, Project.id == Binding.project_id)
             .where(Binding.gpu_id == gpu_id))
    if principal.visible_projects is not None:
        query = query.where(Project.name.in_(sorted(principal.visible_projects) or [""]))
    rows, next_cursor = keyset_page(session, query, _NEWEST_FIRST, cursor, limit)
    mig_uuids = mig_uuids_of(session, [b for b, _ in rows if b.kind == UnitKind.MIG.value])
    return Page[GpuBindingView](items=[GpuBindingView(
        allocation=request_code(b.request_id), project=project, kind=b.kind, milli=b.milli,
        mig_profile_id=b.mig_profile_id, mig_profile=profile_name(model, b.mig_profile_id),
        mig_start=b.mig_start,
        mig_uuid=mig_uuids.get((b.gpu_id, b.mig_profile_id, b.mig_start)),
        started_at=b.started_at, ended_at=b.ended_at, end_reason=b.end_reason)
        for b, project in rows], next_cursor=next_cursor)
