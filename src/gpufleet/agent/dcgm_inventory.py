"""A node's registration read from its dcgm-exporter page, for the `dcgm-exporter` backend
on a node where the agent does not open NVML itself.

dcgm-exporter labels every series with the GPU's index (`gpu`), `UUID`, `modelName`,
`pci_bus_id` and the driver version, and a MIG instance's series with `GPU_I_ID` and
`GPU_I_PROFILE`: enough for an inventory. Memory is `DCGM_FI_DEV_FB_TOTAL` where the page
has it (else used + free + reserved). A MIG instance's profile id comes from the model's
MIG geometry (`gpu_models`) by the profile's name; the placement is not on the page, so the
instance is keyed by its GPU instance id (`MigInstanceReport.key`). The host's own facts
(machine id, CPUs, memory) come from the machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from gpufleet.agent.prometheus_text import parse_page
from gpufleet.domain.gpu_models import model, normalise_model
from gpufleet.wire.agent import GpuReport, MigInstanceReport, NodeRegistration

from .backend import SourceUnavailable
from .dcgm_exporter import GPU_INSTANCE_ID, GPU_INSTANCE_PROFILE, UUID_LABELS, MalformedPage
from .nvml_backend import HostFacts

MIB = 1024**2
MEMORY_FIELDS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")


@dataclass
class _Gpu:
    index: int
    name: str
    pci_bus_id: str | None
    memory_mib: dict[str, float] = field(default_factory=dict)
    instances: dict[int, str] = field(default_factory=dict)  # GPU instance id -> profile


def registration_from_page(text: str, host: HostFacts) -> NodeRegistration:
    """The node's registration as the page describes its GPUs; MalformedPage when the page
    is not a metrics page at all."""
    page = parse_page(text)
    if not page.samples and page.malformed_lines:
        raise MalformedPage(f"{page.malformed_lines} unreadable line(s)")
    gpus: dict[str, _Gpu] = {}
    driver = None
    for sample in page.samples:
        labels = sample.labels
        uuid = next((labels[k] for k in UUID_LABELS if labels.get(k)), None)
        index = labels.get("gpu", "")
        if uuid is None or not index.isdigit():
            continue
        gpu = gpus.setdefault(uuid, _Gpu(int(index), labels.get("modelName") or "unknown",
                                         labels.get("pci_bus_id") or None))
        driver = driver or labels.get("DCGM_FI_DRIVER_VERSION") or None
        instance = labels.get(GPU_INSTANCE_ID, "")
        if instance.isdigit():
            gpu.instances[int(instance)] = labels.get(GPU_INSTANCE_PROFILE, "")
        elif sample.name in (*MEMORY_FIELDS, "DCGM_FI_DEV_FB_TOTAL"):
            gpu.memory_mib.setdefault(sample.name, sample.value)
    return NodeRegistration(
        machine_id=host.machine_id, hostname=host.hostname, cpu_cores=host.cpu_cores,
        memory_bytes=host.memory_bytes, backend="dcgm-exporter", os_name=host.os_name,
        driver_version=driver,
        gpus=[_report(uuid, gpu, driver) for uuid, gpu in sorted(
            gpus.items(), key=lambda item: item[1].index)])


def _report(uuid: str, gpu: _Gpu, driver: str | None) -> GpuReport:
    total = gpu.memory_mib.get("DCGM_FI_DEV_FB_TOTAL") or sum(
        gpu.memory_mib.get(f, 0.0) for f in MEMORY_FIELDS)
    geometry = _geometry(gpu.name)
    instances = []
    for gi, profile_name in sorted(gpu.instances.items()):
        profile = next((p for p in geometry.profiles if p.name == profile_name), None) \
            if geometry else None
        if profile is not None:
            instances.append(MigInstanceReport(profile_id=profile.profile_id,
                                               profile_name=profile_name, gpu_instance_id=gi))
    return GpuReport(uuid=uuid, index=gpu.index, name=gpu.name[:127],
                     pci_bus_id=gpu.pci_bus_id, memory_bytes=round(total * MIB) or None,
                     driver_version=driver, mig_enabled=bool(gpu.instances),
                     mig_instances=instances)


def _geometry(name: str):
    found = model(normalise_model(name).key)
    return found.mig if found is not None else None


def fetch_registration(url: str, host: HostFacts, timeout_s: float = 5.0) -> NodeRegistration:
    """GET the page and read the registration; SourceUnavailable naming the URL on failure."""
    try:
        response = httpx.get(url, timeout=timeout_s, headers={"Accept": "text/plain"})
        response.raise_for_status()
        return registration_from_page(response.text, host)
    except (httpx.HTTPError, MalformedPage) as exc:
        raise SourceUnavailable(f"dcgm-exporter at {url}: cannot read the GPU inventory "
                                f"({type(exc).__name__}: {exc})") from exc
