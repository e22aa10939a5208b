"""SimBackend applies valid MIG plans like the driver would and refuses invalid ones."""

from __future__ import annotations

import pytest

from gpufleet.agent.backend import GpuBackend
from gpufleet.domain.inventory import SharingMode
from gpufleet.sim.backend import (
    DesiredStateRejected,
    SimBackend,
    fleet_backends,
    standalone_backend,
)
from gpufleet.sim.fleet_spec import load_default_spec
from gpufleet.sim.scaled import scaled_spec
from gpufleet.wire.agent import DesiredState


def plan(gpu_uuid: str, *instances: tuple[int, int]) -> dict:
    return {"gpu_uuid": gpu_uuid,
            "instances": [{"profile_id": p, "placement_start": s} for p, s in instances]}


def state(version: int, *plans: dict, bindings: list | None = None) -> DesiredState:
    return DesiredState.model_validate(
        {"version": version, "mig_plans": list(plans), "bindings": bindings or []})


def layout(backend: SimBackend, index: int) -> list[tuple[int, int]]:
    gpu = backend.discover().gpus[index]
    return [(i.profile_id, i.placement_start) for i in gpu.mig_instances]


def test_is_a_gpu_backend():
    backend: GpuBackend = standalone_backend("dgx-h100", "node-1")
    assert backend.name == "sim"
    assert backend.discover().backend == "sim"


def test_applies_a_valid_mig_plan():
    backend = standalone_backend("mig-h100", "node-1")
    gpu = backend.discover().gpus[0]
    backend.apply_desired_state(state(1, plan(gpu.uuid, (5, 0), (9, 4))))  # 4g.40gb + 3g.40gb
    assert layout(backend, 0) == [(5, 0), (9, 4)]
    after = backend.discover().gpus[0]
    assert [i.profile_name for i in after.mig_instances] == ["4g.40gb", "3g.40gb"]
    untouched = standalone_backend("mig-h100", "node-1").discover().gpus[1]
    assert backend.discover().gpus[1] == untouched
    assert backend.applied_version == 1


def test_refuses_an_invalid_plan_and_changes_nothing():
    backend = standalone_backend("mig-h100", "node-1")
    before = backend.discover()
    uuid0, uuid1 = before.gpus[0].uuid, before.gpus[1].uuid
    bad = state(2, plan(uuid0, (19, 0)), plan(uuid1, (9, 0), (9, 2)))  # overlapping 3g
    with pytest.raises(DesiredStateRejected, match=f"GPU {uuid1}: .*cannot start at"):
        backend.apply_desired_state(bad)
    assert backend.discover() == before
    assert backend.applied_version is None


@pytest.mark.parametrize("shape, plans, message", [
    ("mig-h100", [plan("GPU-00000000-0000-0000-0000-000000000000", (0, 0))],
     "is not on node"),
    ("l40s-4", None, r"\(L40S-48GB\) cannot do MIG"),
    ("mig-a100", "twice", "has two MIG plans"),
    ("mig-h100", "overcap", "exceed its cap"),
])
def test_refusals_name_the_reason(shape, plans, message):
    backend = standalone_backend(shape, "node-1")
    uuid = backend.discover().gpus[0].uuid
    if plans is None:
        plans = [plan(uuid, (0, 0))]
    elif plans == "twice":
        plans = [plan(uuid, (0, 0)), plan(uuid, (0, 0))]
    elif plans == "overcap":
        plans = [plan(uuid, (20, 0), (20, 1))]  # 1g.10gb+me is capped at one
    with pytest.raises(DesiredStateRejected, match=message):
        backend.apply_desired_state(state(1, *plans))


def test_reapplying_keeps_instances_and_a_new_layout_recreates_them():
    backend = standalone_backend("mig-h100", "node-1")
    uuid = backend.discover().gpus[0].uuid
    backend.apply_desired_state(state(1, plan(uuid, (9, 0), (9, 4))))
    first = [i.mig_uuid for i in backend.discover().gpus[0].mig_instances]
    backend.apply_desired_state(state(2, plan(uuid, (9, 4), (9, 0))))
    assert [i.mig_uuid for i in backend.discover().gpus[0].mig_instances] == first
    backend.apply_desired_state(state(3, plan(uuid, (0, 0))))
    assert layout(backend, 0) == [(0, 0)]
    assert backend.discover().gpus[0].mig_instances[0].mig_uuid not in first


def test_a_plan_enables_mig_on_a_capable_gpu_and_bindings_are_recorded():
    backend = standalone_backend("dgx-h100", "node-1")
    gpu = backend.discover().gpus[3]
    binding = {"unit": "u1", "gpu_uuid": gpu.uuid, "allocation": "GR-1042", "project": "p",
               "mig_profile_id": 19, "placement_start": 0}
    backend.apply_desired_state(state(1, plan(gpu.uuid, *[(19, s) for s in range(7)]),
                                      bindings=[binding]))
    after = backend.discover().gpus[3]
    assert after.mig_enabled and after.sharing_mode is SharingMode.MIG
    assert len(after.mig_instances) == 7
    assert [b.allocation for b in backend.bindings] == ["GR-1042"]
    empty = state(2, plan(gpu.uuid))
    backend.apply_desired_state(empty)
    assert backend.discover().gpus[3].mig_instances == [] and backend.bindings == []


def test_backends_for_a_whole_spec():
    backends = fleet_backends(load_default_spec())
    assert sum(len(b.discover().gpus) for b in backends) == load_default_spec().gpu_count
    assert len(fleet_backends(scaled_spec(3))) == 3
