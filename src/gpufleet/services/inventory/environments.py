"""Environments — where GPUs live — and the join tokens that admit nodes into them."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.errors import Conflict
from gpufleet.domain.inventory import EnvironmentKind, SharingMode
from gpufleet.services.access import audit, tokens
from gpufleet.services.access.principal import Principal
from gpufleet.services.lookup import one_where
from gpufleet.services.paging import SortSpec, keyset_page
from gpufleet.store.tables import Environment, Gpu, JoinToken, Node
from gpufleet.wire.base import Page
from gpufleet.wire.inventory import (
    EnvironmentCreate,
    EnvironmentView,
    JoinTokenCreate,
    JoinTokenIssued,
    JoinTokensIssued,
)

_BY_NAME = SortSpec((Environment.name,))


def get_environment(session: Session, name: str) -> Environment:
    return one_where(session, Environment, Environment.name == name, "environment", name)


def _view(environment: Environment, nodes: int = 0, gpus: int = 0) -> EnvironmentView:
    return EnvironmentView(
        name=environment.name, kind=EnvironmentKind(environment.kind),
        provider=environment.provider, region=environment.region,
        default_sharing_mode=SharingMode(environment.default_sharing_mode),
        description=environment.description, created_at=environment.created_at,
        nodes=nodes, gpus=gpus)


def create_environment(session: Session, principal: Principal, body: EnvironmentCreate,
                       now: datetime) -> EnvironmentView:
    principal.require(Action.MANAGE_INVENTORY)
    if session.scalar(select(Environment.id).where(Environment.name == body.name)) is not None:
        raise Conflict(f"environment '{body.name}' already exists", code="environment_exists",
                       details={"environment": body.name})
    environment = Environment(name=body.name, kind=body.kind.value, provider=body.provider,
                              region=body.region,
                              default_sharing_mode=body.default_sharing_mode.value,
                              description=body.description, created_at=now)
    session.add(environment)
    audit.record(session, at=now, actor=principal.actor, action="environment.created",
                 subject_kind="environment", subject=body.name, kind=body.kind.value)
    return _view(environment)


def list_environments(session: Session, principal: Principal, cursor: str | None,
                      limit: int) -> Page[EnvironmentView]:
    principal.require(Action.READ_INVENTORY)
    rows, next_cursor = keyset_page(session, select(Environment), _BY_NAME, cursor, limit)
    return Page[EnvironmentView](items=_counted(session, [e for (e,) in rows]),
                                 next_cursor=next_cursor)


def show_environment(session: Session, principal: Principal, name: str) -> EnvironmentView:
    """One environment as the listing shows it (404 `not_found` when there is none)."""
    principal.require(Action.READ_INVENTORY)
    return _counted(session, [get_environment(session, name)])[0]


def _counted(session: Session, found: list[Environment]) -> list[EnvironmentView]:
    """Views with node and GPU counts, counted as the fleet summary counts: retired nodes
    and GPUs are no longer in the fleet."""
    ids = [environment.id for environment in found]
    node_counts = dict(session.execute(
        select(Node.environment_id, func.count())
        .where(Node.status != "retired", Node.environment_id.in_(ids))
        .group_by(Node.environment_id)).all())
    gpu_counts = dict(session.execute(
        select(Gpu.environment_id, func.count())
        .where(Gpu.status != "retired", Gpu.environment_id.in_(ids))
        .group_by(Gpu.environment_id)).all())
    return [_view(e, node_counts.get(e.id, 0), gpu_counts.get(e.id, 0)) for e in found]


def create_join_tokens(session: Session, principal: Principal, body: JoinTokenCreate,
                       now: datetime, default_ttl_s: int) -> JoinTokensIssued:
    """Single-use tokens, each admitting one node into `body.environment`."""
    principal.require(Action.CREATE_JOIN_TOKEN)
    environment = get_environment(session, body.environment)
    expires_at = now + timedelta(seconds=body.expires_in_s or default_ttl_s)
    issued = []
    for _ in range(body.count):
        raw = tokens.new_secret(tokens.JOIN_PREFIX)
        session.add(JoinToken(token_hash=tokens.hash_token(raw), prefix=tokens.display_prefix(raw),
                              environment_id=environment.id, description=body.description,
                              created_by=principal.actor, created_at=now, expires_at=expires_at))
        issued.append(JoinTokenIssued(token=raw, prefix=tokens.display_prefix(raw),
                                      environment=environment.name, expires_at=expires_at))
    audit.record(session, at=now, actor=principal.actor, action="join_tokens.created",
                 subject_kind="environment", subject=environment.name, count=body.count,
                 expires_at=expires_at.isoformat())
    return JoinTokensIssued(tokens=issued)
