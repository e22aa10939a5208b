"""Real hardware shapes the simulator builds nodes from.

The figures are those of the real systems (vendor spec sheets and what `nvidia-smi` / NVML
print on them): NVML device names, NVML `pciDeviceId`s, the memory total NVML reports,
PCI bus ids in NVML's `00000000:1B:00.0` form, host cores and memory. A shape names its
NVLink domains — sets of GPU indexes connected all-to-all (through NVSwitch on SXM
systems) — so reported NVLink peers are symmetric and never leave the node.

A shape with `mig_layouts` is a MIG slicing node: its GPUs come up MIG-enabled with those
layouts unless a fleet spec says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.domain.gpu_models import model
from gpufleet.domain.mig import MigGeometry

MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class GpuKind:
    """One GPU product as NVML reports it."""

    nvml_name: str
    pci_device_id: int
    memory_bytes: int  # NVML memory.total, not the marketing figure
    model_key: str

    @property
    def mig_geometry(self) -> MigGeometry | None:
        found = model(self.model_key)
        return found.mig if found else None


@dataclass(frozen=True)
class Shape:
    name: str
    description: str
    gpu: GpuKind
    pci_bus_ids: tuple[str, ...]  # one per GPU, in index order
    cpu_cores: int
    memory_bytes: int
    nvlink_domains: tuple[tuple[int, ...], ...]
    driver_version: str
    cuda_version: str
    os_name: str
    instance_type: str | None = None  # the cloud's size name, reported as a node label
    mig_layouts: tuple[tuple[str, ...], ...] = ()

    @property
    def gpu_count(self) -> int:
        return len(self.pci_bus_ids)

    def nvlink_domain_of(self, index: int) -> tuple[int, ...]:
        return next((d for d in self.nvlink_domains if index in d), ())


H100_SXM = GpuKind("NVIDIA H100 80GB HBM3", 0x233010DE, 81559 * MIB, "H100-80GB")
A100_SXM4_80GB = GpuKind("NVIDIA A100-SXM4-80GB", 0x20B210DE, 81920 * MIB, "A100-80GB")
A100_PCIE_80GB = GpuKind("NVIDIA A100 80GB PCIe", 0x20B510DE, 81920 * MIB, "A100-80GB")
L40S = GpuKind("NVIDIA L40S", 0x26B910DE, 46068 * MIB, "L40S-48GB")

_ALL_EIGHT = (tuple(range(8)),)
# Azure exposes each GPU of a VM on its own PCI domain.
_AZURE_BUS_IDS_8 = tuple(f"0000000{d}:00:00.0" for d in range(1, 9))
_AZURE_BUS_IDS_4 = _AZURE_BUS_IDS_8[:4]
_DGX_H100_BUS_IDS = tuple(f"00000000:{b}:00.0" for b in
                          ("1B", "43", "52", "61", "9D", "C3", "D1", "DF"))
_DGX_A100_BUS_IDS = tuple(f"00000000:{b}:00.0" for b in
                          ("07", "0F", "47", "4E", "87", "90", "B7", "BD"))
_PCIE_SERVER_BUS_IDS = tuple(f"00000000:{b}:00.0" for b in
                             ("01", "25", "41", "61", "81", "A1", "C1", "E1"))

_AZURE_DRIVER = ("535.183.01", "12.2", "Ubuntu 22.04.4 LTS")
_ONPREM_DRIVER = ("550.127.05", "12.4", "Ubuntu 22.04.5 LTS")

H100_MIG_LAYOUTS = (
    ("3g.40gb", "3g.40gb"),
    ("1g.10gb",) * 7,
    ("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"),
    ("4g.40gb", "3g.40gb"),
)
A100_MIG_LAYOUTS = (
    ("3g.40gb", "3g.40gb"),
    ("1g.10gb",) * 7,
    ("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"),
    ("4g.40gb", "2g.20gb", "1g.10gb"),
)


def _shape(name: str, description: str, gpu: GpuKind, bus_ids: tuple[str, ...], cpu_cores: int,
           memory_bytes: int, nvlink: tuple[tuple[int, ...], ...], software: tuple[str, str, str],
           **extra) -> Shape:
    driver, cuda, os_name = software
    return Shape(name=name, description=description, gpu=gpu, pci_bus_ids=bus_ids,
                 cpu_cores=cpu_cores, memory_bytes=memory_bytes, nvlink_domains=nvlink,
                 driver_version=driver, cuda_version=cuda, os_name=os_name, **extra)


SHAPES: dict[str, Shape] = {s.name: s for s in (
    _shape("azure-nd-h100-v5", "Azure ND H100 v5: 8 x H100 SXM, NVLink 4 all-to-all",
           H100_SXM, _AZURE_BUS_IDS_8, 96, 1900 * GIB, _ALL_EIGHT, _AZURE_DRIVER,
           instance_type="Standard_ND96isr_H100_v5"),
    _shape("azure-nc-a100-v4", "Azure NC A100 v4: 4 x A100 80GB PCIe, no NVLink bridges",
           A100_PCIE_80GB, _AZURE_BUS_IDS_4, 96, 880 * GIB, (), _AZURE_DRIVER,
           instance_type="Standard_NC96ads_A100_v4"),
    _shape("dgx-h100", "NVIDIA DGX H100: 8 x H100 SXM5, NVLink through 4 NVSwitches, "
           "2 x Xeon 8480C", H100_SXM, _DGX_H100_BUS_IDS, 112, 2048 * GIB, _ALL_EIGHT,
           _ONPREM_DRIVER),
    _shape("hgx-a100", "HGX A100 8-GPU (DGX A100 class): 8 x A100-SXM4-80GB, NVLink "
           "through NVSwitch, 2 x EPYC 7742", A100_SXM4_80GB, _DGX_A100_BUS_IDS, 128,
           1024 * GIB, _ALL_EIGHT, _ONPREM_DRIVER),
    _shape("l40s-4", "Inference server: 4 x L40S 48GB PCIe, no NVLink", L40S,
           _PCIE_SERVER_BUS_IDS[:4], 64, 512 * GIB, (), _ONPREM_DRIVER),
    _shape("l40s-8", "Inference server: 8 x L40S 48GB PCIe, no NVLink", L40S,
           _PCIE_SERVER_BUS_IDS, 96, 1024 * GIB, (), _ONPREM_DRIVER),
    _shape("mig-h100", "MIG slicing node: HGX H100 8-GPU with MIG enabled", H100_SXM,
           _DGX_H100_BUS_IDS, 112, 2048 * GIB, _ALL_EIGHT, _ONPREM_DRIVER,
           mig_layouts=H100_MIG_LAYOUTS),
    _shape("mig-a100", "MIG slicing node: HGX A100 8-GPU with MIG enabled", A100_SXM4_80GB,
           _DGX_A100_BUS_IDS, 128, 1024 * GIB, _ALL_EIGHT, _ONPREM_DRIVER,
           mig_layouts=A100_MIG_LAYOUTS),
)}


class UnknownShapeError(ValueError):
    pass


def shape_named(name: str) -> Shape:
    """The shape, or an error whose message lists the known names."""
    try:
        return SHAPES[name]
    except KeyError:
        raise UnknownShapeError(
            f"unknown shape {name!r}; known shapes: {', '.join(SHAPES)}") from None
