"""Wire schemas of reclamation: policies, exemptions, warnings, a round, the report
(docs/operations.md, "Reclamation")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from gpufleet.domain.operations.reclaim_policy import IdleHeld, ReclaimAction, Scope
from gpufleet.wire.base import StrictModel, Time, View

PolicyField = Literal["idle_window_hours", "idle_held", "grace_minutes",
                      "end_warning_lead_hours", "action", "enabled", "dry_run"]
Reason = Annotated[str, StringConstraints(min_length=1, max_length=2000,
                                          strip_whitespace=True)]


class PolicySet(StrictModel):
    """The fields to set on one environment's or project's policy; fields not given keep
    what they had, `unset` clears fields (the next scope decides them again)."""

    idle_window_hours: float | None = Field(default=None, allow_inf_nan=False, description=(
        "Idle this long (every unit below the activity threshold on every minute it "
        "reported) before the owner is warned."))
    idle_held: IdleHeld | None = Field(default=None, description=(
        "`reclaim`: an idle-held unit (memory held, no compute) is idle; `spare`: it is "
        "treated as in use."))
    grace_minutes: float | None = Field(default=None, allow_inf_nan=False, description=(
        "From the warning to the action; used again meanwhile, nothing happens."))
    end_warning_lead_hours: float | None = Field(default=None, allow_inf_nan=False,
                                                 description=(
        "Warn the owner this long before the allocation's end (0: no warning)."))
    action: ReclaimAction | None = None
    enabled: bool | None = None
    dry_run: bool | None = Field(default=None, description=(
        "Record what would be done; warn nobody, take nothing."))
    unset: list[PolicyField] = Field(default_factory=list, max_length=7)


class PolicyView(View):
    scope: Scope
    name: str
    idle_window_hours: float | None
    idle_held: IdleHeld | None
    grace_minutes: float | None
    end_warning_lead_hours: float | None
    action: ReclaimAction | None
    enabled: bool | None
    dry_run: bool | None
    updated_at: datetime
    updated_by: str


class EffectivePolicyView(View):
    """A policy with every field decided, and which scope decided each."""

    idle_window_hours: float
    idle_held: IdleHeld
    grace_minutes: float
    end_warning_lead_hours: float
    action: ReclaimAction
    enabled: bool
    dry_run: bool
    decided_by: dict[str, str] = Field(default_factory=dict, description=(
        "Per field: `default`, `environment:NAME` or `project:NAME`."))


class PolicyList(View):
    default: EffectivePolicyView = Field(description="The server's default (settings).")
    items: list[PolicyView]


class ExemptCreate(StrictModel):
    reason: Reason
    until: Time | None = Field(default=None, description="Exempt until this time.")
    hours: float | None = Field(default=None, gt=0, le=24 * 90, allow_inf_nan=False,
                                description="Exempt for this many hours from now.")

    @model_validator(mode="after")
    def _one_of(self) -> ExemptCreate:
        if (self.hours is None) == (self.until is None):
            raise ValueError("give exactly one of `hours` and `until`")
        return self


class ExemptionView(View):
    allocation: str
    project: str
    state: Literal["granted", "asked"]
    reason: str
    expires_at: datetime
    asked_by: str
    asked_at: datetime
    granted_by: str | None
    granted_at: datetime | None


class WarningView(View):
    id: int
    allocation: str
    kind: Literal["idle", "ending"]
    project: str
    environment: str | None
    owner: str
    action: str
    dry_run: bool
    units: int
    idle_units: list[str]
    summary: str
    warned_at: datetime
    deadline_at: datetime
    outcome: str | None
    outcome_at: datetime | None
    units_taken: int
    gpus_taken: float


class StepView(View):
    """What a round did (or, dry, would do) with one allocation."""

    allocation: str
    project: str
    environment: str | None
    step: str
    action: ReclaimAction
    dry_run: bool
    units: int
    idle_units: int
    deadline_at: datetime | None
    summary: str | None


class RoundView(View):
    at: datetime
    dry_run: bool = Field(description="True: nothing was written (`reclaim run --dry-run`).")
    steps: list[StepView]
    ending_warned: list[str] = Field(default_factory=list)


class ReportRow(View):
    project: str
    environment: str | None
    warned: int
    released: int
    shrunk: int
    notified: int
    saved_by_use: int
    exempted: int
    would_act: int = Field(description="Dry-run policies: acts they would have taken.")
    units_taken: int
    gpu_hours_back: float = Field(description=(
        "GPU-hours the taken units were free of their allocation within the window, up "
        "to the end it had planned."))


class ReclaimReport(View):
    since: datetime
    until: datetime
    rows: list[ReportRow]
    total: ReportRow

