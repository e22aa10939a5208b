"""A node's registration read from its dcgm-exporter page, for the `dcgm-exporter` backend
on a node where the agent does not open NVML itself.

dcgm-exporter labels every series with the GPU's index (`gpu`), `UUID`, `modelName`,
`pci_bus_id` and the driver version, and a MIG instance's series with `GPU_I_ID` and
`GPU_I_PROFILE`: enough for an inventory. The labels are read by the rules the telemetry
uses (`domain.telemetry.dcgm_mapping`), and memory through the metric catalogue:
`gpu.memory_total_bytes` (DCGM_FI_DEV_FB_TOTAL) where the page has it, else used + free +
reserved. A MIG instance's profile id comes from the model's MIG geometry (`gpu_models`) by
the profile's name; the placement is not on the page, so the instance is keyed by its GPU
instance id (`MigInstanceReport.key`). The host's own facts (machine id, CPUs, memory) come
from the machine.

The model is read from every signal the page has: `modelName`, else a `DCGM_FI_DEV_NAME`
label, and a `DCGM_FI_DEV_PCI_COMBINED_ID` label (the PCI device id) where the counters
file makes them labels; a page that names no model has it inferred from the profile names
of its MIG instances when exactly one model has them all. An instance whose profile id
still cannot be told is counted in `mig_instances_unread`, never silently dropped: a
layout that lost instances, exported for mig-parted, would destroy them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from gpufleet.agent.prometheus_text import Page
from gpufleet.domain.gpu_models import mig_models_naming, model, normalise_model
from gpufleet.domain.telemetry.dcgm_mapping import (
    DRIVER_VERSION,
    MODEL_NAME,
    PCI_BUS_ID,
    Address,
    address_of,
    gpu_index,
    instance_profile,
    route,
)
from gpufleet.wire.agent import GpuReport, MigInstanceReport, NodeRegistration
from gpufleet.wire.validation import field_error, summary

from .dcgm_exporter import (
    DcgmExporterBackend,
    DcgmExporterUnavailable,
    MalformedPage,
    metrics_page,
)
from .host import HostFacts

# dcgm-exporter makes a field a label when its counters file says `label`.
DEVICE_NAME = "DCGM_FI_DEV_NAME"
PCI_COMBINED_ID = "DCGM_FI_DEV_PCI_COMBINED_ID"
TOTAL = "gpu.memory_total_bytes"
PARTS = ("gpu.memory_used_bytes", "gpu.memory_free_bytes", "gpu.memory_reserved_bytes")


@dataclass
class _Gpu:
    index: int
    name: str | None
    pci_bus_id: str | None
    pci_device_id: int | None = None
    memory_bytes: dict[str, float | None] = field(default_factory=dict)  # metric -> bytes
    instances: dict[int, str] = field(default_factory=dict)  # GPU instance id -> profile


def registration_from_page(text: str, host: HostFacts) -> NodeRegistration:
    """The node's registration as the page describes its GPUs; MalformedPage when the page
    is not a metrics page at all."""
    return registration_of(metrics_page(text), host)


def fetch_registration(exporter: DcgmExporterBackend, host: HostFacts) -> NodeRegistration:
    """Scrape the exporter and read the registration; DcgmExporterUnavailable (a
    `SourceUnavailable` naming the URL) when the page cannot be had or describes GPUs that
    cannot be registered."""
    try:
        return registration_of(exporter.scrape(), host)
    except MalformedPage as exc:
        raise DcgmExporterUnavailable(exporter.url, str(exc)) from None


def registration_of(page: Page, host: HostFacts) -> NodeRegistration:
    """MalformedPage when what the page says of its GPUs is not a valid registration (a
    `UUID` label that is no GPU UUID, say), naming the first problem."""
    try:
        return _registration_of(page, host)
    except ValidationError as exc:
        errors = [field_error(e) for e in exc.errors()]
        raise MalformedPage(f"its page describes GPUs that cannot be registered: "
                            f"{summary(errors)}") from None


def _registration_of(page: Page, host: HostFacts) -> NodeRegistration:
    gpus: dict[str, _Gpu] = {}
    driver = None
    for sample in page.samples:
        labels = sample.labels
        address = address_of(sample.name, labels)
        index = gpu_index(labels)
        if not isinstance(address, Address) or index is None:
            continue
        gpu = gpus.setdefault(address.gpu_uuid, _Gpu(index, None, labels.get(PCI_BUS_ID) or None))
        gpu.name = gpu.name or labels.get(MODEL_NAME) or labels.get(DEVICE_NAME) or None
        gpu.pci_device_id = gpu.pci_device_id or _pci_device_id(labels.get(PCI_COMBINED_ID))
        driver = driver or labels.get(DRIVER_VERSION) or None
        if address.gpu_instance_id is not None:
            gpu.instances[address.gpu_instance_id] = instance_profile(labels) or ""
            continue
        to = route(sample.name)
        if to is not None and to.metric.name in (TOTAL, *PARTS):
            gpu.memory_bytes.setdefault(to.metric.name, to.to_catalogue_value(sample.value))
    return NodeRegistration(
        machine_id=host.machine_id, hostname=host.hostname, cpu_cores=host.cpu_cores,
        memory_bytes=host.memory_bytes, backend="dcgm-exporter", os_name=host.os_name,
        driver_version=driver,
        gpus=[_report(uuid, gpu, driver) for uuid, gpu in sorted(
            gpus.items(), key=lambda item: item[1].index)])


def _report(uuid: str, gpu: _Gpu, driver: str | None) -> GpuReport:
    total = gpu.memory_bytes.get(TOTAL) or sum(gpu.memory_bytes.get(p) or 0.0 for p in PARTS)
    name, profile_ids = _model_of(gpu)
    instances = [MigInstanceReport(profile_id=profile_ids[profile_name],
                                   profile_name=profile_name or None, gpu_instance_id=gi)
                 for gi, profile_name in sorted(gpu.instances.items())
                 if profile_name in profile_ids]
    return GpuReport(uuid=uuid, index=gpu.index, name=name[:127],
                     pci_device_id=gpu.pci_device_id, pci_bus_id=gpu.pci_bus_id,
                     memory_bytes=round(total) or None, driver_version=driver,
                     mig_enabled=bool(gpu.instances), mig_instances=instances,
                     mig_instances_unread=len(gpu.instances) - len(instances))


def _model_of(gpu: _Gpu) -> tuple[str, dict[str, int]]:
    """The GPU's name to report, and the profile id of each of its instances' profile names
    that can be told. A page that names the model (or its PCI device id) is believed; one
    that does not has the model inferred from the profile names when exactly one model has
    them all — and a profile id is known wherever every model that fits agrees on it."""
    names = set(gpu.instances.values())
    resolved = normalise_model(gpu.name or "unknown", gpu.pci_device_id)
    found = model(resolved.key) if resolved.known else None
    candidates = [found] if found is not None else mig_models_naming(names)
    reported = gpu.name
    if reported is None and len(candidates) == 1:
        reported = candidates[0].nvml_names[0]
    profile_ids = {}
    for profile_name in names:
        ids = {m.mig.profile_named(profile_name).profile_id for m in candidates
               if m.mig is not None and m.mig.profile_named(profile_name) is not None}
        if len(ids) == 1:
            profile_ids[profile_name] = ids.pop()
    return reported or "unknown", profile_ids


def _pci_device_id(text: str | None) -> int | None:
    """`0x20B010DE` (DCGM's combined device and vendor id) as a number; None if it is not one."""
    try:
        number = int(text, 16) if text else None
    except ValueError:
        return None
    return number if number is not None and 0 <= number <= 0xFFFFFFFF else None
