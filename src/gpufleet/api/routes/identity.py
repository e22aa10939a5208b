"""Identity and ownership: tokens, join tokens, users, projects, the audit log."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from gpufleet.api.deps import PageRequest, page_limit, page_request, principal, services
from gpufleet.domain.access import AuditSubject, Role, TokenKind
from gpufleet.services.access.principal import Principal
from gpufleet.services.access.tokens import TokenFilter
from gpufleet.services.app import Gpufleet
from gpufleet.wire.base import Page
from gpufleet.wire.inventory import (
    AuditEventView,
    JoinTokenCreate,
    JoinTokensIssued,
    ProjectCreate,
    ProjectMemberAdd,
    ProjectView,
    ReasonBody,
    TokenCreate,
    TokenIssued,
    TokenView,
    UserCreate,
    UserView,
    WhoAmI,
)

router = APIRouter(prefix="/api/v1")


@router.get("/whoami", response_model=WhoAmI, tags=["identity"])
def whoami(p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    return gf.whoami(p)


@router.post("/tokens", response_model=TokenIssued, status_code=201, tags=["identity"])
def create_token(body: TokenCreate, p: Principal = Depends(principal),
                 gf: Gpufleet = Depends(services)):
    """Issue an API token; the secret is in this reply only."""
    return gf.create_token(p, body)


@router.get("/tokens", response_model=Page[TokenView], tags=["identity"])
def list_tokens(include_revoked: bool = False,
                role: Role | None = Query(default=None, description="Only tokens of this role."),
                kind: TokenKind | None = Query(default=None, description=(
                    "`agent`: node credentials (one per registered node); `user`: tokens "
                    "for people and automation.")),
                page: PageRequest = Depends(page_request), p: Principal = Depends(principal),
                gf: Gpufleet = Depends(services)):
    """API tokens, oldest first: their prefixes, never their secrets."""
    return gf.list_tokens(p, TokenFilter(include_revoked=include_revoked, role=role, kind=kind),
                          page.cursor, page.limit)


@router.post("/tokens/{token_id}/revoke", response_model=TokenView, tags=["identity"])
def revoke_token(token_id: int, body: ReasonBody | None = None,
                 p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    return gf.revoke_token(p, token_id, body.reason if body else None)


@router.post("/join-tokens", response_model=JoinTokensIssued, status_code=201,
             tags=["identity"])
def create_join_tokens(body: JoinTokenCreate, p: Principal = Depends(principal),
                       gf: Gpufleet = Depends(services)):
    """Single-use, expiring tokens that each let one agent register one node."""
    return gf.create_join_tokens(p, body)


@router.get("/users", response_model=Page[UserView], tags=["identity"])
def list_users(page: PageRequest = Depends(page_request), p: Principal = Depends(principal),
               gf: Gpufleet = Depends(services)):
    """Users by name."""
    return gf.list_users(p, page.cursor, page.limit)


@router.post("/users", response_model=UserView, status_code=201, tags=["identity"])
def create_user(body: UserCreate, p: Principal = Depends(principal),
                gf: Gpufleet = Depends(services)):
    return gf.create_user(p, body)


@router.get("/projects", response_model=Page[ProjectView], tags=["projects"])
def list_projects(page: PageRequest = Depends(page_request), p: Principal = Depends(principal),
                  gf: Gpufleet = Depends(services)):
    """All projects by name; members see only their own."""
    return gf.list_projects(p, page.cursor, page.limit)


@router.post("/projects", response_model=ProjectView, status_code=201, tags=["projects"])
def create_project(body: ProjectCreate, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    return gf.create_project(p, body)


@router.get("/projects/{name}", response_model=ProjectView, tags=["projects"])
def show_project(name: str, p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    return gf.show_project(p, name)


@router.post("/projects/{name}/members", response_model=ProjectView, status_code=201,
             tags=["projects"])
def add_project_member(name: str, body: ProjectMemberAdd, p: Principal = Depends(principal),
                       gf: Gpufleet = Depends(services)):
    return gf.add_project_member(p, name, body)


@router.get("/audit-events", response_model=Page[AuditEventView], tags=["audit"])
def audit_events(subject_kind: AuditSubject | None = None, subject: str | None = None,
                 action: str | None = None,
                 cursor: str | None = Query(default=None,
                                            description="`next_cursor` of the previous page"),
                 limit: int | None = None, p: Principal = Depends(principal),
                 gf: Gpufleet = Depends(services)):
    """The append-only audit log, newest first."""
    return gf.audit_events(p, subject_kind=subject_kind, subject=subject, action=action,
                           cursor=cursor, limit=page_limit(limit, gf))
