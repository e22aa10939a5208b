"""Telemetry snapshots: what an agent backend reads from a node in one collection tick.

Every backend (`nvml`, `dcgm-exporter`, `sim`) produces the same immutable `NodeSnapshot`, in the
units of the metric catalogue (`gpufleet.domain.telemetry`): the backend applies each source's scale
and turns its blank / sentinel values into `None`. `None` means "this source cannot say" and is
never stored as a number (docs/design.md, "Telemetry model"); a metric the source does not offer at
all is simply absent from `values`.

A snapshot has one `UnitSnapshot` per unit: each whole GPU (`mig_uuid` unset) and each MIG
instance (`mig_uuid` set, `gpu_uuid` naming its parent GPU). Device-only metrics — power,
temperature, clocks, ECC, XID, NVLink, PCIe — appear on the GPU's own unit only. Series
that carry a label beyond the unit (one NVLink link, one XID code) are `LabelledValue`s.

Who uses a unit is claimed per process where the source lists processes (`nvml`), and per
unit where it knows only the unit's workload (`dcgm-exporter`'s Kubernetes pod and HPC job
mappings); either way a claim, checked against the unit's binding on the server.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, ConfigDict, Field, StringConstraints

from gpufleet.text_limits import LABEL_TEXT_MAX
from gpufleet.wire.base import StrictModel

MetricName = Annotated[str, StringConstraints(min_length=1, max_length=96,
                                              pattern=r"^[a-z][a-z0-9_.]*$")]
LabelText = Annotated[str, StringConstraints(max_length=LABEL_TEXT_MAX)]
BackendName = Literal["nvml", "dcgm-exporter", "sim"]


class Frozen(StrictModel):
    model_config = ConfigDict(frozen=True)


class LabelledValue(Frozen):
    """One series of a metric that has a label of its own, e.g. NVLink link 3, XID 79."""

    metric: MetricName
    labels: dict[LabelText, LabelText]
    value: float | None


class ProcessSnapshot(Frozen):
    """A process using a unit, with what the agent could learn about its owner.

    Attribution fields are claims read on the node (cgroup, allow-listed environment keys,
    `gpufleet.tag`); the server checks them against the unit's binding, which is the truth.
    """

    pid: int = Field(ge=0)
    name: LabelText | None = None
    values: dict[MetricName, float | None] = Field(default_factory=dict)
    container: LabelText | None = None
    pod: LabelText | None = None
    namespace: LabelText | None = None
    slurm_job: LabelText | None = None
    claimed_allocation: LabelText | None = None
    tags: dict[LabelText, LabelText] = Field(default_factory=dict)


class UnitSnapshot(Frozen):
    gpu_uuid: LabelText  # the GPU itself, or the parent of the MIG instance
    mig_uuid: LabelText | None = None
    mig_profile: LabelText | None = None
    gpu_instance_id: int | None = None
    values: dict[MetricName, float | None] = Field(default_factory=dict)
    labelled: tuple[LabelledValue, ...] = ()
    processes: tuple[ProcessSnapshot, ...] = ()
    # The workload the source attributes the whole unit to, for sources that know it but list
    # no processes (dcgm-exporter's pod mapping and HPC job mapping). Claims, like a
    # process's. A field is unset where the source cannot say, or names more than one.
    pod: LabelText | None = None
    namespace: LabelText | None = None
    container: LabelText | None = None
    slurm_job: LabelText | None = None  # dcgm-exporter's `hpc_job`

    @property
    def is_mig(self) -> bool:
        return self.mig_uuid is not None


class NodeSnapshot(Frozen):
    """Everything one backend read from one node at one instant."""

    node: LabelText
    at: AwareDatetime
    backend: BackendName
    units: tuple[UnitSnapshot, ...]
    problems: tuple[LabelText, ...] = ()  # what the source could not read this tick, said once

    def unit(self, gpu_uuid: str, mig_uuid: str | None = None) -> UnitSnapshot | None:
        return next((u for u in self.units
                     if u.gpu_uuid == gpu_uuid and u.mig_uuid == mig_uuid), None)

