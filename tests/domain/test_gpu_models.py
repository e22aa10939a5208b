"""The GPU model catalogue: every model resolves from each of its names and PCI ids."""

from __future__ import annotations

import pytest

from gpufleet.domain.gpu_models import catalogue, model, normalise_model

MODELS = sorted(catalogue().values(), key=lambda m: m.key)

BY_NAME = [(m.key, name) for m in MODELS for name in m.nvml_names]
BY_PCI = [(m.key, pci) for m in MODELS for pci in m.pci_device_ids]


def test_catalogue_holds_the_reference_models_and_the_extras():
    keys = {m.key for m in MODELS}
    assert {"A100-40GB", "A100-80GB", "A30-24GB", "H100-80GB", "H100-NVL-94GB", "H100-96GB",
            "H200-141GB", "B200-180GB", "RTX-PRO-6000-96GB"} <= keys
    assert {"L40S-48GB", "L4-24GB", "T4-16GB"} <= keys
    for m in MODELS:
        assert m.nvml_names, f"{m.key} has no NVML names"
        assert m.pci_device_ids, f"{m.key} has no PCI device ids"


def test_mig_capability_follows_the_geometry():
    assert model("H100-80GB").mig_capable
    assert model("A30-24GB").mig_capable
    assert not model("L40S-48GB").mig_capable
    assert model("no-such-model") is None


@pytest.mark.parametrize(("key", "name"), BY_NAME, ids=[f"{k} <= {n!r}" for k, n in BY_NAME])
def test_every_nvml_name_normalises(key, name):
    assert normalise_model(name) == normalise_model(name, None)
    resolved = normalise_model(name)
    assert (resolved.key, resolved.known) == (key, True)
    # Drivers vary case, spacing and the vendor prefix; none of it changes the answer.
    for variant in (name.upper(), f"  {name.lower()}  ", name.removeprefix("NVIDIA ")):
        assert normalise_model(variant).key == key


@pytest.mark.parametrize(("key", "pci"), BY_PCI, ids=[f"{k} <= {p:#010x}" for k, p in BY_PCI])
def test_every_pci_id_normalises(key, pci):
    resolved = normalise_model("some name the driver invented", pci)
    assert (resolved.key, resolved.known) == (key, True)


def test_no_pci_id_or_name_is_claimed_by_two_models():
    pci_owners: dict[int, str] = {}
    for key, pci in BY_PCI:
        assert pci_owners.setdefault(pci, key) == key, f"{pci:#x} is {pci_owners[pci]} and {key}"
    name_owners: dict[str, str] = {}
    for key, name in BY_NAME:
        form = name.strip().lower().removeprefix("nvidia ").strip()
        assert name_owners.setdefault(form, key) == key, f"{name!r} names two models"


def test_pci_id_wins_over_the_name():
    resolved = normalise_model("NVIDIA A100-SXM4-40GB", 0x233010DE)
    assert (resolved.key, resolved.known) == ("H100-80GB", True)


def test_unknown_pci_id_falls_back_to_the_name():
    resolved = normalise_model("NVIDIA L40S", 0xFFFF10DE)
    assert (resolved.key, resolved.known) == ("L40S-48GB", True)


def test_model_key_is_accepted_as_a_name():
    assert normalise_model("H100-80GB").key == "H100-80GB"


@pytest.mark.parametrize(
    ("name", "pci"),
    [("NVIDIA GeForce RTX 5090", None), ("NVIDIA GeForce RTX 5090", 0x2B8510DE),
     ("  Some Future GPU  ", 0x12345678), ("NVIDIA H100", None)],
)
def test_unknown_models_stay_as_reported(name, pci):
    resolved = normalise_model(name, pci)
    assert resolved.known is False
    assert resolved.key == name.strip()
