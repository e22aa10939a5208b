"""The dcgm-exporter inventory reads a GPU's model from every signal its page has, and never
drops a MIG instance it cannot identify (agent/dcgm_inventory.py)."""

from __future__ import annotations

import re

from gpufleet.agent.dcgm_inventory import registration_from_page
from gpufleet.agent.host import HostFacts
from tests.paths import DATA_DIR

PAGE = (DATA_DIR / "dcgm_exporter" / "a100_mig.txt").read_text()
HOST = HostFacts("machine-1", "a100-mig-03", 64, 512 * 1024**3, "Linux 6.8")
A100_LAYOUT = [(1, "3g.20gb", 9), (5, "2g.10gb", 14), (13, "1g.5gb", 19), (14, "1g.5gb", 19)]


def without_model_name(page: str) -> str:
    return re.sub(r'modelName="[^"]*",?', "", page)


def layout(gpu) -> list[tuple]:
    return sorted((m.gpu_instance_id, m.profile_name, m.profile_id) for m in gpu.mig_instances)


def test_a_page_without_model_name_keeps_its_mig_instances():
    mig_gpu, plain_gpu = registration_from_page(without_model_name(PAGE), HOST).gpus
    assert mig_gpu.mig_enabled and mig_gpu.mig_instances_unread == 0
    assert layout(mig_gpu) == A100_LAYOUT
    # 1g.5gb exists on the A100-40GB alone: the profile names say the model.
    assert mig_gpu.name == "NVIDIA A100-SXM4-40GB"
    # Nothing on the page says what the GPU without MIG is: it stays unknown, not guessed.
    assert (plain_gpu.name, plain_gpu.mig_enabled) == ("unknown", False)


def test_the_device_name_label_names_the_model():
    page = without_model_name(PAGE).replace(
        'gpu="1",', 'gpu="1",DCGM_FI_DEV_NAME="NVIDIA H100 80GB HBM3",')
    assert registration_from_page(page, HOST).gpus[1].name == "NVIDIA H100 80GB HBM3"


def test_the_pci_device_id_label_resolves_the_model_and_is_reported():
    # 1g.10gb is profile 15 on the A100-40GB but 19 on the A100-80GB and H100-80GB: only
    # the model tells, and here only the PCI device id says it.
    page = re.sub(r'GPU_I_PROFILE="[^"]*"', 'GPU_I_PROFILE="1g.10gb"', without_model_name(PAGE))
    unnamed = registration_from_page(page, HOST).gpus[0]
    assert (unnamed.name, unnamed.mig_instances_unread) == ("unknown", 4)
    page = page.replace('gpu="0",', 'gpu="0",DCGM_FI_DEV_PCI_COMBINED_ID="0x20B010DE",')
    mig_gpu = registration_from_page(page, HOST).gpus[0]
    assert mig_gpu.pci_device_id == 0x20B010DE
    assert [m.profile_id for m in mig_gpu.mig_instances] == [15, 15, 15, 15]
    assert mig_gpu.mig_instances_unread == 0


def test_a_bad_pci_device_id_label_is_ignored_not_fatal():
    page = PAGE.replace('gpu="1",', 'gpu="1",DCGM_FI_DEV_PCI_COMBINED_ID="-0x1",')
    assert registration_from_page(page, HOST).gpus[1].pci_device_id is None


def test_profiles_that_fit_several_models_alike_keep_their_ids():
    # 1g.10gb, 2g.20gb and 3g.40gb: the A100-80GB and the H100-80GB number them the same.
    page = (without_model_name(PAGE).replace('"3g.20gb"', '"3g.40gb"')
            .replace('"2g.10gb"', '"2g.20gb"').replace('"1g.5gb"', '"1g.10gb"'))
    mig_gpu = registration_from_page(page, HOST).gpus[0]
    assert mig_gpu.name == "unknown"  # two models fit: none is chosen
    assert [(m.profile_name, m.profile_id) for m in mig_gpu.mig_instances] == [
        ("3g.40gb", 9), ("2g.20gb", 14), ("1g.10gb", 19), ("1g.10gb", 19)]
    assert mig_gpu.mig_instances_unread == 0


def test_an_instance_whose_profile_cannot_be_told_is_counted_not_dropped():
    page = PAGE.replace('GPU_I_PROFILE="2g.10gb"', 'GPU_I_PROFILE="2g.11gb"')
    mig_gpu = registration_from_page(page, HOST).gpus[0]
    assert mig_gpu.name == "NVIDIA A100-SXM4-40GB"
    assert mig_gpu.mig_instances_unread == 1
    assert [m.gpu_instance_id for m in mig_gpu.mig_instances] == [1, 13, 14]
