"""Users, projects and membership: who owns GPUs and who may see which allocations."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from gpufleet.domain.access import Action
from gpufleet.domain.errors import Conflict, Forbidden
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.lookup import not_found, one_where
from gpufleet.services.paging import SortSpec, keyset_page
from gpufleet.store.tables import Project, ProjectMember, User
from gpufleet.wire.base import Page
from gpufleet.wire.inventory import (
    ProjectCreate,
    ProjectMemberAdd,
    ProjectView,
    UserCreate,
    UserView,
)

_USERS_BY_NAME = SortSpec((User.name,))
_PROJECTS_BY_NAME = SortSpec((Project.name,))


def get_user(session: Session, name: str) -> User:
    return one_where(session, User, User.name == name, "user", name)


def _user_view(session: Session, user: User) -> UserView:
    projects = session.scalars(select(Project.name).join(ProjectMember)
                               .where(ProjectMember.user_id == user.id)
                               .order_by(Project.name)).all()
    return UserView(name=user.name, role=user.role, display_name=user.display_name,
                    email=user.email, created_at=user.created_at, projects=list(projects))


def create_user(session: Session, principal: Principal, body: UserCreate,
                now: datetime) -> UserView:
    principal.require(Action.MANAGE_USERS)
    if session.scalar(select(User.id).where(User.name == body.name)) is not None:
        raise Conflict(f"user '{body.name}' already exists", code="user_exists",
                       details={"user": body.name})
    user = User(name=body.name, role=body.role.value, display_name=body.display_name,
                email=body.email, created_at=now)
    session.add(user)
    session.flush()
    audit.record(session, at=now, actor=principal.actor, action="user.created",
                 subject_kind="user", subject=body.name, role=body.role.value)
    return _user_view(session, user)


def list_users(session: Session, principal: Principal, cursor: str | None,
               limit: int) -> Page[UserView]:
    principal.require(Action.READ_USERS)
    rows, next_cursor = keyset_page(session, select(User), _USERS_BY_NAME, cursor, limit)
    return Page[UserView](items=[_user_view(session, user) for (user,) in rows],
                          next_cursor=next_cursor)


def get_project(session: Session, name: str) -> Project:
    return one_where(session, Project, Project.name == name, "project", name)


def _project_view(project: Project) -> ProjectView:
    return ProjectView(name=project.name, organisation=project.organisation,
                       department=project.department, cost_centre=project.cost_centre,
                       description=project.description, created_at=project.created_at,
                       members=sorted(m.user.name for m in project.members))


def _visible(principal: Principal, project_name: str) -> bool:
    return principal.sees_project(project_name)


def require_member(principal: Principal, project: Project) -> None:
    """Members act only for their own projects (operators and admins for any)."""
    if not _visible(principal, project.name):
        raise Forbidden(f"you are not a member of project '{project.name}'",
                        code="not_a_member", details={"project": project.name})


def create_project(session: Session, principal: Principal, body: ProjectCreate,
                   now: datetime) -> ProjectView:
    principal.require(Action.MANAGE_PROJECTS)
    if session.scalar(select(Project.id).where(Project.name == body.name)) is not None:
        raise Conflict(f"project '{body.name}' already exists", code="project_exists",
                       details={"project": body.name})
    project = Project(name=body.name, organisation=body.organisation,
                      department=body.department, cost_centre=body.cost_centre,
                      description=body.description, created_at=now)
    session.add(project)
    session.flush()
    audit.record(session, at=now, actor=principal.actor, action="project.created",
                 subject_kind="project", subject=body.name, organisation=body.organisation,
                 cost_centre=body.cost_centre)
    return _project_view(project)


def list_projects(session: Session, principal: Principal, cursor: str | None,
                  limit: int) -> Page[ProjectView]:
    """Every project for operators and viewers; a member's own projects for members
    (filtered in the query, so a member's pages are full pages of their projects)."""
    principal.require(Action.READ_PROJECTS)
    query = select(Project).options(selectinload(Project.members))
    if principal.visible_projects is not None:
        query = query.where(Project.name.in_(principal.visible_projects or {""}))
    rows, next_cursor = keyset_page(session, query, _PROJECTS_BY_NAME, cursor, limit)
    return Page[ProjectView](items=[_project_view(project) for (project,) in rows],
                             next_cursor=next_cursor)


def show_project(session: Session, principal: Principal, name: str) -> ProjectView:
    principal.require(Action.READ_PROJECTS)
    if not _visible(principal, name):
        # Same answer as for a project that does not exist: members learn nothing of others.
        raise not_found("project", name)
    return _project_view(get_project(session, name))


def add_member(session: Session, principal: Principal, project_name: str,
               body: ProjectMemberAdd, now: datetime) -> ProjectView:
    principal.require(Action.MANAGE_PROJECTS)
    project = get_project(session, project_name)
    user = get_user(session, body.user)
    if any(m.user_id == user.id for m in project.members):
        raise Conflict(f"user '{user.name}' is already a member of '{project.name}'",
                       code="already_member", details={"user": user.name,
                                                       "project": project.name})
    member = ProjectMember(project_id=project.id, user_id=user.id, added_at=now)
    member.user = user
    project.members.append(member)
    audit.record(session, at=now, actor=principal.actor, action="project.member_added",
                 subject_kind="project", subject=project.name, user=user.name)
    session.flush()
    return _project_view(project)
