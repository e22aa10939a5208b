"""GPU health on the wire: a GPU's state with the rule and evidence behind it, and its
history (docs/operations.md, "GPU health and quarantine")."""

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
    history: list[HealthTransitionView] = Field(description="Newest first")


class GpuClear(StrictModel):
    """The body of a clear or a retirement: why."""

    reason: Text = Field(min_length=1, description="Why (kept in the history and the audit)")
