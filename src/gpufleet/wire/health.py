"""GPU health on the wire: a GPU's state with the rule and evidence behind it, its
history, and its MIG instances' own states (docs/operations.md, "GPU health and
quarantine", "MIG instances")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from gpufleet.domain.inventory import GpuHealth
from gpufleet.wire.base import StrictModel, Text, View


class HealthTransitionView(View):
    at: datetime
    from_state: GpuHealth
    to_state: GpuHealth
    rule: str | None = Field(description="The health rule that moved the GPU; null: a "
                                         "person (or registration) did, see `actor`")
    evidence: dict[str, Any] | None = Field(
        description="What the rule saw: metric, value, at, line")
    actor: str
    reason: str | None
    mig_uuid: str | None = Field(default=None, description=(
        "The MIG instance that moved (its UUID then); null: the GPU itself"))


class MigInstanceHealthView(View):
    """A MIG instance's own health. `in_service` is false when it or its GPU is out of
    service: a quarantined GPU takes every instance on it out, whatever their own state."""

    mig_uuid: str | None
    profile: str
    placement_start: int | None
    health: GpuHealth
    in_service: bool
    health_reason: str | None
    rule: str | None
    evidence: dict[str, Any] | None
    since: datetime | None
    cleared_by: str | None
    history: list[HealthTransitionView] = Field(description="Newest first")


class GpuHealthView(View):
    gpu: str
    node: str
    environment: str
    health: GpuHealth
    health_reason: str | None
    rule: str | None = Field(description="The rule behind the current state, if a rule")
    evidence: dict[str, Any] | None
    since: datetime | None = Field(description="When the GPU entered its current state "
                                               "(null: before health history was kept)")
    cleared_by: str | None = Field(description="Who last returned the GPU to healthy by hand")
    history: list[HealthTransitionView] = Field(description="Newest first (the GPU's own)")
    mig_instances: list[MigInstanceHealthView] = Field(
        default_factory=list, description="A MIG GPU's instances, by placement")


class GpuClear(StrictModel):
    """The body of a clear or a retirement: why."""

    reason: Text = Field(min_length=1, description="Why (kept in the history and the audit)")


class GpuHealthClear(GpuClear):
    """The body of a clear: why, and which MIG instance (none: the GPU itself)."""

    mig_instance: Text | None = Field(default=None, min_length=1, description=(
        "The MIG UUID of the instance to clear; the GPU's own health is left as it is"))
