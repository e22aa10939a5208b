"""The GPU model catalogue and the normalisation of what a node reports to a model key.

Model keys are short and stable (`H100-80GB`, `A100-80GB`, `L40S-48GB`): the CLI's
`--model`, the API's filters and placement all use them. A node reports an NVML name
(`NVIDIA H100 80GB HBM3`) and a PCI device id (`0x233010DE`); the PCI id is tried first
because names vary with the driver. A model gpufleet does not know is kept exactly as
reported and flagged `model_known = false`, never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from gpufleet.domain.mig import MigGeometry, MigProfile, Placement

# Reference model name (mig_geometry.json) -> gpufleet model key.
_REFERENCE_KEYS = {
    "A100-SXM4-40GB": "A100-40GB",
    "A100-80GB (SXM4 and PCIe)": "A100-80GB",
    "A30-24GB": "A30-24GB",
    "H100-80GB (SXM5 and PCIe)": "H100-80GB",
    "H100-NVL-94GB": "H100-NVL-94GB",
    "H100-96GB (GH200)": "H100-96GB",
    "H200-141GB": "H200-141GB",
    "B200 (180GB)": "B200-180GB",
    "RTX PRO 6000 Blackwell (Server / Workstation / Max-Q, 96GB)": "RTX-PRO-6000-96GB",
}


@dataclass(frozen=True)
class GpuModel:
    key: str
    architecture: str
    nvml_names: tuple[str, ...]
    pci_device_ids: tuple[int, ...]
    mig: MigGeometry | None

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None


@dataclass(frozen=True)
class NormalisedModel:
    """What a reported GPU resolved to: a catalogue key, or the reported name, flagged."""

    key: str
    known: bool


def _parse_pci_id(text: str) -> int:
    return int(text, 16)


def _mig_geometry(entry: dict) -> MigGeometry:
    profiles = tuple(
        MigProfile(
            profile_id=p["profile_id"],
            name=p["name"],
            compute_slices=p["compute_slices"],
            memory_slices=p["memory_slices"],
            max_instances=p["max_instances"],
            placements=tuple(Placement(x["start"], x["size"]) for x in p["placements"]),
            memory_gib=p.get("memory_gib_nvidia_smi"),
            nvml_profile_enum=p.get("nvml_profile_enum"),
        )
        for p in entry["profiles"]
    )
    return MigGeometry(
        memory_slices_total=entry["memory_slices_total"],
        compute_slices_total=entry["compute_slices_total"],
        max_gpu_instances=entry["max_gpu_instances"],
        profiles=profiles,
        placements_inferred=bool(entry.get("placements_inferred", False)),
    )


def _load_json(name: str) -> dict:
    return json.loads(resources.files("gpufleet.domain").joinpath("data", name).read_text())


@cache
def catalogue() -> dict[str, GpuModel]:
    """All known models by key. Loaded once from the package's data files."""
    models: dict[str, GpuModel] = {}
    for entry in _load_json("mig_geometry.json")["gpus"]:
        key = _REFERENCE_KEYS.get(entry["model"])
        if key is None:
            continue
        models[key] = GpuModel(
            key=key,
            architecture=entry["architecture"],
            nvml_names=tuple(entry.get("nvml_names") or ()),
            pci_device_ids=tuple(_parse_pci_id(x) for x in entry.get("pci_device_ids", {})),
            mig=_mig_geometry(entry),
        )
    for entry in _load_json("gpu_models_extra.json")["models"]:
        models[entry["key"]] = GpuModel(
            key=entry["key"],
            architecture=entry["architecture"],
            nvml_names=tuple(entry["nvml_names"]),
            pci_device_ids=tuple(_parse_pci_id(x) for x in entry["pci_device_ids"]),
            mig=None,
        )
    return models


def _name_form(name: str) -> str:
    name = name.strip().lower()
    return name.removeprefix("nvidia ").strip()


@cache
def _indexes() -> tuple[dict[int, str], dict[str, str]]:
    by_pci: dict[int, str] = {}
    by_name: dict[str, str] = {}
    for model in catalogue().values():
        for pci_id in model.pci_device_ids:
            by_pci.setdefault(pci_id, model.key)
        for name in model.nvml_names:
            by_name.setdefault(_name_form(name), model.key)
        by_name.setdefault(_name_form(model.key), model.key)
    return by_pci, by_name


def normalise_model(reported_name: str, pci_device_id: int | None = None) -> NormalisedModel:
    """Resolve what NVML reported to a model key; unknown models are kept as reported."""
    by_pci, by_name = _indexes()
    if pci_device_id is not None and pci_device_id in by_pci:
        return NormalisedModel(by_pci[pci_device_id], True)
    key = by_name.get(_name_form(reported_name))
    if key is not None:
        return NormalisedModel(key, True)
    return NormalisedModel(reported_name.strip(), False)


def model(key: str) -> GpuModel | None:
    return catalogue().get(key)


def mig_models_naming(profile_names: Iterable[str]) -> list[GpuModel]:
    """The MIG-capable models whose geometry has a profile of every name given.

    For a source that may not say a GPU's model (a dcgm-exporter page without `modelName`)
    but names its MIG instances' profiles: `1g.5gb` exists on the A100-40GB only, while
    `1g.10gb` fits the A100-80GB and the H100-80GB alike (which number it the same). Empty
    for no names: nothing was seen, so nothing is implied.
    """
    names = set(profile_names)
    if not names:
        return []
    return [m for m in catalogue().values()
            if m.mig is not None and names <= {p.name for p in m.mig.profiles}]
