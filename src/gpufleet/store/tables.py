"""The state store's tables (SQLAlchemy 2 declarative). Migrations live in `migrations/`.

Status columns that the domain derives (`nodes.status`, `gpus.status`) are cached here so
that grouping 100,000 GPUs by environment × model × status reads one covering index; the
services recompute them through `gpufleet.domain.inventory` whenever an input changes.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Double,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from gpufleet.store.types import Id, Money, UtcDateTime

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Environment(Base):
    __tablename__ = "environments"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    provider: Mapped[str | None] = mapped_column(String(63))
    region: Mapped[str | None] = mapped_column(String(63))
    default_sharing_mode: Mapped[str] = mapped_column(String(16))
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(253), unique=True)
    machine_id: Mapped[str] = mapped_column(String(128), unique=True)
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"), index=True)
    cpu_cores: Mapped[int] = mapped_column(Integer)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    admin_state: Mapped[str] = mapped_column(String(16))
    reachable: Mapped[bool] = mapped_column(Boolean)
    status: Mapped[str] = mapped_column(String(16), index=True)
    agent_version: Mapped[str | None] = mapped_column(String(63))
    os_name: Mapped[str | None] = mapped_column(String(127))
    driver_version: Mapped[str | None] = mapped_column(String(63))
    cuda_version: Mapped[str | None] = mapped_column(String(31))
    registered_at: Mapped[datetime] = mapped_column(UtcDateTime)
    last_seen_at: Mapped[datetime | None] = mapped_column(UtcDateTime, index=True)
    desired_state_version: Mapped[int] = mapped_column(BigInteger, default=1)
    status_reason: Mapped[str | None] = mapped_column(Text)
    # False: its backend cannot change MIG layouts; placement keeps its layouts as they are
    applies_mig_plans: Mapped[bool] = mapped_column(Boolean, default=True)

    environment: Mapped[Environment] = relationship(lazy="joined")
    labels: Mapped[list[NodeLabel]] = relationship(cascade="all, delete-orphan",
                                                   lazy="selectin")


class NodeLabel(Base):
    __tablename__ = "node_labels"

    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"),
                                         primary_key=True)
    key: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))

    __table_args__ = (Index("ix_node_labels_key_value", "key", "value"),)


class Gpu(Base):
    __tablename__ = "gpus"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(64), unique=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"))
    index: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(127))
    model_known: Mapped[bool] = mapped_column(Boolean)
    reported_name: Mapped[str] = mapped_column(String(127))
    pci_device_id: Mapped[int | None] = mapped_column(BigInteger)
    pci_bus_id: Mapped[str | None] = mapped_column(String(32))
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    driver_version: Mapped[str | None] = mapped_column(String(63))
    sharing_mode: Mapped[str] = mapped_column(String(16))
    nvlink_peers: Mapped[list[str] | None] = mapped_column(JSON)
    health: Mapped[str] = mapped_column(String(16))
    health_reason: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    allocated: Mapped[bool] = mapped_column(Boolean, default=False)
    # shared mode: milli-GPU held by open bindings; raised only by a conditional update
    used_milli: Mapped[int] = mapped_column(Integer, default=0)
    # The binding guard (services/lifecycle/bindings.py): how many bindings are open on the
    # GPU and their kind; a binding of another kind is refused by a conditional update.
    open_bindings: Mapped[int] = mapped_column(Integer, default=0)
    bound_kind: Mapped[str | None] = mapped_column(String(16))
    # The mode its node reports while bindings of `sharing_mode` are open; applied when the
    # last one ends (docs/lifecycle.md, "Sharing-mode changes under open bindings").
    pending_sharing_mode: Mapped[str | None] = mapped_column(String(16))
    # MIG instances its node saw but could not identify: the layout known is incomplete
    mig_instances_unread: Mapped[int] = mapped_column(Integer, default=0)
    first_seen_at: Mapped[datetime] = mapped_column(UtcDateTime)

    node: Mapped[Node] = relationship(lazy="raise")
    labels: Mapped[list[GpuLabel]] = relationship(cascade="all, delete-orphan",
                                                  lazy="selectin")
    mig_instances: Mapped[list[MigInstance]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="MigInstance.placement_start")

    __table_args__ = (
        # fleet summary: environment × model × status straight from the index
        Index("ix_gpus_summary", "environment_id", "model", "status"),
        Index("ix_gpus_node_index", "node_id", "index"),
        Index("ix_gpus_model_uuid", "model", "uuid"),
        Index("ix_gpus_status_uuid", "status", "uuid"),
        Index("ix_gpus_health_uuid", "health", "uuid"),
        Index("ix_gpus_environment_uuid", "environment_id", "uuid"),
    )


class GpuLabel(Base):
    """A label on a GPU. `allocation` / `project` may carry several values at once (the
    allocations holding MIG instances or fractions of one GPU), so the value is in the key."""

    __tablename__ = "gpu_labels"

    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"),
                                        primary_key=True)
    key: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[str] = mapped_column(String(255), primary_key=True)

    __table_args__ = (Index("ix_gpu_labels_key_value", "key", "value"),)


class MigInstance(Base):
    """A GPU instance, keyed by (parent GPU, profile id, placement start) — docs/design.md,
    "Concepts".

    The MIG device UUID and the driver's instance ids change when instances are recreated,
    so they are attributes. A source without placements (dcgm-exporter) leaves the start
    empty; such rows are identified by their driver instance id until a richer source
    reports.
    """

    __tablename__ = "mig_instances"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"))
    profile_id: Mapped[int] = mapped_column(Integer)
    placement_start: Mapped[int | None] = mapped_column(Integer)
    placement_size: Mapped[int | None] = mapped_column(Integer)
    profile_name: Mapped[str] = mapped_column(String(63))
    mig_uuid: Mapped[str | None] = mapped_column(String(80))
    gpu_instance_id: Mapped[int | None] = mapped_column(Integer)
    compute_instance_id: Mapped[int | None] = mapped_column(Integer)
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # The instance's own health (`healthy`, `suspect`, `quarantined`): a fault NVIDIA
    # confines to one GPU instance (a contained XID 94) takes only it out. It follows the
    # row's key, so an instance recreated at the same place keeps it; the parent GPU's
    # health still rules over every instance (docs/operations.md, "MIG instances").
    health: Mapped[str] = mapped_column(String(16), default="healthy")
    health_reason: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (UniqueConstraint("gpu_id", "profile_id", "placement_start",
                                       name="uq_mig_instances_key"),)


class GpuMoveApproval(Base):
    """An operator's consent for a GPU UUID to move to a node that is not its current one."""

    __tablename__ = "gpu_move_approvals"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    gpu_uuid: Mapped[str] = mapped_column(String(64), index=True)
    to_node_name: Mapped[str] = mapped_column(String(253))
    approved_by: Mapped[str] = mapped_column(String(127))
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    display_name: Mapped[str | None] = mapped_column(String(127))
    email: Mapped[str | None] = mapped_column(String(254))
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    organisation: Mapped[str] = mapped_column(String(127))
    department: Mapped[str | None] = mapped_column(String(127))
    cost_centre: Mapped[str | None] = mapped_column(String(63))
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)

    # Loaded when asked for (listings use selectinload): a project is read with every
    # request and binding, which mostly do not need its members.
    members: Mapped[list[ProjectMember]] = relationship(cascade="all, delete-orphan")


class ProjectMember(Base):
    __tablename__ = "project_members"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                         primary_key=True, index=True)
    added_at: Mapped[datetime] = mapped_column(UtcDateTime)

    user: Mapped[User] = relationship(lazy="joined")


class ApiToken(Base):
    """A bearer token. Only its SHA-256 is stored; `prefix` lets people tell tokens apart."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(127))
    role: Mapped[str] = mapped_column(String(16))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), index=True)
    node_id: Mapped[int | None] = mapped_column(ForeignKey("nodes.id"), index=True)
    created_by: Mapped[str] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    user: Mapped[User | None] = relationship(lazy="joined")


class JoinToken(Base):
    """Single-use, expiring permission for one agent to register one node."""

    __tablename__ = "join_tokens"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"))
    description: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    used_by_node_id: Mapped[int | None] = mapped_column(ForeignKey("nodes.id"))

    environment: Mapped[Environment] = relationship(lazy="joined")


class AuditEvent(Base):
    """Append-only record of every state change: who, when, what, why."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    actor: Mapped[str] = mapped_column(String(127))
    action: Mapped[str] = mapped_column(String(63), index=True)
    subject_kind: Mapped[str] = mapped_column(String(31))
    subject: Mapped[str] = mapped_column(String(253))
    reason: Mapped[str | None] = mapped_column(Text)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Stamped as the event is written, so it reads as an event (docs/operations.md,
    # "Events"): the project it concerns (members see their projects' events) and its
    # labels (environment, node, gpu, allocation, project, …). None before migration 0007.
    project: Mapped[str | None] = mapped_column(String(63))
    labels: Mapped[dict[str, str] | None] = mapped_column(JSON)
    # The event's place in the event log, given at commit in commit order (the id is given
    # at insert, and on PostgreSQL two transactions may commit out of id order): a reader
    # resuming after position N never misses an event that commits later with a smaller
    # id. None only inside the writing transaction (services/operations/event_publisher).
    seq: Mapped[int | None] = mapped_column(BigInteger, unique=True)

    __table_args__ = (Index("ix_audit_events_subject", "subject_kind", "subject"),
                      Index("ix_audit_events_project", "project", "seq"))


class Quota(Base):
    """The most a project may hold at once of one flavour (docs/design.md, "Concepts"), in
    milli-units."""

    __tablename__ = "quotas"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            primary_key=True)
    flavour: Mapped[str] = mapped_column(String(127), primary_key=True)
    limit_milli: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_by: Mapped[str] = mapped_column(String(127))


class AutoApprovePolicy(Base):
    """Requests of a project at most this large and this long are approved without an operator."""

    __tablename__ = "auto_approve_policies"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            primary_key=True)
    max_milli: Mapped[int] = mapped_column(BigInteger)
    max_duration_s: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_by: Mapped[str] = mapped_column(String(127))


class Pool(Base):
    """Logical capacity (flavour × count) dedicated to one project once approved."""

    __tablename__ = "pools"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), index=True)
    flavour: Mapped[str] = mapped_column(String(127))
    count: Mapped[int] = mapped_column(Integer)
    unit_milli: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), index=True)
    justification: Mapped[str | None] = mapped_column(Text)
    requested_by: Mapped[str] = mapped_column(String(127))
    requested_at: Mapped[datetime] = mapped_column(UtcDateTime)
    decided_by: Mapped[str | None] = mapped_column(String(127))
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    decision_reason: Mapped[str | None] = mapped_column(Text)
    approved_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # billing starts here
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # ... and stops here
    ended_by: Mapped[str | None] = mapped_column(String(127))
    end_reason: Mapped[str | None] = mapped_column(Text)

    project: Mapped[Project] = relationship(lazy="joined")


class GpuRequest(Base):
    """A ticket for GPU units: flavour × count, host resources, topology, time window."""

    __tablename__ = "gpu_requests"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), index=True)
    requested_by: Mapped[str] = mapped_column(String(127))
    requester_user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    kind: Mapped[str] = mapped_column(String(16))
    models: Mapped[list[str] | None] = mapped_column(JSON)
    mig_profile: Mapped[str | None] = mapped_column(String(63))
    milli: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    cpu_milli_per_unit: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib_per_unit: Mapped[int] = mapped_column(Integer, default=0)
    same_node: Mapped[bool] = mapped_column(Boolean, default=False)
    nvlink: Mapped[bool] = mapped_column(Boolean, default=False)
    environment: Mapped[str | None] = mapped_column(String(63))
    starts_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ends_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    duration_s: Mapped[int | None] = mapped_column(BigInteger)
    justification: Mapped[str | None] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), index=True)
    wait_code: Mapped[str | None] = mapped_column(String(63))
    wait_message: Mapped[str | None] = mapped_column(Text)
    needs_operator: Mapped[bool] = mapped_column(Boolean, default=False)
    pool_id: Mapped[int | None] = mapped_column(ForeignKey("pools.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    decided_by: Mapped[str | None] = mapped_column(String(127))
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    activated_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    closed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    project: Mapped[Project] = relationship(lazy="joined")

    __table_args__ = (Index("ix_gpu_requests_state_ends", "state", "ends_at"),)
    # Every UPDATE of a request says `WHERE state = <the state it was read in>`: two
    # server replicas (or two threads) acting on one request — a grant racing a cancel, two
    # approvals, a release racing the expiry — cannot both win; the later one's flush
    # finds no row and its transaction ends in a 409 `concurrent_update` (StateStore).
    __mapper_args__ = {"version_id_col": state, "version_id_generator": False}


class Binding(Base):
    """One unit held by one allocation over [started_at, ended_at) — history, never rewritten.

    A unit is a whole GPU, a MIG instance (GPU, profile id, placement start) or `milli` of a
    shared GPU; several bindings may be open at once on one shared or MIG GPU.
    """

    __tablename__ = "bindings"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    request_id: Mapped[int] = mapped_column(ForeignKey("gpu_requests.id"), index=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    mig_profile_id: Mapped[int | None] = mapped_column(Integer)
    mig_start: Mapped[int | None] = mapped_column(Integer)
    milli: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    end_reason: Mapped[str | None] = mapped_column(String(31))

    gpu: Mapped[Gpu] = relationship(lazy="raise")  # unit_views joins what it needs

    __table_args__ = (Index("ix_bindings_gpu_ended", "gpu_id", "ended_at"),)


class SlotClaim(Base):
    """The database's guarantee that no unit is held twice (docs/design.md, "Placement").

    One row per held slot: slot -1 is a whole GPU, slots 0..7 are the memory slices of a MIG
    GPU. The primary key makes a second claim of the same slot fail on SQLite and PostgreSQL
    alike; release deletes the claim, the binding keeps the history.
    """

    __tablename__ = "slot_claims"

    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"),
                                        primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    binding_id: Mapped[int] = mapped_column(ForeignKey("bindings.id"))


class MigPlan(Base):
    """The MIG layout a GPU is to have: (profile id, placement start) pairs, for its agent."""

    __tablename__ = "mig_plans"

    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"),
                                        primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"), index=True)
    layout: Mapped[list[list[int]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    request_id: Mapped[int | None] = mapped_column(ForeignKey("gpu_requests.id"))


class Receiver(Base):
    """Where notifications go: a Slack channel, an e-mail address, a webhook, an
    Alertmanager, or the users' own inbox (docs/operations.md, "Receivers").

    A receiver takes the notifications whose labels its `matchers` match, at `min_severity`
    or above, of the `kinds` it lists (empty: every kind but `event.*`). With `tells_owners` it also
    takes, addressed to each of them, the notifications that name owners.
    `broadcast` False: it takes only those addressed to owners."""

    __tablename__ = "receivers"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    kind: Mapped[str] = mapped_column(String(31))
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    matchers: Mapped[list[str]] = mapped_column(JSON, default=list)
    kinds: Mapped[list[str]] = mapped_column(JSON, default=list)
    min_severity: Mapped[str] = mapped_column(String(16))
    broadcast: Mapped[bool] = mapped_column(Boolean, default=True)
    tells_owners: Mapped[bool] = mapped_column(Boolean, default=False)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_by: Mapped[str] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class OutboxMessage(Base):
    """One notification for one receiver (and one recipient), written in the transaction
    that caused it and delivered at least once (docs/operations.md, "The outbox").

    `idempotency_key` is unique: the same notification is never queued twice for the same
    receiver and recipient, and receivers that can de-duplicate are given it."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    receiver_id: Mapped[int] = mapped_column(ForeignKey("receivers.id", ondelete="CASCADE"),
                                             index=True)
    recipient: Mapped[str | None] = mapped_column(String(63), index=True)
    idempotency_key: Mapped[str] = mapped_column(String(255), unique=True)
    kind: Mapped[str] = mapped_column(String(63))
    severity: Mapped[str] = mapped_column(String(16))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UtcDateTime)
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    abandoned_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)

    receiver: Mapped[Receiver] = relationship(lazy="joined")

    # The sender's one question: what is due now? Undelivered rows by due time.
    __table_args__ = (Index("ix_outbox_due", "delivered_at", "abandoned_at",
                            "next_attempt_at"),)


class OutboxDelivery(Base):
    """One delivery attempt: the per-receiver delivery log."""

    __tablename__ = "outbox_deliveries"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("outbox.id", ondelete="CASCADE"),
                                            index=True)
    receiver_id: Mapped[int] = mapped_column(ForeignKey("receivers.id", ondelete="CASCADE"),
                                             index=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    attempt: Mapped[int] = mapped_column(Integer)
    ok: Mapped[bool] = mapped_column(Boolean)
    outcome: Mapped[str] = mapped_column(String(63))
    detail: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[int] = mapped_column(Integer)
    # The receiver's own status code (HTTP, SMTP), where it answered one (migration 0010).
    status: Mapped[int | None] = mapped_column(Integer)


class Alert(Base):
    """One alert: a rule's condition on one series, de-duplicated by fingerprint, through
    its episodes pending → firing → resolved (docs/operations.md, "Alert lifecycle").

    `labels`: the identifying labels and those read from the binding intervals
    (allocation, project, owner); `projects_key` is `,vision,speech,` for the projects it
    names (a shared GPU has several), so a member's listing filters in SQL.
    `notified_state` / `notified_at`: what people last heard, and when (repeats, settle).
    """

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(32), unique=True)
    rule: Mapped[str] = mapped_column(String(127), index=True)
    severity: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    annotations: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    group_key: Mapped[str] = mapped_column(String(255))
    environment: Mapped[str | None] = mapped_column(String(63))
    projects_key: Mapped[str | None] = mapped_column(Text)
    owners: Mapped[list[str]] = mapped_column(JSON, default=list)
    state: Mapped[str] = mapped_column(String(16))
    active_since: Mapped[datetime] = mapped_column(UtcDateTime)
    fired_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    resolved_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_seen_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_value: Mapped[float | None] = mapped_column(Double)
    evidence: Mapped[str] = mapped_column(Text, default="")
    state_changes: Mapped[list[str]] = mapped_column(JSON, default=list)
    flapping: Mapped[bool] = mapped_column(Boolean, default=False)
    silenced_by: Mapped[list[int]] = mapped_column(JSON, default=list)
    silenced: Mapped[bool] = mapped_column(Boolean, default=False)
    acked_by: Mapped[str | None] = mapped_column(String(127))
    acked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ack_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ack_comment: Mapped[str | None] = mapped_column(Text)
    notified_state: Mapped[str | None] = mapped_column(String(16))
    notified_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)

    # The evaluation's one read: every alert that is live or owes a notification.
    __table_args__ = (Index("ix_alerts_state_notified", "state", "notified_state"),)


class AlertHistoryEntry(Base):
    """One thing that happened to an alert: a state change (pending, firing, resolved),
    flapping / settled, acknowledged, notified. Append-only."""

    __tablename__ = "alert_history"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"),
                                          index=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    event: Mapped[str] = mapped_column(String(31))
    actor: Mapped[str] = mapped_column(String(127))
    value: Mapped[float | None] = mapped_column(Double)
    detail: Mapped[str] = mapped_column(Text, default="")

    alert: Mapped[Alert] = relationship(lazy="joined")


class Silence(Base):
    """Mutes the alerts its matchers all match, over [starts_at, ends_at). Expiring one
    early sets `ends_at` to now, as Alertmanager does; the row stays as history."""

    __tablename__ = "silences"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    matchers: Mapped[list[str]] = mapped_column(JSON)
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    created_by: Mapped[str] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    comment: Mapped[str] = mapped_column(Text)
    expired_by: Mapped[str | None] = mapped_column(String(127))
# --- Reclamation (docs/operations.md, "Reclamation") ------------------------------------------
class ReclaimPolicyRow(Base):
    """What one environment or one project sets of its reclamation policy; NULL fields
    are not set here (the next scope decides: project, then environment, then the server's
    default). Exactly one of `environment_id` and `project_id` is set."""

    __tablename__ = "reclaim_policies"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    environment_id: Mapped[int | None] = mapped_column(
        ForeignKey("environments.id", ondelete="CASCADE"), unique=True)
    project_id: Mapped[int | None] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), unique=True)
    idle_window_s: Mapped[int | None] = mapped_column(Integer)
    idle_held: Mapped[str | None] = mapped_column(String(16))
    grace_s: Mapped[int | None] = mapped_column(Integer)
    end_warning_lead_s: Mapped[int | None] = mapped_column(Integer)
    action: Mapped[str | None] = mapped_column(String(16))
    enabled: Mapped[bool | None] = mapped_column(Boolean)
    dry_run: Mapped[bool | None] = mapped_column(Boolean)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_by: Mapped[str] = mapped_column(String(127))

    environment: Mapped[Environment | None] = relationship(lazy="joined")
    project: Mapped[Project | None] = relationship(lazy="joined")


class ReclaimExemption(Base):
    """An allocation kept from reclamation until `expires_at`, with the reason. `state`
    `granted` (by an operator: it protects) or `asked` (by its owner: it waits for an
    operator and protects nothing)."""

    __tablename__ = "reclaim_exemptions"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    request_id: Mapped[int] = mapped_column(ForeignKey("gpu_requests.id"), index=True)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    asked_by: Mapped[str] = mapped_column(String(127))
    asked_at: Mapped[datetime] = mapped_column(UtcDateTime)
    granted_by: Mapped[str | None] = mapped_column(String(127))
    granted_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class ReclaimWarning(Base):
    """One warning and how it ended: the reclamation log the report reads.

    `kind` `idle` (an idle allocation, acted on at `deadline_at`) or `ending` (the
    allocation's end is near; `deadline_at` is that end). `outcome` NULL while open; then
    released, shrunk, notified, saved_by_use, exempted, withdrawn, ended, or would_… for a
    dry run. `gpus_taken` (GPUs' worth: a fraction counts its share) came back at
    `outcome_at`; the report counts them as back until `planned_end_at`, the end the
    allocation had (or until the report's end when it had none)."""

    __tablename__ = "reclaim_warnings"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    request_id: Mapped[int] = mapped_column(ForeignKey("gpu_requests.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    project: Mapped[str] = mapped_column(String(63))
    environment: Mapped[str | None] = mapped_column(String(63))
    owner: Mapped[str] = mapped_column(String(127))
    action: Mapped[str] = mapped_column(String(16))
    dry_run: Mapped[bool] = mapped_column(Boolean)
    units: Mapped[int] = mapped_column(Integer)
    idle_units: Mapped[list[str]] = mapped_column(JSON, default=list)
    summary: Mapped[str] = mapped_column(Text)
    warned_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    deadline_at: Mapped[datetime] = mapped_column(UtcDateTime)
    outcome: Mapped[str | None] = mapped_column(String(16))
    outcome_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    units_taken: Mapped[int] = mapped_column(Integer, default=0)
    gpus_taken: Mapped[float] = mapped_column(Float, default=0.0)
    planned_end_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    # The loop's question each round: the open warnings of each allocation.
    __table_args__ = (Index("ix_reclaim_warnings_open", "outcome", "request_id"),)


class GpuHealthTransition(Base):
    """One change of a GPU's health: from, to, the rule that moved it and its evidence, or
    who moved it by hand and why (docs/operations.md, "GPU health and quarantine").

    The GPU's latest transition says why it is in its state now; the rows before it are its
    history. `rule` None: an operator (or registration) moved it; `actor` says who.

    A row with `mig_profile_id` set is a MIG instance's, keyed as the instance is
    (profile id, placement start) and naming the MIG UUID it had then; the GPU's own rows
    leave the three empty."""

    __tablename__ = "gpu_health_transitions"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"))
    mig_profile_id: Mapped[int | None] = mapped_column(Integer)
    mig_start: Mapped[int | None] = mapped_column(Integer)
    mig_uuid: Mapped[str | None] = mapped_column(String(80))
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    rule: Mapped[str | None] = mapped_column(String(63))
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    actor: Mapped[str] = mapped_column(String(127))
    reason: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_gpu_health_transitions_gpu_id_id", "gpu_id", "id"),)


class AlertRule(Base):
    """An alert rule declared through the API, as written (`body`: the rule file's table
    for it). One of the default pack's names replaces that default rule."""

    __tablename__ = "alert_rules"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_by: Mapped[str] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_by: Mapped[str] = mapped_column(String(127))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class BillingRate(Base):
    """A rate card's rate (docs/billing.md, "Rate cards, stored"): the price of one
    unit-hour of a flavour in an environment (`None`: any), in force from `effective_from`
    to `effective_to` (`None`: open). A price is never edited: a change ends the rate in
    force (`ended_at`/`ended_by` say who did, when) and adds a new one."""

    __tablename__ = "billing_rates"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    flavour: Mapped[str] = mapped_column(String(80))
    environment: Mapped[str | None] = mapped_column(String(63))
    price_per_unit_hour: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    effective_from: Mapped[datetime] = mapped_column(UtcDateTime)
    effective_to: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_by: Mapped[str] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ended_by: Mapped[str | None] = mapped_column(String(127))
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # A fraction (exact, as money is): + surcharges, - discounts idle GPU-hours' cost.
    idle_adjustment: Mapped[Decimal] = mapped_column(Money, default=Decimal(0),
                                                     server_default="0")

    __table_args__ = (Index("ix_billing_rates_flavour_effective_from", "flavour",
                            "effective_from"),)


class ChatIdentity(Base):
    """A chat user (Slack or Mattermost, in one workspace) linked to a gpufleet user
    (docs/chatops.md, "Identity"). A chat user acts with the linked user's role and
    projects; an unlinked one can only be told how to link."""

    __tablename__ = "chat_identities"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    platform: Mapped[str] = mapped_column(String(16))
    team_id: Mapped[str] = mapped_column(String(63))
    chat_user_id: Mapped[str] = mapped_column(String(63))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                         index=True)
    linked_by: Mapped[str] = mapped_column(String(127))  # how: e-mail, a link code, an admin
    linked_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (UniqueConstraint("platform", "team_id", "chat_user_id",
                                       name="uq_chat_identities_chat_user"),)


class ChatLinkCode(Base):
    """A one-time code a chat user was given to prove, with a gpufleet token, who they are
    (`gpufleet chatops link CODE`). Only its hash is kept."""

    __tablename__ = "chat_link_codes"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    platform: Mapped[str] = mapped_column(String(16))
    team_id: Mapped[str] = mapped_column(String(63))
    chat_user_id: Mapped[str] = mapped_column(String(63))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class ChatThread(Base):
    """Where a request lives in chat: the channel and thread its requester is told in as it
    moves, and the approvals channel's message with its buttons (updated with who decided)."""

    __tablename__ = "chat_threads"

    request_id: Mapped[int] = mapped_column(
        ForeignKey("gpu_requests.id", ondelete="CASCADE"), primary_key=True)
    platform: Mapped[str] = mapped_column(String(16))
    team_id: Mapped[str | None] = mapped_column(String(63))
    requester_chat_user_id: Mapped[str | None] = mapped_column(String(63))
    channel_id: Mapped[str | None] = mapped_column(String(80))
    thread_ts: Mapped[str | None] = mapped_column(String(32))
    approval_channel_id: Mapped[str | None] = mapped_column(String(80))
    approval_ts: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ChatCursor(Base):
    """How far the chat-ops notifier has read the event log (docs/chatops.md, "Approvals in
    a channel, and the requester's thread"): every event up to `after_seq` is told. Its
    retry state (`attempts`, `next_attempt_at`) and the lease that keeps a second replica
    off while one is mid-round (`lease_owner`, `lease_until`) live here too."""

    __tablename__ = "chat_cursors"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    after_seq: Mapped[int] = mapped_column(BigInteger)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UtcDateTime)
    lease_owner: Mapped[str | None] = mapped_column(String(63))
    lease_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
