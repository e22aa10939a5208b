"""Invariants of placement under random fleets and random demand sequences (Hypothesis).

After every step: no GPU holds more than 1000 milli-GPU or less than none, no unit is held
twice, every MIG layout is valid per `layout_problems`, host resources never go negative,
a refusal changes nothing, and commit followed by release restores the fleet exactly.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.domain.inventory import SharingMode
from gpufleet.domain.mig import MigInstanceSpec, layout_problems
from gpufleet.domain.placement import (
    POLICIES,
    Decision,
    Demand,
    FleetState,
    GpuState,
    MigSlot,
    NodeState,
    Placer,
    Refusal,
    UnitKind,
    Workload,
    geometry_of,
)

MODELS = ("H100-80GB", "A100-40GB", "L40S-48GB")
STARTING_LAYOUTS = {  # (profile id, start) on the 8-slice A100 / H100 geometry
    "empty": [], "7g": [(0, 0)], "2x3g": [(9, 0), (9, 4)], "4g+3g": [(5, 0), (9, 4)],
    "3x2g+1g": [(14, 0), (14, 2), (14, 4), (19, 6)],
}
MIG_PROFILES = ("1g.10gb", "1g.5gb", "2g.20gb", "2g.10gb", "3g.40gb", "3g.20gb", "4g.40gb",
                "7g.80gb", "1g.10gb+me", "1g.20gb")


@st.composite
def gpus(draw, name: str, count: int):
    model = draw(st.sampled_from(MODELS))
    mode = draw(st.sampled_from(list(SharingMode)))
    if mode is SharingMode.MIG and geometry_of(model) is None:
        mode = SharingMode.SHARED
    states = []
    for index in range(count):
        slots = []
        if mode is SharingMode.MIG:
            layout = STARTING_LAYOUTS[draw(st.sampled_from(sorted(STARTING_LAYOUTS)))]
            slots = [MigSlot(pid, start, draw(st.booleans())) for pid, start in layout]
        states.append(GpuState(
            f"{name}/{index}", index, model, mode, usable=draw(st.booleans() | st.just(True)),
            whole_bound=mode is SharingMode.EXCLUSIVE and draw(st.booleans()),
            used_milli=draw(st.integers(0, 1000)) if mode is SharingMode.SHARED else 0,
            mig_instances=slots,
            nvlink_peers=frozenset(f"{name}/{j}" for j in range(count) if j != index)))
    return states


@st.composite
def fleets(draw) -> FleetState:
    nodes = []
    for number in range(draw(st.integers(1, 4))):
        name = f"n{number}"
        nodes.append(NodeState(
            name, draw(gpus(name, draw(st.integers(1, 4)))),
            environment=draw(st.sampled_from(["a", "b"])), schedulable=draw(st.booleans()
                                                                              | st.just(True)),
            cpu_milli_free=draw(st.none() | st.integers(0, 16_000)),
            memory_mib_free=draw(st.none() | st.integers(0, 64)),
            max_tasks=draw(st.none() | st.integers(0, 6))))
    return FleetState(nodes)


demands = st.builds(
    Demand,
    kind=st.sampled_from(list(UnitKind)),
    count=st.integers(0, 4),
    models=st.none() | st.frozensets(st.sampled_from(MODELS), min_size=1),
    mig_profile=st.sampled_from(MIG_PROFILES),
    milli=st.integers(1, 999),
    cpu_milli=st.integers(0, 6000),
    memory_mib=st.integers(0, 24),
    same_node=st.booleans(),
    nvlink=st.booleans(),
    environments=st.none() | st.frozensets(st.sampled_from(["a", "b"]), min_size=1),
)


def check_invariants(fleet: FleetState, held: list[Decision]) -> None:
    # the running sums the default policy reads equal a count from scratch
    counted = [(node.cpu_milli_free, fleet.summary(node.name).free_milli)
               for node in fleet.nodes if node.cpu_milli_free is not None
               and fleet.summary(node.name).open and fleet.summary(node.name).free_milli]
    assert fleet.open_free_cpu_milli == sum(cpu for cpu, _ in counted)
    assert fleet.open_free_gpu_milli == sum(gpu for _, gpu in counted)
    for node in fleet.nodes:
        if node.cpu_milli_free is not None:
            assert node.cpu_milli_free >= 0
        if node.memory_mib_free is not None:
            assert node.memory_mib_free >= 0
        for gpu in node.gpus:
            assert 0 <= gpu.used_milli <= 1000
            geometry = geometry_of(gpu.model)
            if gpu.sharing_mode is SharingMode.MIG and geometry is not None:
                specs = [MigInstanceSpec(s.profile_id, s.start) for s in gpu.mig_instances]
                assert layout_problems(geometry, specs) == []
    whole, instances = set(), set()
    for decision in held:
        for unit in decision.units:
            gpu = fleet.gpu(unit.gpu)
            if unit.kind is UnitKind.MIG:
                where = (unit.gpu, unit.mig_profile_id, unit.mig_start)
                assert where not in instances
                instances.add(where)
                assert any(s.bound and (s.profile_id, s.start) == where[1:]
                           for s in gpu.mig_instances)
            elif unit.kind is UnitKind.WHOLE:
                assert unit.gpu not in whole
                whole.add(unit.gpu)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), sequence=st.lists(st.tuples(demands, st.booleans()), max_size=12),
       policy=st.sampled_from(POLICIES), from_shared=st.booleans())
def test_invariants_hold_over_any_sequence(fleet, sequence, policy, from_shared):
    placer = Placer(fleet, policy, whole_gpus_from_shared=from_shared)
    held: list[Decision] = []
    check_invariants(fleet, held)
    for demand, release_one in sequence:
        before = fleet.to_json()
        result = placer.decide(demand)
        assert fleet.to_json() == before  # deciding is pure
        if isinstance(result, Refusal):
            assert result.reason and result.message
            continue
        assert result.units or demand.host_only
        if not demand.host_only:
            assert len(result.units) == demand.count
        if demand.same_node or demand.nvlink:
            assert len(result.nodes) == 1
        if demand.nvlink:
            keys = [u.gpu for u in result.units]
            assert all(b in fleet.gpu(a).nvlink_peers for a in keys for b in keys if a != b)
        for unit in result.units:
            gpu = fleet.gpu(unit.gpu)
            node = fleet.node_of_gpu(unit.gpu)
            assert node.schedulable and gpu.usable
            assert demand.models is None or gpu.model in demand.models
            assert demand.environments is None or node.environment in demand.environments
        placer.commit(result)
        check_invariants(fleet, [*held, result])
        placer.release(result)
        assert fleet.to_json() == before  # commit + release restores the fleet
        placer.commit(result)
        held.append(result)
        check_invariants(fleet, held)
        if release_one and held:
            placer.release(held.pop(0))
            check_invariants(fleet, held)


@st.composite
def twin_fleets(draw) -> FleetState:
    """Nodes in groups alike in their GPUs (one shape) but not in their host resources."""
    nodes = []
    for group in range(draw(st.integers(1, 2))):
        template = draw(gpus("t", draw(st.integers(1, 3))))
        for copy in range(draw(st.integers(2, 3))):
            name = f"n{group}{copy}"
            states = [GpuState(f"{name}/{g.index}", g.index, g.model, g.sharing_mode,
                               usable=g.usable, whole_bound=g.whole_bound,
                               used_milli=g.used_milli,
                               mig_instances=[MigSlot(s.profile_id, s.start, s.bound)
                                              for s in g.mig_instances],
                               nvlink_peers=frozenset(p.replace("t/", f"{name}/")
                                                      for p in g.nvlink_peers))
                      for g in template]
            nodes.append(NodeState(
                name, states, environment=draw(st.sampled_from(["a", "b"])),
                cpu_milli_free=draw(st.none() | st.sampled_from([0, 2000, 8000])),
                memory_mib_free=draw(st.none() | st.sampled_from([0, 16, 64])),
                max_tasks=draw(st.none() | st.integers(1, 3))))
    return FleetState(nodes)


plain_demands = st.builds(  # no filters: most of them fit somewhere on a twin fleet
    Demand,
    kind=st.sampled_from(list(UnitKind)),
    count=st.integers(0, 2),
    mig_profile=st.sampled_from(MIG_PROFILES),
    milli=st.sampled_from([250, 500, 700]),
    cpu_milli=st.sampled_from([0, 1000, 3000]),
    memory_mib=st.sampled_from([0, 8, 20]),
    same_node=st.booleans(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=twin_fleets(), sequence=st.lists(plain_demands, min_size=1, max_size=10),
       policy=st.sampled_from(POLICIES), from_shared=st.booleans())
def test_cached_plans_and_ranks_never_change_an_answer(fleet, sequence, policy, from_shared):
    # A placer reuses plans across nodes of one shape and ranks across nodes of one shape
    # and host resources, within a decision and across decisions. The reference is a
    # fresh placer with that reuse switched off, on the same fixed workload.
    workload = Workload(sequence)
    placer = Placer(fleet, policy, whole_gpus_from_shared=from_shared, workload=workload,
                    learn=False)
    for demand in sequence:
        reference = Placer(fleet, policy, whole_gpus_from_shared=from_shared,
                           workload=workload, learn=False)
        reference._shapes = None  # decide every plan and rank afresh
        result = placer.decide(demand)
        assert result == reference.decide(demand)
        if isinstance(result, Decision):
            placer.commit(result)
