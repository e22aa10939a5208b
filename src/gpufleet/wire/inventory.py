"""Inventory, identity and audit as the API shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from gpufleet.domain.access import Role
from gpufleet.domain.inventory import (
    EnvironmentKind,
    GpuHealth,
    GpuStatus,
    NodeStatus,
    SharingMode,
)
from gpufleet.wire.base import Name, StrictModel, Text, View


class EnvironmentCreate(StrictModel):
    name: Name
    kind: EnvironmentKind
    provider: Name | None = None
    region: Name | None = None
    default_sharing_mode: SharingMode = SharingMode.EXCLUSIVE
    description: Text | None = None


class EnvironmentView(View):
    name: str
    kind: EnvironmentKind
    provider: str | None
    region: str | None
    default_sharing_mode: SharingMode
    description: str | None
    created_at: datetime
    nodes: int = 0
    gpus: int = 0


class MigInstanceView(View):
    profile_id: int
    profile_name: str
    placement_start: int | None
    placement_size: int | None
    mig_uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_bytes: int | None
    health: str = Field(default="healthy", description=(
        "The instance's own health (its GPU's still rules: docs/operations.md, "
        "\"MIG instances\")"))


class GpuView(View):
    uuid: str
    node: str
    environment: str
    index: int
    model: str
    model_known: bool = Field(
        description="false: the model is kept as reported, not in the catalogue")
    reported_name: str
    pci_device_id: int | None
    pci_bus_id: str | None
    memory_bytes: int | None
    driver_version: str | None
    sharing_mode: SharingMode
    pending_sharing_mode: SharingMode | None = Field(default=None, description=(
        "the mode its node reports while open bindings hold the GPU in `sharing_mode`; "
        "it applies when the last of them ends"))
    nvlink_peers: list[str] | None
    health: GpuHealth
    health_reason: str | None
    status: GpuStatus
    # A key with several values (`allocation`, `project` on a GPU held by several
    # allocations) holds them sorted and comma-separated (docs/lifecycle.md).
    labels: dict[str, str]
    mig_instances: list[MigInstanceView]
    first_seen_at: datetime


class NodeView(View):
    name: str
    machine_id: str
    environment: str
    status: NodeStatus
    status_reason: str | None
    cpu_cores: int
    memory_bytes: int
    labels: dict[str, str]
    agent_version: str | None
    os_name: str | None
    driver_version: str | None
    cuda_version: str | None
    registered_at: datetime
    last_seen_at: datetime | None
    gpus: int
    desired_state_version: int


class NodeDetail(NodeView):
    gpu_list: list[GpuView]


class ReasonBody(StrictModel):
    """The optional body of an action: why it was taken, for the audit log."""

    reason: Text | None = None


class GpuHealthChange(StrictModel):
    health: GpuHealth
    reason: Text = Field(min_length=1)


class GpuMoveApprovalCreate(StrictModel):
    to_node: str = Field(min_length=1, max_length=253,
                         description="The node (hostname) the GPU may move to")
    reason: Text | None = None


class GpuMoveApprovalView(View):
    gpu_uuid: str
    to_node_name: str
    approved_by: str
    reason: str | None
    created_at: datetime
    used_at: datetime | None


class SummaryCell(View):
    environment: str
    model: str
    status: GpuStatus
    gpus: int


class ModelSummary(View):
    model: str
    total_gpus: int
    by_status: dict[str, int]


class EnvironmentSummary(View):
    environment: str
    kind: EnvironmentKind
    nodes: int
    total_gpus: int
    by_status: dict[str, int]
    models: list[ModelSummary]


class FleetSummary(View):
    """GPUs by environment × model × status. `total_gpus` excludes retired GPUs."""

    total_gpus: int
    retired_gpus: int
    nodes: int
    by_status: dict[str, int]
    by_environment: list[EnvironmentSummary]
    by_model: list[ModelSummary]
    cells: list[SummaryCell]


class JoinTokenCreate(StrictModel):
    environment: Name
    count: int = Field(default=1, ge=1, le=1000)
    expires_in_s: int | None = Field(default=None, ge=60, le=30 * 86_400)
    description: Text | None = None


class JoinTokenIssued(View):
    token: str
    prefix: str
    environment: str
    expires_at: datetime


class JoinTokensIssued(View):
    tokens: list[JoinTokenIssued]


class TokenCreate(StrictModel):
    name: str = Field(min_length=1, max_length=127)
    role: Role | None = Field(default=None, description="Defaults to the user's role")
    user: Name | None = None
    expires_in_days: int | None = Field(default=None, ge=1, le=3650)


class TokenView(View):
    id: int
    name: str
    prefix: str
    role: Role
    user: str | None
    node: str | None
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


class TokenIssued(TokenView):
    token: str = Field(description="Shown once; only its hash is stored")


class UserCreate(StrictModel):
    name: Name
    role: Role
    display_name: str | None = Field(default=None, max_length=127)
    email: str | None = Field(default=None, max_length=254, pattern=r"^[^@\s]+@[^@\s]+$")


class UserView(View):
    name: str
    role: Role
    display_name: str | None
    email: str | None
    created_at: datetime
    projects: list[str] = Field(default_factory=list)


class ProjectCreate(StrictModel):
    name: Name
    organisation: str = Field(min_length=1, max_length=127)
    department: str | None = Field(default=None, max_length=127)
    cost_centre: str | None = Field(default=None, max_length=63)
    description: Text | None = None


class ProjectView(View):
    name: str
    organisation: str
    department: str | None
    cost_centre: str | None
    description: str | None
    created_at: datetime
    members: list[str]


class ProjectMemberAdd(StrictModel):
    user: Name


class AuditEventView(View):
    id: int
    at: datetime
    actor: str
    action: str
    subject_kind: str
    subject: str
    reason: str | None
    details: dict[str, Any]


class WhoAmI(View):
    role: Role
    actor: str
    user: str | None
    node: str | None
    projects: list[str]
