"""The agent protocol: registration and heartbeat (docs/design.md, "Architecture").

An agent registers its node once with a single-use join token and gets a node credential
(an `agent` token); it re-registers with that credential whenever its hardware may have
changed (at every start), which is idempotent. Heartbeats keep the node reachable, and
their reply carries the node's **desired state** with a version — the bindings of its
units and pending MIG plans — so later features reach agents without a new protocol.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, field_validator, model_validator

from gpufleet.domain.inventory import NodeStatus, SharingMode
from gpufleet.wire.base import LabelKey, LabelValue, StrictModel, View

GIB = 1024**3
TIB = 1024**4

GpuUuid = Annotated[str, StringConstraints(
    pattern=r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")]
MachineId = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                             pattern=r"^[A-Za-z0-9._:-]+$")]
Hostname = Annotated[str, StringConstraints(
    min_length=1, max_length=253,
    pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")]
ShortText = Annotated[str, StringConstraints(max_length=127)]


class MigInstanceReport(StrictModel):
    """A GPU instance as the node sees it. Placement is optional: not every source has it."""

    profile_id: int = Field(ge=0, le=255)
    placement_start: int | None = Field(default=None, ge=0, le=15)
    placement_size: int | None = Field(default=None, ge=1, le=16)
    profile_name: ShortText | None = None
    mig_uuid: ShortText | None = None
    gpu_instance_id: int | None = Field(default=None, ge=0, le=1024)
    compute_instance_id: int | None = Field(default=None, ge=0, le=1024)
    memory_bytes: int | None = Field(default=None, gt=0, le=TIB)

    @property
    def key(self) -> tuple:
        """What identifies the instance on its GPU (docs/design.md, "Concepts"): (profile id,
        placement start); without a placement, the driver's GPU instance id stands in for the start.
        """
        return mig_instance_key(self.profile_id, self.placement_start, self.gpu_instance_id)


def mig_instance_key(profile_id: int, placement_start: int | None,
                     gpu_instance_id: int | None) -> tuple:
    if placement_start is not None:
        return (profile_id, placement_start)
    return (profile_id, None, gpu_instance_id)


class GpuReport(StrictModel):
    """One physical GPU. Only the UUID, index and name are required of every source."""

    uuid: GpuUuid
    index: int = Field(ge=0, le=63)
    name: ShortText = Field(min_length=1,
                            description="NVML device name, e.g. `NVIDIA H100 80GB HBM3`")
    pci_device_id: int | None = Field(default=None, ge=0, le=0xFFFFFFFF,
                                      description="NVML pciDeviceId, e.g. 0x233010DE")
    pci_bus_id: ShortText | None = None
    memory_bytes: int | None = Field(default=None, gt=0, le=TIB)
    driver_version: ShortText | None = None
    mig_enabled: bool = False
    sharing_mode: SharingMode | None = Field(default=None, description=(
        "How the node hands this GPU out; empty: `mig` when MIG is enabled, otherwise the "
        "environment's default."))
    nvlink_peers: list[GpuUuid] | None = Field(default=None, max_length=64)
    mig_instances: list[MigInstanceReport] = Field(default_factory=list, max_length=16)
    mig_instances_unread: int = Field(default=0, ge=0, le=64, description=(
        "MIG instances the node saw on this GPU but could not identify (a profile its "
        "model's geometry does not name): the layout in `mig_instances` is incomplete, so "
        "gpufleet never exports it for mig-parted nor plans around it."))

    @model_validator(mode="after")
    def _mig_consistent(self) -> GpuReport:
        if (self.mig_instances or self.mig_instances_unread) and not self.mig_enabled:
            raise ValueError("mig_instances reported on a GPU whose MIG mode is disabled")
        if self.sharing_mode is SharingMode.MIG and not self.mig_enabled:
            raise ValueError("sharing_mode 'mig' needs mig_enabled")
        keys = [m.key for m in self.mig_instances]
        if len(set(keys)) != len(keys):
            raise ValueError("a MIG instance (profile id, placement start) appears twice "
                             "on one GPU")
        return self


class NodeRegistration(StrictModel):
    machine_id: MachineId = Field(description="/etc/machine-id or the cloud instance id")
    hostname: Hostname
    cpu_cores: int = Field(ge=1, le=4096)
    memory_bytes: int = Field(ge=GIB, le=64 * TIB)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=64)
    agent_version: ShortText | None = None
    backend: ShortText | None = Field(default=None, description="sim, nvml or dcgm-exporter")
    applies_mig_plans: bool | None = Field(default=None, description=(
        "Whether the node's backend creates and destroys MIG instances to apply the MIG "
        "plans of its desired state. False: placement uses only the instances the node "
        "has. Empty: what `backend` implies (`sim` applies plans; `nvml` and "
        "`dcgm-exporter` read only); a node naming neither applies plans, as the protocol "
        "always assumed."))
    os_name: ShortText | None = None
    driver_version: ShortText | None = None
    cuda_version: ShortText | None = None
    gpus: list[GpuReport] = Field(default_factory=list, max_length=64)

    @field_validator("gpus")
    @classmethod
    def _unique_gpus(cls, gpus: list[GpuReport]) -> list[GpuReport]:
        seen_uuid: set[str] = set()
        seen_index: set[int] = set()
        for gpu in gpus:
            uuid = gpu.uuid.lower()
            if uuid in seen_uuid:
                raise ValueError(f"GPU {gpu.uuid} appears twice in one registration")
            if gpu.index in seen_index:
                raise ValueError(f"GPU index {gpu.index} appears twice in one registration")
            seen_uuid.add(uuid)
            seen_index.add(gpu.index)
        return gpus


READ_ONLY_BACKENDS = frozenset({"nvml", "dcgm-exporter"})


def applies_mig_plans(registration: NodeRegistration) -> bool:
    """What the node said it can do with MIG plans, else what its backend implies."""
    if registration.applies_mig_plans is not None:
        return registration.applies_mig_plans
    return registration.backend not in READ_ONLY_BACKENDS


class UnitBinding(View):
    """A unit of this node bound to an allocation (filled by the lifecycle)."""

    unit: str
    gpu_uuid: str
    allocation: str
    project: str
    milli: int | None = None
    mig_profile_id: int | None = None
    placement_start: int | None = None


class MigPlanInstance(View):
    profile_id: int
    placement_start: int


class MigPlan(View):
    """The GPU instances a MIG GPU should have, with explicit placements."""

    gpu_uuid: str
    instances: list[MigPlanInstance]


class DesiredState(View):
    version: int
    bindings: list[UnitBinding] = Field(default_factory=list)
    mig_plans: list[MigPlan] = Field(default_factory=list)


class RegistrationReply(View):
    node: str
    node_status: NodeStatus
    environment: str
    credential: str | None = Field(default=None, description=(
        "The node's agent token; only in the reply that issued it. Store it, mode 600."))
    heartbeat_interval_s: float
    desired_state: DesiredState
    gpus_registered: int


class Heartbeat(StrictModel):
    applied_desired_state_version: int | None = Field(default=None, ge=0)
    agent_version: ShortText | None = None


class HeartbeatReply(View):
    node: str
    node_status: NodeStatus
    heartbeat_interval_s: float
    desired_state: DesiredState
