"""Wire schemas of the GPU lifecycle: requests, allocations, quotas, pools, approval policies."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, model_validator

from gpufleet.domain.requests import FlavourKind
from gpufleet.wire.base import MAX_HOURS, Name, StrictModel, Text, Time, View

ModelKey = str


class RequestCreate(StrictModel):
    """What a researcher asks for. The kind follows from the fields: `mig_profile` asks for MIG
    instances, `fraction` for a share of a shared GPU, neither for whole GPUs."""

    project: Name
    count: int = Field(ge=1, le=4096, description="Units: GPUs, MIG instances or fractions.")
    models: list[ModelKey] | None = Field(default=None, max_length=32, description=(
        "Acceptable GPU models (catalogue keys); empty or absent: any model."))
    mig_profile: str | None = Field(default=None, max_length=63,
                                    description="MIG profile name, e.g. `1g.10gb`.")
    fraction: float | None = Field(default=None, description=(
        "Share of one shared GPU per unit, strictly between 0 and 1 (e.g. 0.5)."))
    cpu_cores_per_unit: float = Field(default=0, ge=0, le=4096)
    memory_gib_per_unit: float = Field(default=0, ge=0, le=65536)
    same_node: bool = False
    nvlink: bool = Field(default=False,
                         description="All GPUs NVLink-connected (implies same node).")
    environment: Name | None = None
    starts_at: Time | None = Field(default=None, description="Reservation start.")
    ends_at: Time | None = None
    duration_hours: float | None = Field(default=None, gt=0, le=MAX_HOURS, description=(
        "How long it is held once active; ignored when `ends_at` is given."))
    reason: Text | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> RequestCreate:
        if self.mig_profile is not None and self.fraction is not None:
            raise ValueError("ask for either a MIG profile or a fraction, not both")
        if self.fraction is not None and not 0 < self.fraction < 1:
            raise ValueError(f"fraction must be strictly between 0 and 1, not {self.fraction}")
        if self.fraction is not None and round(self.fraction * 1000) < 1:
            raise ValueError("fraction must be at least 0.001 (one milli-GPU)")
        return self

    @property
    def kind(self) -> FlavourKind:
        if self.mig_profile is not None:
            return FlavourKind.MIG
        if self.fraction is not None:
            return FlavourKind.SHARED
        return FlavourKind.WHOLE

    @property
    def milli(self) -> int:
        return round(self.fraction * 1000) if self.fraction is not None else 1000


class Decide(StrictModel):
    reason: Text | None = None


class Extend(StrictModel):
    """Move the end of a request: to `ends_at`, or `hours` later than it is now."""

    hours: float | None = Field(default=None, gt=0, le=24 * 366)
    ends_at: Time | None = None
    reason: Text | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Extend:
        if (self.hours is None) == (self.ends_at is None):
            raise ValueError("give exactly one of `hours` and `ends_at`")
        return self


class UnitView(View):
    """One unit an allocation holds (an open binding)."""

    gpu_uuid: str
    gpu_index: int
    node: str
    kind: FlavourKind
    model: str
    milli: int
    mig_profile_id: int | None = None
    mig_profile: str | None = None
    mig_start: int | None = None
    mig_uuid: str | None = Field(default=None, description=(
        "The MIG device UUID once the node reports the instance; null while it is planned."))
    started_at: datetime
    ended_at: datetime | None = None


class GpuBindingView(View):
    """One binding of a GPU's unit: which allocation held it, from when to when (a GPU's
    allocation history, `GET /api/v1/gpus/{uuid}/bindings`)."""

    allocation: str
    project: str
    kind: FlavourKind
    milli: int
    mig_profile_id: int | None = None
    mig_profile: str | None = None
    mig_start: int | None = None
    mig_uuid: str | None = None
    started_at: datetime
    ended_at: datetime | None = Field(default=None, description="null: held now")
    end_reason: str | None = None


class RequestView(View):
    code: str
    project: str
    requested_by: str
    state: str
    kind: FlavourKind
    count: int
    models: list[str] | None
    mig_profile: str | None
    milli: int
    cpu_milli_per_unit: int
    memory_mib_per_unit: int
    same_node: bool
    nvlink: bool
    environment: str | None
    starts_at: datetime | None
    ends_at: datetime | None
    duration_s: int | None
    justification: str | None
    wait_code: str | None
    wait_message: str | None
    needs_operator: bool
    pool: str | None
    created_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    activated_at: datetime | None
    closed_at: datetime | None
    units: list[UnitView] = Field(default_factory=list)
    exports: dict[str, str] = Field(default_factory=dict, description=(
        "What the workload exports: GPUFLEET_ALLOCATION, CUDA_VISIBLE_DEVICES, GPUFLEET_NODE."))


class VerdictView(View):
    rule: str
    outcome: str
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class QuotaView(View):
    project: str
    flavour: str
    limit: float | None = Field(description="Units (GPUs, instances; shared in GPUs); null: none")
    used: float = Field(description="Held now: pools plus allocations outside pools.")
    pooled: float = Field(description="Of `used`, reserved by the project's active pools.")
    available: float | None


class RequestWhy(View):
    code: str
    state: str
    waiting: bool
    wait_code: str | None
    summary: str
    queue_position: int | None = Field(default=None, description=(
        "1-based place among requests in the same state, oldest first."))
    queue_length: int | None = None
    verdicts: list[VerdictView]
    quotas: list[QuotaView]


class PlacementUnit(View):
    """One unit the placement engine would bind."""

    node: str
    gpu_uuid: str
    gpu_index: int
    model: str
    kind: FlavourKind
    milli: int
    mig_profile: str | None = None
    creates_mig_instance: bool = Field(default=False, description=(
        "Part of a MIG plan: the instance would be created on the GPU."))


class PlacementPreview(View):
    placed: bool = Field(description="Whether the live fleet has room for it now.")
    wait_code: str | None = None
    message: str
    pool: str | None = Field(default=None, description="The project's pool it draws from.")
    nodes: list[str] = Field(default_factory=list)
    units: list[PlacementUnit] = Field(default_factory=list)
    mig_plans: int = Field(default=0, description="GPUs whose MIG layout would change.")
    steps: list[VerdictView] = Field(default_factory=list, description=(
        "The granter's steps, as `why` shows them for an approved request."))


class RequestPreview(View):
    """What creating the request now would come to; nothing is written."""

    project: str
    kind: FlavourKind
    count: int
    models: list[str] | None
    mig_profile: str | None
    milli: int
    state: str = Field(description="`approved` (auto-approve policy) or `pending`.")
    needs_operator: bool
    admission: list[VerdictView]
    placement: PlacementPreview = Field(description=(
        "Where it would go if it were approved now, on the live fleet."))
    quotas: list[QuotaView]


class QuotaSet(StrictModel):
    flavour: str = Field(min_length=1, max_length=127, description=(
        "`H100-80GB`, `H100-80GB/1g.10gb` or `L40S-48GB/shared`."))
    limit: float = Field(ge=0, le=10_000_000, description=(
        "Units: GPUs, MIG instances, or GPUs' worth of shared fractions."))


class AutoApproveSet(StrictModel):
    max_gpus: float = Field(ge=0, le=100_000, description=(
        "Largest request (in GPUs; a MIG instance or a fraction counts as its GPU share)."))
    max_hours: float = Field(gt=0, le=24 * 366)


class AutoApproveView(View):
    project: str
    max_gpus: float
    max_hours: float


class ProjectQuotas(View):
    project: str
    quotas: list[QuotaView]
    auto_approve: AutoApproveView | None


class PoolCreate(StrictModel):
    project: Name
    flavour: str = Field(min_length=1, max_length=127)
    count: int = Field(ge=1, le=100_000)
    fraction: float | None = Field(default=None, description=(
        "Shared pools: the fraction each unit holds (defaults to 1.0 = one GPU's worth)."))
    reason: Text | None = None


class PoolEnd(StrictModel):
    """End an active pool now (a time of its own is not taken: the end is when it is asked)."""

    reason: Text | None = None


class PoolView(View):
    code: str
    project: str
    flavour: str
    count: int
    unit_milli: int
    state: str
    justification: str | None
    requested_by: str
    requested_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    decision_reason: str | None
    approved_at: datetime | None
    ended_at: datetime | None = Field(default=None, description=(
        "When the pool ended: its reservation and its charge stop here."))
    ended_by: str | None = None
    end_reason: str | None = None
    used: float = Field(default=0, description="Units of the pool held by allocations now.")
