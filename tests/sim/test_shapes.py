"""Simulated hardware shapes report what the real hardware reports."""

from __future__ import annotations

import pytest

from gpufleet.domain.gpu_models import normalise_model
from gpufleet.sim.shapes import SHAPES, UnknownShapeError, shape_named

GIB = 1024**3


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_shape_gpu_normalises_to_a_known_model(name):
    gpu = SHAPES[name].gpu
    by_id = normalise_model(gpu.nvml_name, gpu.pci_device_id)
    by_name = normalise_model(gpu.nvml_name)
    assert by_id.known and by_name.known
    assert by_id.key == by_name.key == gpu.model_key


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shape_figures_are_consistent(name):
    shape = SHAPES[name]
    assert len(set(shape.pci_bus_ids)) == shape.gpu_count
    assert all(len(bus_id) == len("00000000:1B:00.0") for bus_id in shape.pci_bus_ids)
    covered = [i for domain in shape.nvlink_domains for i in domain]
    assert len(covered) == len(set(covered))
    assert set(covered) <= set(range(shape.gpu_count))
    assert 40 * GIB < shape.gpu.memory_bytes < 81 * GIB  # NVML totals, below the label
    assert shape.gpu.pci_device_id & 0xFFFF == 0x10DE  # NVIDIA's vendor id, NVML's form


def test_real_figures_of_the_named_systems():
    nd = shape_named("azure-nd-h100-v5")
    assert (nd.instance_type, nd.gpu_count, nd.cpu_cores, nd.memory_bytes) == (
        "Standard_ND96isr_H100_v5", 8, 96, 1900 * GIB)
    assert nd.gpu.nvml_name == "NVIDIA H100 80GB HBM3" and nd.gpu.pci_device_id == 0x233010DE
    nc = shape_named("azure-nc-a100-v4")
    assert (nc.instance_type, nc.gpu_count, nc.cpu_cores, nc.memory_bytes) == (
        "Standard_NC96ads_A100_v4", 4, 96, 880 * GIB)
    assert nc.gpu.pci_device_id == 0x20B510DE and nc.nvlink_domains == ()
    assert shape_named("dgx-h100").cpu_cores == 112
    assert shape_named("hgx-a100").gpu.nvml_name == "NVIDIA A100-SXM4-80GB"
    assert shape_named("l40s-8").gpu.pci_device_id == 0x26B910DE


def test_unknown_shape_lists_the_known_ones():
    with pytest.raises(UnknownShapeError, match=r"known shapes: .*dgx-h100"):
        shape_named("dgx-h200")
