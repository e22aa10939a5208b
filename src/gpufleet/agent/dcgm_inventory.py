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
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from gpufleet.agent.prometheus_text import Page
from gpufleet.domain.gpu_models import model, normalise_model
from gpufleet.domain.mig import MigGeometry
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

TOTAL = "gpu.memory_total_bytes"
PARTS = ("gpu.memory_used_bytes", "gpu.memory_free_bytes", "gpu.memory_reserved_bytes")


@dataclass
class _Gpu:
    index: int
    name: str
    pci_bus_id: str | None
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
        gpu = gpus.setdefault(address.gpu_uuid, _Gpu(
            index, labels.get(MODEL_NAME) or "unknown", labels.get(PCI_BUS_ID) or None))
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
    geometry = _geometry(gpu.name)
    instances = []
    for gi, profile_name in sorted(gpu.instances.items()):
        profile = geometry.profile_named(profile_name) if geometry else None
        if profile is not None:
            instances.append(MigInstanceReport(profile_id=profile.profile_id,
                                               profile_name=profile_name, gpu_instance_id=gi))
    return GpuReport(uuid=uuid, index=gpu.index, name=gpu.name[:127],
                     pci_bus_id=gpu.pci_bus_id, memory_bytes=round(total) or None,
                     driver_version=driver, mig_enabled=bool(gpu.instances),
                     mig_instances=instances)


def _geometry(name: str) -> MigGeometry | None:
    found = model(normalise_model(name).key)
    return found.mig if found is not None else None
