"""Stamp each new audit event with what makes it an event: its project and its labels
(docs/operations.md, "Events").

Done as the event is written (in the flush that inserts it), from the rows of the same
transaction, so the labels are those true at the time — a GPU that moves or an
allocation that ends later does not rewrite its past events. Request and pool events also
carry the request's or pool's shape in their data (kind, models, count), so a
subscription can say "approvals of 8 or more H100s" of a `request.approved`, whose own
record holds only the transition.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.operations.notifications import UNIT_LABELS
from gpufleet.domain.requests import pool_id_from_code, request_id_from_code
from gpufleet.store.tables import AuditEvent, Environment, Gpu, GpuRequest, Node, Pool

MAX_LABEL_CHARS = 255


def stamp_all(session: Session, events: Sequence[AuditEvent]) -> None:
    """Set `labels` and `project` on each new event that has none yet; GPU and node
    subjects are looked up with one query each per flush, however many events name them."""
    fresh = [e for e in events if e.labels is None]
    if not fresh:
        return
    with session.no_autoflush:
        gpu_places = _gpu_places(session, {e.subject for e in fresh if e.subject_kind == "gpu"})
        node_places = _node_places(session,
                                   {e.subject for e in fresh if e.subject_kind == "node"})
        for event in fresh:
            details = dict(event.details or {})
            labels = {k: v for k, v in details.items()
                      if k in UNIT_LABELS and isinstance(v, str) and v}
            derived = _derived(session, event, details, gpu_places, node_places)
            for key, value in derived.items():
                labels.setdefault(key, value)
            event.labels = {k: v[:MAX_LABEL_CHARS] for k, v in labels.items()}
            event.project = labels.get("project")
            if details != (event.details or {}):
                event.details = details


def _derived(session: Session, event: AuditEvent, details: dict,
             gpu_places: dict[str, tuple[str, str]],
             node_places: dict[str, str]) -> dict[str, str]:
    kind, subject = event.subject_kind, event.subject
    if kind == "request":
        return _request_labels(session, subject, details)
    if kind == "pool":
        return _pool_labels(session, subject, details)
    if kind == "project":
        return {"project": subject}
    if kind == "environment":
        return {"environment": subject}
    if kind == "node":
        place = node_places.get(subject)
        return {"node": subject, **({"environment": place} if place else {})}
    if kind == "gpu":
        node, environment = gpu_places.get(subject, (None, None))
        return {"gpu": subject, **({"node": node} if node else {}),
                **({"environment": environment} if environment else {})}
    return {}


def _request_labels(session: Session, code: str, details: dict) -> dict[str, str]:
    request_id = request_id_from_code(code)
    request = session.get(GpuRequest, request_id) if request_id is not None else None
    if request is None:
        return {"allocation": code}
    for key, value in (("project", request.project.name), ("kind", request.kind),
                       ("count", request.count), ("models", request.models),
                       ("mig_profile", request.mig_profile), ("milli", request.milli)):
        if value is not None:
            details.setdefault(key, value)
    labels = {"allocation": code, "project": request.project.name}
    if request.environment:
        labels["environment"] = request.environment
    return labels


def _pool_labels(session: Session, code: str, details: dict) -> dict[str, str]:
    pool_id = pool_id_from_code(code)
    pool = session.get(Pool, pool_id) if pool_id is not None else None
    if pool is None:
        return {}
    for key, value in (("project", pool.project.name), ("flavour", pool.flavour),
                       ("count", pool.count)):
        details.setdefault(key, value)
    return {"project": pool.project.name}


def _gpu_places(session: Session, uuids: set[str]) -> dict[str, tuple[str, str]]:
    if not uuids:
        return {}
    places: dict[str, tuple[str, str]] = {}
    for chunk in _chunks(uuids):
        rows = session.execute(select(Gpu.uuid, Node.name, Environment.name)
                               .join(Node, Node.id == Gpu.node_id)
                               .join(Environment, Environment.id == Gpu.environment_id)
                               .where(Gpu.uuid.in_(chunk)))
        places.update({uuid: (node, environment) for uuid, node, environment in rows})
    return places


def _node_places(session: Session, names: set[str]) -> dict[str, str]:
    if not names:
        return {}
    places: dict[str, str] = {}
    for chunk in _chunks(names):
        rows = session.execute(select(Node.name, Environment.name)
                               .join(Environment, Environment.id == Node.environment_id)
                               .where(Node.name.in_(chunk)))
        places.update({name: environment for name, environment in rows})
    return places


def _chunks(values: set[str], size: int = 500) -> list[list[str]]:
    """Bounded IN lists on both databases."""
    ordered = sorted(values)
    return [ordered[lo:lo + size] for lo in range(0, len(ordered), size)]
