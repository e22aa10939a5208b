"""Simulated nodes: deterministic, unique, and as valid as real hardware reports."""

from __future__ import annotations

import re
from functools import cache

import pytest

from gpufleet.domain.gpu_models import model, normalise_model
from gpufleet.domain.inventory import SharingMode
from gpufleet.domain.mig import MigInstanceSpec, layout_problems
from gpufleet.sim.fleet_spec import load_default_spec
from gpufleet.sim.nodes import build_fleet, build_standalone_node

UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@cache
def default_fleet():
    return tuple(build_fleet(load_default_spec()))


def all_gpus():
    return [(node, gpu) for node in default_fleet() for gpu in node.registration.gpus]


def test_same_seed_gives_byte_identical_registrations():
    spec = load_default_spec()
    first = [n.registration.model_dump_json() for n in build_fleet(spec)]
    again = [n.registration.model_dump_json() for n in build_fleet(spec)]
    assert first == again


def test_a_different_seed_gives_different_identities():
    spec = load_default_spec()
    other = spec.model_copy(update={"seed": spec.seed + 1})
    uuids = {g.uuid for n in build_fleet(spec) for g in n.registration.gpus}
    other_uuids = {g.uuid for n in build_fleet(other) for g in n.registration.gpus}
    assert uuids.isdisjoint(other_uuids)
    assert ([n.registration.machine_id for n in build_fleet(spec)]
            != [n.registration.machine_id for n in build_fleet(other)])


def test_identities_are_unique_and_well_formed_across_the_fleet():
    gpus = all_gpus()
    assert len(gpus) == load_default_spec().gpu_count
    uuids = [gpu.uuid for _, gpu in gpus]
    assert len(set(uuids)) == len(uuids)
    assert all(UUID.match(u) for u in uuids)
    mig_uuids = [i.mig_uuid for _, gpu in gpus for i in gpu.mig_instances]
    assert mig_uuids and len(set(mig_uuids)) == len(mig_uuids)
    assert all(MIG_UUID.match(u) for u in mig_uuids)
    machine_ids = [node.registration.machine_id for node in default_fleet()]
    hostnames = [node.hostname for node in default_fleet()]
    assert len(set(machine_ids)) == len(set(hostnames)) == len(default_fleet())


def test_every_gpu_normalises_to_a_known_model():
    for _, gpu in all_gpus():
        found = normalise_model(gpu.name, gpu.pci_device_id)
        assert found.known, gpu.name
        assert normalise_model(gpu.name).key == found.key


def test_every_mig_gpu_carries_a_valid_layout():
    mig_gpus = [(node, gpu) for node, gpu in all_gpus() if gpu.mig_enabled]
    assert len(mig_gpus) == 144
    layouts = set()
    for _, gpu in mig_gpus:
        assert gpu.sharing_mode is SharingMode.MIG
        geometry = model(normalise_model(gpu.name, gpu.pci_device_id).key).mig
        specs = [MigInstanceSpec(i.profile_id, i.placement_start) for i in gpu.mig_instances]
        assert gpu.mig_instances and layout_problems(geometry, specs) == []
        for instance in gpu.mig_instances:
            profile = geometry.profile(instance.profile_id)
            assert (instance.profile_name, instance.placement_size) == (
                profile.name, profile.memory_slices)
        layouts.add(tuple(sorted(i.profile_name for i in gpu.mig_instances)))
    assert len(layouts) >= 6  # varied, not one layout everywhere


def test_nvlink_peers_are_symmetric_and_within_the_node():
    for node in default_fleet():
        uuids = {gpu.uuid for gpu in node.registration.gpus}
        peers = {gpu.uuid: set(gpu.nvlink_peers or ()) for gpu in node.registration.gpus}
        for uuid, linked in peers.items():
            assert uuid not in linked
            assert linked <= uuids
            assert all(uuid in peers[other] for other in linked)
        if node.shape.nvlink_domains:
            assert all(len(linked) == node.gpu_count - 1 for linked in peers.values())
        else:
            assert all(gpu.nvlink_peers is None for gpu in node.registration.gpus)


def test_sharing_modes_and_labels_follow_the_spec():
    by_prefix = {}
    for node in default_fleet():
        by_prefix.setdefault(node.hostname.rsplit("-", 1)[0], node)
    shared = by_prefix["ts-l40s4"].registration.gpus
    assert {g.sharing_mode for g in shared} == {SharingMode.SHARED}
    assert not any(g.mig_enabled for g in shared)
    assert {g.sharing_mode for g in by_prefix["dgx-h100"].registration.gpus} == {None}
    azure = by_prefix["aks-ndh100v5"]
    assert azure.environment == "azure-koreacentral"
    assert azure.registration.labels["instance-type"] == "Standard_ND96isr_H100_v5"
    assert azure.registration.labels["zone"] == "1"
    assert by_prefix["dgx-h100"].registration.labels["rack"] == "dgx-h100-r01"
    assert all(node.registration.backend == "sim" for node in default_fleet())


@pytest.mark.parametrize("shape", ["dgx-h100", "mig-h100", "l40s-4", "azure-nc-a100-v4"])
def test_standalone_nodes_are_deterministic(shape):
    node = build_standalone_node(shape, "node-1", seed=3)
    assert node.registration == build_standalone_node(shape, "node-1", seed=3).registration
    assert node.registration != build_standalone_node(shape, "node-1", seed=4).registration
    assert node.environment is None
    if shape == "mig-h100":
        assert all(gpu.mig_enabled and gpu.mig_instances for gpu in node.registration.gpus)
