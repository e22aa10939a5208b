"""Who may do what (docs/design.md, "Security"): roles, the actions they are granted, and scoping.

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
    READ_SERVER_SETTINGS = "server_settings:read"
    READ_FLEET_METRICS = "metrics:read"
    READ_EVENTS = "events:read"
    MANAGE_EVENT_SUBSCRIPTIONS = "event_subscriptions:manage"
    READ_ALERTS = "alerts:read"
    MANAGE_ALERTS = "alerts:manage"
    READ_RECLAIM = "reclaim:read"
    MANAGE_RECLAIM = "reclaim:manage"
    READ_RECEIVERS = "receivers:read"
    MANAGE_RECEIVERS = "receivers:manage"
    READ_NOTIFICATIONS = "notifications:read"
    READ_ALERT_RULES = "alert_rules:read"
    MANAGE_ALERT_RULES = "alert_rules:manage"
    READ_BILLING_RATES = "billing_rates:read"
    MANAGE_BILLING_RATES = "billing_rates:manage"
    LINK_CHAT_IDENTITY = "chat_identity:link"
    READ_CHAT_IDENTITIES = "chat_identities:read"
    MANAGE_CHAT_IDENTITIES = "chat_identities:manage"
    READ_BILLING_STATEMENTS = "billing_statements:read"


# How a refusal says what was refused: "role 'member' may not approve requests".
ACTION_PHRASES: dict[Action, str] = {
    Action.READ_INVENTORY: "read the inventory",
    Action.MANAGE_INVENTORY: "manage the inventory",
    Action.CREATE_JOIN_TOKEN: "create join tokens",
    Action.READ_PROJECTS: "read projects",
    Action.MANAGE_PROJECTS: "manage projects",
    Action.READ_USERS: "read users",
    Action.MANAGE_USERS: "manage users",
    Action.MANAGE_TOKENS: "manage tokens",
    Action.READ_AUDIT: "read the audit log",
    Action.AGENT_HEARTBEAT: "heartbeat as a node's agent",
    Action.WRITE_TELEMETRY: "write telemetry",
    Action.WHOAMI: "ask who it is",
    Action.READ_REQUESTS: "read requests",
    Action.REQUEST_GPUS: "request GPUs",
    Action.APPROVE_REQUESTS: "approve requests",
    Action.MANAGE_QUOTAS: "manage quotas",
    Action.READ_SERVER_SETTINGS: "read the server's settings",
    Action.READ_FLEET_METRICS: "read the fleet's /metrics",
    Action.READ_EVENTS: "read events",
    Action.MANAGE_EVENT_SUBSCRIPTIONS: "manage event subscriptions",
    Action.READ_ALERTS: "read alerts and silences",
    Action.MANAGE_ALERTS: "acknowledge alerts or manage silences",
    Action.READ_RECLAIM: "read reclamation policies and reports",
    Action.MANAGE_RECLAIM: "manage reclamation (policies, exemptions, runs)",
    Action.READ_RECEIVERS: "read receivers and their delivery log",
    Action.MANAGE_RECEIVERS: "manage receivers",
    Action.READ_NOTIFICATIONS: "read its notifications",
    Action.READ_ALERT_RULES: "read alert rules",
    Action.MANAGE_ALERT_RULES: "manage alert rules",
    Action.READ_BILLING_RATES: "read rate cards",
    Action.MANAGE_BILLING_RATES: "manage rate cards",
    Action.LINK_CHAT_IDENTITY: "link a chat user to itself",
    Action.READ_CHAT_IDENTITIES: "read chat identities",
    Action.MANAGE_CHAT_IDENTITIES: "link or unlink other people's chat users",
    Action.READ_BILLING_STATEMENTS: "read billing statements",
}


class TokenKind(StrEnum):
    """Who an API token is for: `token ls --kind` separates the node credentials, one per
    node and so as many as the fleet has nodes, from the tokens of people and automation."""

    AGENT = "agent"  # a node's credential, issued by registration (role agent)
    USER = "user"    # a person's or a service's token, issued by `token create`


class AuditSubject(StrEnum):
    """What an audit event is about: the kinds `gpufleet audit ls --subject-kind` takes."""

    ENVIRONMENT = "environment"
    NODE = "node"
    GPU = "gpu"
    TOKEN = "token"
    USER = "user"
    PROJECT = "project"
    REQUEST = "request"
    POOL = "pool"
    EVENT_SUBSCRIPTION = "event_subscription"
    ALERT = "alert"
    SILENCE = "silence"
    RECLAIM_POLICY = "reclaim_policy"
    RECEIVER = "receiver"
    ALERT_RULE = "alert_rule"
    BILLING_RATE = "billing_rate"
    CHAT_IDENTITY = "chat_identity"


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
    # Where the server keeps its data and how it is tuned: the administrator's business.
    Action.READ_SERVER_SETTINGS: frozenset({Role.ADMIN}),
    # The server's /metrics is for monitoring (a viewer token): it shows every project's
    # allocations and the fleet's requests, which members may not see, so they get none.
    Action.READ_FLEET_METRICS: frozenset({Role.ADMIN, Role.OPERATOR, Role.VIEWER}),
    # Readers see the events of the projects they see; events about no project (tokens,
    # nodes, users) are the operators' (services/operations/events.py).
    Action.READ_EVENTS: frozenset(_READERS),
    # A subscription sends events of every project to a URL: the operators' business.
    Action.MANAGE_EVENT_SUBSCRIPTIONS: frozenset(_OPERATORS),
    # Members read their projects' alerts (and fleet-wide ones); operators act on them.
    Action.READ_ALERTS: frozenset(_READERS),
    Action.MANAGE_ALERTS: frozenset(_OPERATORS),
    # Reclamation: everyone who reads reads it (members their own projects' part); only
    # operators set policies, grant exemptions and run a round (owners may ask: REQUEST_GPUS).
    Action.READ_RECLAIM: frozenset(_READERS),
    Action.MANAGE_RECLAIM: frozenset(_OPERATORS),
    # Receivers hold secrets and decide who hears what: administrators write them;
    # operators read them (secrets masked) and their delivery log to see what failed.
    Action.READ_RECEIVERS: frozenset(_OPERATORS),
    Action.MANAGE_RECEIVERS: frozenset({Role.ADMIN}),
    # Every person reads their own inbox (the services show only the caller's messages).
    Action.READ_NOTIFICATIONS: frozenset(_READERS),
    # Alert rules (docs/operations.md, "Alert rules"): everyone reads, operators write.
    Action.READ_ALERT_RULES: frozenset(_READERS),
    Action.MANAGE_ALERT_RULES: frozenset(_OPERATORS),
    # Rate cards (docs/billing.md): prices are no secret, so every reader sees them (what a
    # project spent is: statements are scoped); only administrators set or end a price.
    Action.READ_BILLING_RATES: frozenset(_READERS),
    Action.MANAGE_BILLING_RATES: frozenset({Role.ADMIN}),
    # Chat-ops (docs/chatops.md, "Identity"): a person links their own chat user (the
    # service refuses a token without a user); operators see who is who; admins link others.
    Action.LINK_CHAT_IDENTITY: frozenset(_READERS),
    Action.READ_CHAT_IDENTITIES: frozenset(_OPERATORS),
    Action.MANAGE_CHAT_IDENTITIES: frozenset({Role.ADMIN}),
    # Statements: every reader, a member scoped to their own projects (services/billing).
    Action.READ_BILLING_STATEMENTS: frozenset(_READERS),
}


def is_allowed(role: Role, action: Action) -> bool:
    return role in GRANTS[action]


def sees_all_projects(role: Role) -> bool:
    """Members see their own projects' allocation details only; every other reader sees all."""
    return role is not Role.MEMBER
