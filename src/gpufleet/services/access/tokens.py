"""Bearer tokens: issuing, authenticating, listing and revoking.

Tokens are 256-bit random strings with a kind prefix — `gfa_` for API tokens (people,
services and node credentials), `gfj_` for single-use join tokens — stored as SHA-256
hashes: the database never holds a usable token. Because they are random, a plain hash is
enough (no password stretching needed), which keeps authentication one indexed lookup.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action, Role, TokenKind
from gpufleet.domain.errors import InvalidInput, Unauthenticated
from gpufleet.services.access import audit
from gpufleet.services.access.people import get_user
from gpufleet.services.access.principal import Principal
from gpufleet.services.lookup import not_found
from gpufleet.services.paging import SortSpec, keyset_page
from gpufleet.store.tables import ApiToken, JoinToken, Node, Project, ProjectMember, User
from gpufleet.wire.base import Page
from gpufleet.wire.inventory import TokenCreate, TokenIssued, TokenView

API_PREFIX = "gfa_"
JOIN_PREFIX = "gfj_"
LAST_USED_RESOLUTION = timedelta(minutes=1)
_BY_ID = SortSpec((ApiToken.id,))


def new_secret(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def display_prefix(raw: str) -> str:
    return raw[:12]


def is_join_token(raw: str) -> bool:
    return raw.startswith(JOIN_PREFIX)


def find_api_token(session: Session, raw: str, now: datetime) -> ApiToken:
    """The live API token behind `raw`, or `Unauthenticated` saying exactly why not."""
    if not raw:
        raise Unauthenticated("missing bearer token: send `Authorization: Bearer <token>`",
                              code="missing_token")
    if is_join_token(raw):
        raise Unauthenticated("a join token can only register a node "
                              "(POST /api/v1/agent/register)", code="wrong_token_kind")
    token = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(raw)))
    if token is None:
        raise Unauthenticated("unknown token", code="invalid_token")
    if token.revoked_at is not None:
        raise Unauthenticated("this token was revoked", code="token_revoked")
    if token.expires_at is not None and token.expires_at <= now:
        raise Unauthenticated("this token has expired", code="token_expired")
    return token


def principal_for(session: Session, token: ApiToken) -> Principal:
    role = Role(token.role)
    project_names: frozenset[str] = frozenset()
    if token.user_id is not None:
        project_names = frozenset(session.scalars(
            select(Project.name).join(ProjectMember, ProjectMember.project_id == Project.id)
            .where(ProjectMember.user_id == token.user_id)))
    node_name = None
    if token.node_id is not None:
        node_name = session.scalar(select(Node.name).where(Node.id == token.node_id))
    return Principal(role=role, token_id=token.id, token_name=token.name,
                     user_id=token.user_id, user_name=token.user.name if token.user else None,
                     node_id=token.node_id, node_name=node_name,
                     project_names=project_names)


def needs_last_used_update(token: ApiToken, now: datetime) -> bool:
    """Record use at one-minute resolution so reads do not each become a write."""
    return token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION


def touch(session: Session, token_id: int, now: datetime) -> None:
    token = session.get(ApiToken, token_id)
    if token is not None:
        token.last_used_at = now


def issue_api_token(session: Session, *, name: str, role: Role, created_by: str,
                    now: datetime, ttl: timedelta | None, user: User | None = None,
                    node_id: int | None = None) -> tuple[str, ApiToken]:
    raw = new_secret(API_PREFIX)
    token = ApiToken(token_hash=hash_token(raw), prefix=display_prefix(raw), name=name,
                     role=role.value, user_id=user.id if user else None, node_id=node_id,
                     created_by=created_by, created_at=now,
                     expires_at=now + ttl if ttl else None)
    token.user = user
    session.add(token)
    session.flush()
    return raw, token


def token_view(token: ApiToken, node_name: str | None = None) -> TokenView:
    return TokenView(id=token.id, name=token.name, prefix=token.prefix, role=Role(token.role),
                     user=token.user.name if token.user else None, node=node_name,
                     created_by=token.created_by, created_at=token.created_at,
                     expires_at=token.expires_at, revoked_at=token.revoked_at,
                     last_used_at=token.last_used_at)


def create_token(session: Session, principal: Principal, body: TokenCreate, now: datetime,
                 default_ttl_days: int) -> TokenIssued:
    principal.require(Action.MANAGE_TOKENS)
    user = None
    if body.user is not None:
        user = get_user(session, body.user)
        if body.role is not None and body.role.value != user.role:
            raise InvalidInput(f"a token for user '{user.name}' carries the user's role "
                               f"'{user.role}', not '{body.role}'", code="role_mismatch")
        role = Role(user.role)
    elif body.role is None:
        raise InvalidInput("name a role or a user for the token", code="role_required")
    else:
        role = body.role
    if role is Role.AGENT:
        raise InvalidInput("agent tokens are issued by node registration, not by hand; "
                           "create a join token instead", code="agent_token_by_hand")
    if role is Role.MEMBER and user is None:
        raise InvalidInput("a member token must belong to a user (its projects come from "
                           "the user's memberships)", code="member_needs_user")
    ttl = timedelta(days=body.expires_in_days or default_ttl_days)
    raw, token = issue_api_token(session, name=body.name, role=role, created_by=principal.actor,
                                 now=now, ttl=ttl, user=user)
    audit.record(session, at=now, actor=principal.actor, action="token.created",
                 subject_kind="token", subject=str(token.id), role=role.value, name=body.name)
    return TokenIssued(**token_view(token).model_dump(), token=raw)


@dataclass(frozen=True)
class TokenFilter:
    include_revoked: bool = False
    role: Role | None = None
    kind: TokenKind | None = None


def _token_conditions(f: TokenFilter) -> list:
    conditions = []
    if not f.include_revoked:
        conditions.append(ApiToken.revoked_at.is_(None))
    if f.role is not None:
        conditions.append(ApiToken.role == f.role.value)
    if f.kind is TokenKind.AGENT:  # node credentials are exactly the agent-role tokens
        conditions.append(ApiToken.role == Role.AGENT.value)
    elif f.kind is TokenKind.USER:
        conditions.append(ApiToken.role != Role.AGENT.value)
    return conditions


def list_tokens(session: Session, principal: Principal, f: TokenFilter, cursor: str | None,
                limit: int) -> Page[TokenView]:
    """Oldest first (by id): a token issued while someone pages lands on the last page."""
    principal.require(Action.MANAGE_TOKENS)
    query = (select(ApiToken, Node.name).outerjoin(Node, Node.id == ApiToken.node_id)
             .where(*_token_conditions(f)))
    rows, next_cursor = keyset_page(session, query, _BY_ID, cursor, limit)
    return Page[TokenView](items=[token_view(token, node_name) for token, node_name in rows],
                           next_cursor=next_cursor)


def revoke_token(session: Session, principal: Principal, token_id: int, now: datetime,
                 reason: str | None) -> TokenView:
    principal.require(Action.MANAGE_TOKENS)
    token = session.get(ApiToken, token_id)
    if token is None:
        raise not_found("token", token_id)
    if token.revoked_at is None:
        token.revoked_at = now
        audit.record(session, at=now, actor=principal.actor, action="token.revoked",
                     subject_kind="token", subject=str(token.id), reason=reason)
    return token_view(token)


def find_join_token(session: Session, raw: str, now: datetime) -> JoinToken:
    """The usable join token behind `raw`; single-use and expiring."""
    token = session.scalar(select(JoinToken).where(JoinToken.token_hash == hash_token(raw)))
    if token is None:
        raise Unauthenticated("unknown join token", code="invalid_token")
    if token.used_at is not None:
        raise Unauthenticated("this join token was already used; join tokens are single-use",
                              code="join_token_used")
    if token.expires_at <= now:
        raise Unauthenticated("this join token has expired", code="token_expired")
    return token
