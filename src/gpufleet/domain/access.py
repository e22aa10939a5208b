"""Who may do what (DESIGN.md §8): roles, the actions they are granted, and scoping.

The table is data so the role × endpoint test matrix and the docs read the same source the
API enforces. Scoping (a member sees only their projects; an agent writes only its node) is
applied by the services on top of this coarse grant.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"
    OPERATOR = "operator"
    MEMBER = "member"
    VIEWER = "viewer"
    AGENT = "agent"
    INGEST = "ingest"


class Action(StrEnum):
    READ_INVENTORY = "inventory:read"
    MANAGE_INVENTORY = "inventory:manage"
    CREATE_JOIN_TOKEN = "join_token:create"
    READ_PROJECTS = "projects:read"
    MANAGE_PROJECTS = "projects:manage"
    READ_USERS = "users:read"
    MANAGE_USERS = "users:manage"
    MANAGE_TOKENS = "tokens:manage"
    READ_AUDIT = "audit:read"
    AGENT_HEARTBEAT = "agent:heartbeat"
    WRITE_TELEMETRY = "telemetry:write"
    WHOAMI = "whoami"
    READ_REQUESTS = "requests:read"
    REQUEST_GPUS = "requests:create"
    APPROVE_REQUESTS = "requests:approve"
    MANAGE_QUOTAS = "quotas:manage"
    READ_FLEET_METRICS = "metrics:read"


_READERS = {Role.ADMIN, Role.OPERATOR, Role.MEMBER, Role.VIEWER}
_OPERATORS = {Role.ADMIN, Role.OPERATOR}

GRANTS: dict[Action, frozenset[Role]] = {
    Action.READ_INVENTORY: frozenset(_READERS),
    Action.MANAGE_INVENTORY: frozenset(_OPERATORS),
    Action.CREATE_JOIN_TOKEN: frozenset(_OPERATORS),
    Action.READ_PROJECTS: frozenset(_READERS),
    Action.MANAGE_PROJECTS: frozenset(_OPERATORS),
    Action.READ_USERS: frozenset(_OPERATORS),
    Action.MANAGE_USERS: frozenset({Role.ADMIN}),
    Action.MANAGE_TOKENS: frozenset({Role.ADMIN}),
    Action.READ_AUDIT: frozenset(_OPERATORS),
    Action.AGENT_HEARTBEAT: frozenset({Role.AGENT}),
    Action.WRITE_TELEMETRY: frozenset({Role.AGENT, Role.INGEST}),
    Action.WHOAMI: frozenset(Role),
    Action.READ_REQUESTS: frozenset(_READERS),
    # Viewers read; members request for their own projects (the services scope them).
    Action.REQUEST_GPUS: frozenset({Role.ADMIN, Role.OPERATOR, Role.MEMBER}),
    Action.APPROVE_REQUESTS: frozenset(_OPERATORS),
    Action.MANAGE_QUOTAS: frozenset(_OPERATORS),
    # The server's /metrics is for monitoring (a viewer token): it shows every project's
    # allocations and the fleet's requests, which members may not see, so they get none.
    Action.READ_FLEET_METRICS: frozenset({Role.ADMIN, Role.OPERATOR, Role.VIEWER}),
}


def is_allowed(role: Role, action: Action) -> bool:
    return role in GRANTS[action]


def sees_all_projects(role: Role) -> bool:
    """Members see their own projects' allocation details only; every other reader sees all."""
    return role is not Role.MEMBER
