"""How one dcgm-exporter series maps into the metric catalogue: the rules, once.

Two readers apply them: the agent's `dcgm-exporter` backend (a scraped /metrics page, into a
`NodeSnapshot`) and the server's remote-write receiver (series a Prometheus pushed, straight
into store columns). Each reads the series its own way; what a series *means* is decided
here, so the two cannot drift apart:

- the series name → its catalogue row, the source whose scale and sentinels apply, and the
  NVLink link of a per-link name (`route`);
- the labels → the unit: `UUID` (or `uuid`) is the GPU, `GPU_I_ID` makes it a MIG instance's
  (`address_of`); a device-only metric on an instance's series is the parent GPU's
  (`stored_instance`);
- the labels a row keeps of its own (`xid` of DCGM_EXP_XID_ERRORS_TOTAL, `link` of a per-link
  name: `own_labels`);
- Kubernetes pod and HPC job labels → the unit's workload claim, kept only where the unit's
  series agree (`workload_of`, `agreed_workload`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.catalogue import by_dcgm_field, by_prometheus_name
from gpufleet.domain.telemetry.metric import Metric
from gpufleet.domain.telemetry.sources import DcgmSource, PrometheusSource
from gpufleet.text_limits import LABEL_TEXT_MAX

# Label names as dcgm-exporter writes them, for the readers here and the agent's own
# /metrics that writes them (`agent.metrics_exporter`); the first spelling is the one
# written, the second its --use-old-namespace.
UUID_LABELS = ("UUID", "uuid")
GPU_INDEX = "gpu"
DEVICE = "device"  # nvidia<index>
MODEL_NAME = "modelName"
PCI_BUS_ID = "pci_bus_id"
DRIVER_VERSION = "DCGM_FI_DRIVER_VERSION"
GPU_INSTANCE_ID = "GPU_I_ID"
GPU_INSTANCE_PROFILE = "GPU_I_PROFILE"
HOSTNAME = "Hostname"
WORKLOAD_LABELS = {
    "pod": ("pod", "pod_name"),
    "namespace": ("namespace", "pod_namespace"),
    "container": ("container", "container_name"),
    "slurm_job": ("hpc_job",),  # docs/design.md, "Telemetry model" calls the job `slurm_job`
}
_ANY_WORKLOAD_LABEL = frozenset(name for names in WORKLOAD_LABELS.values() for name in names)

Workload = tuple[str | None, ...]  # in WORKLOAD_LABELS order
OwnLabels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Route:
    """Where a series name's samples go: the catalogue row, the source whose scale and
    sentinels apply, the NVLink link of a per-link name, and labels the row keeps (xid)."""

    metric: Metric
    source: DcgmSource | PrometheusSource
    link: int | None
    labels: tuple[str, ...]

    def to_catalogue_value(self, raw: float) -> float | None:
        """The sample in catalogue units; None for a sentinel, NaN or ±inf."""
        return self.source.to_catalogue_value(raw)


@lru_cache(maxsize=1024)
def route(name: str) -> Route | None:
    """The route of a series name; None for a series the catalogue does not know. DCGM
    field names (aliases and per-link names included) first, then dcgm-exporter's own
    exposition names (DCGM_EXP_XID_ERRORS_TOTAL)."""
    try:
        row = by_dcgm_field(name)
    except InvalidInput:
        pass
    else:
        if row.dcgm is not None:  # always: the DCGM index is built from DCGM sources
            return Route(row, row.dcgm, row.dcgm.link_of(name), _kept_labels(row))
    try:
        row = by_prometheus_name(name)
    except InvalidInput:
        return None
    return Route(row, row.prometheus, None, _kept_labels(row))


def _kept_labels(row: Metric) -> tuple[str, ...]:
    return tuple(label for label in row.labels if label != "link")


@dataclass(frozen=True)
class Address:
    """The unit a series is about: its GPU, and the GPU instance id of a MIG instance."""

    gpu_uuid: str
    gpu_instance_id: int | None


@dataclass(frozen=True)
class Unaddressable:
    """A series whose unit cannot be told: `reason` no_uuid (no usable GPU UUID label) or
    bad_instance (a `GPU_I_ID` that is not a number); `detail` is what to name it by."""

    reason: str
    detail: str


def address_of(name: str, labels: Mapping[str, str]) -> Address | Unaddressable:
    """The unit of series `name` with `labels`."""
    uuid = next((labels[k] for k in UUID_LABELS if labels.get(k)), None)
    if uuid is None or len(uuid) > LABEL_TEXT_MAX:
        return Unaddressable("no_uuid", name)
    instance_text = labels.get(GPU_INSTANCE_ID, "")
    if not instance_text:
        return Address(uuid, None)
    instance = _number(instance_text)
    if instance is None:
        return Unaddressable("bad_instance", instance_text)
    return Address(uuid, instance)


def gpu_index(labels: Mapping[str, str]) -> int | None:
    """The GPU's index on its node (`gpu`); None where the label is missing or not a
    number."""
    return _number(labels.get(GPU_INDEX, ""))


def _number(text: str) -> int | None:
    # ASCII digits only: str.isdigit() also accepts "²", which int() refuses.
    return int(text) if text.isascii() and text.isdigit() else None


def instance_profile(labels: Mapping[str, str]) -> str | None:
    """The MIG profile a series names (`GPU_I_PROFILE`), where it is usable."""
    profile = labels.get(GPU_INSTANCE_PROFILE) or None
    return profile if profile and len(profile) <= LABEL_TEXT_MAX else None


def stored_instance(route: Route, gpu_instance_id: int | None) -> int | None:
    """The instance whose series a sample goes to: a device-only metric (the catalogue's
    `per_mig` false) seen on a MIG instance's series belongs to the parent GPU (None)."""
    return gpu_instance_id if route.metric.per_mig else None


def own_labels(route: Route, labels: Mapping[str, str]) -> OwnLabels | None:
    """The labels the row keeps: `link` of a per-link NVLink name, the row's own (`xid`),
    or none. None where a label of its own is missing or too long: the sample is unusable."""
    if route.link is not None:
        return (("link", str(route.link)),)
    if not route.labels:
        return ()
    kept = tuple((name, labels.get(name, "")) for name in route.labels)
    return kept if all(0 < len(text) <= LABEL_TEXT_MAX for _, text in kept) else None


def workload_of(labels: Mapping[str, str]) -> Workload | None:
    """The workload a series names (pod, namespace, container, HPC job); None where it
    names none, so it has no say in its unit's claim."""
    if _ANY_WORKLOAD_LABEL.isdisjoint(labels):
        return None
    workload = tuple(next((labels[k] for k in keys if labels.get(k)), None)
                     for keys in WORKLOAD_LABELS.values())
    return workload if any(workload) else None


def agreed_workload(workloads: Iterable[Workload | None]) -> dict[str, str | None]:
    """Each workload field a unit's series agree on (series without one do not vote): on a
    GPU shared by several pods none of them is claimed."""
    claims = [w for w in workloads if w is not None and any(w)]
    agreed: dict[str, str | None] = {}
    for i, name in enumerate(WORKLOAD_LABELS):
        seen = {w[i] for w in claims}
        value = seen.pop() if len(seen) == 1 else None
        agreed[name] = value if value is None or len(value) <= LABEL_TEXT_MAX else None
    return agreed


def derived_mig_uuid(gpu_uuid: str, gpu_instance_id: int) -> str:
    """The stand-in UUID of a MIG instance whose real one is not known.

    dcgm-exporter names an instance by its parent GPU and GPU instance id only. This id is
    unique on the node and stable while the instance lives, and cannot be mistaken for a real
    MIG UUID (`MIG-<uuid>`); unlike a real one it comes back if the layout is recreated with
    the same GPU instance id."""
    return f"{gpu_uuid}/gi/{gpu_instance_id}"
