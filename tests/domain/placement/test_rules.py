"""Placement rules (docs/design.md, "Placement"), one at a time, on hand-built fleets."""

from __future__ import annotations

import pytest

from gpufleet.domain.mig import layout_problems
from gpufleet.domain.placement import (
    POLICIES,
    Decision,
    Demand,
    FleetState,
    Placer,
    Refusal,
    StaleDecision,
    UnitKind,
    Workload,
    geometry_of,
)
from gpufleet.domain.placement import workload as workload_module
from tests.placement_builders import MIG, SHARED, fleet, node

WHOLE = UnitKind.WHOLE


def whole(count: int = 1, **kw) -> Demand:
    return Demand(WHOLE, count, **kw)


def shared(milli: int, count: int = 1, **kw) -> Demand:
    return Demand(UnitKind.SHARED, count, milli=milli, **kw)


def mig(profile: str, count: int = 1, **kw) -> Demand:
    return Demand(UnitKind.MIG, count, mig_profile=profile, **kw)


def placed(placer: Placer, demand: Demand, **kw) -> Decision:
    decision = placer.decide(demand, **kw)
    assert isinstance(decision, Decision), decision
    return decision


def refused(placer: Placer, demand: Demand, reason: str) -> Refusal:
    before = placer.fleet.to_json()
    refusal = placer.decide(demand)
    assert isinstance(refusal, Refusal), refusal
    assert refusal.reason == reason, refusal
    assert refusal.message
    assert placer.fleet.to_json() == before
    return refusal


# --- whole GPUs --------------------------------------------------------------------------
def test_whole_takes_distinct_free_gpus_and_commit_binds_them():
    state = fleet(node("a", 4))
    placer = Placer(state)
    first = placed(placer, whole(3))
    assert len({u.gpu for u in first.units}) == 3
    assert all(u.milli == 1000 and u.kind is WHOLE for u in first.units)
    placer.commit(first)
    assert sum(g.whole_bound for g in state.node("a").gpus) == 3
    second = placed(placer, whole(1))
    assert second.units[0].gpu not in {u.gpu for u in first.units}
    placer.commit(second)
    refused(placer, whole(1), "no_capacity")


def test_nothing_lands_on_an_unschedulable_node_or_an_unusable_gpu():
    state = fleet(node("cordoned", 4, schedulable=False), node("b", 2))
    state.node("b").gpus[0].usable = False
    state.refresh("b")
    placer = Placer(state)
    decision = placed(placer, whole(1))
    assert decision.units[0].gpu == "b/1"
    placer.commit(decision)
    refused(placer, whole(1), "no_capacity")


def test_whole_gpus_never_land_on_shared_gpus_unless_asked():
    state = fleet(node("s", 2, SHARED))
    refused(Placer(state), whole(1), "no_capacity")
    placer = Placer(state, whole_gpus_from_shared=True)
    decision = placed(placer, whole(1))
    placer.commit(decision)
    assert state.gpu(decision.units[0].gpu).used_milli == 1000
    state.gpu("s/1").used_milli = 10
    state.refresh("s")
    refused(placer, whole(1), "no_capacity")


def test_same_node_and_too_many_for_one_node():
    state = fleet(node("a", 4), node("b", 4))
    placer = Placer(state)
    placer.commit(placed(placer, whole(2, same_node=True)))
    placer.commit(placed(placer, whole(2, same_node=True)))
    decision = placed(placer, whole(4, same_node=True))
    assert len(decision.nodes) == 1
    refused(placer, whole(5, same_node=True), "too_many_for_one_node")


def test_a_demand_without_same_node_spans_nodes_and_splits_host_resources_rounding_up():
    state = fleet(node("a", 2, cpu=10_000, memory=100), node("b", 2, cpu=10_000, memory=100))
    placer = Placer(state, "binpack")
    placer.commit(placed(placer, whole(1, cpu_milli=1, memory_mib=1)))
    decision = placed(placer, whole(3, cpu_milli=1000, memory_mib=10))
    assert len(decision.units) == 3 and len(decision.nodes) == 2
    by_node = {n: sum(u.node == n for u in decision.units) for n in decision.nodes}
    for name, units in by_node.items():
        assert decision.cpu_milli_by_node[name] == -(-1000 * units // 3)
        assert decision.memory_mib_by_node[name] == -(-10 * units // 3)
    refused(placer, whole(3, same_node=True), "too_many_for_one_node")
    refused(placer, whole(4), "no_capacity")  # three GPUs are free in all


def test_nvlink_group_is_pairwise_connected_on_one_node():
    a = node("a", 8, nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]])
    state = fleet(a)
    for index in (0, 1, 4):
        a.gpus[index].whole_bound = True
    state.refresh("a")
    placer = Placer(state)
    decision = placed(placer, whole(3, nvlink=True))
    chosen = [state.gpu(u.gpu) for u in decision.units]
    assert {g.index for g in chosen} == {5, 6, 7}
    for gpu in chosen:
        assert all(other.key in gpu.nvlink_peers for other in chosen if other is not gpu)
    placer.commit(decision)
    refused(placer, whole(3, nvlink=True), "no_capacity")  # two GPUs left
    assert isinstance(placer.decide(whole(2, nvlink=True)), Decision)


def test_free_gpus_without_an_nvlink_group_are_refused_as_such():
    a = node("a", 8, nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]])
    for index in (0, 1, 4, 5):
        a.gpus[index].whole_bound = True
    placer = Placer(fleet(a))
    refused(placer, whole(3, nvlink=True), "no_nvlink_group")
    assert isinstance(placer.decide(whole(3)), Decision)  # without NVLink it fits


def test_nvlink_only_for_whole_gpus():
    refused(Placer(fleet(node("a", 2, SHARED))), shared(100, nvlink=True), "invalid_demand")


# --- shared fractions --------------------------------------------------------------------
def test_shared_takes_milli_of_one_gpu_and_never_past_1000():
    state = fleet(node("s", 2, SHARED, used=[600, 0]))
    placer = Placer(state, "binpack")
    decision = placed(placer, shared(400))
    assert decision.units[0].gpu == "s/0" and decision.units[0].milli == 400
    placer.commit(decision)
    assert state.gpu("s/0").used_milli == 1000
    placer.commit(placed(placer, shared(700)))
    refused(placer, shared(400), "no_capacity")
    assert all(g.used_milli <= 1000 for g in state.node("s").gpus)


def test_shared_lands_only_on_shared_gpus():
    state = fleet(node("x", 2), node("m", 1, MIG, mig=[[]]))
    refused(Placer(state), shared(500), "no_capacity")


def test_invalid_shared_fraction_is_refused():
    placer = Placer(fleet(node("s", 1, SHARED)))
    refused(placer, shared(1000), "invalid_demand")
    refused(placer, shared(0), "invalid_demand")


# --- MIG ---------------------------------------------------------------------------------
def mig_layout(state: FleetState, key: str) -> list[tuple[int, int, bool]]:
    return sorted((s.profile_id, s.start, s.bound) for s in state.gpu(key).mig_instances)


def test_mig_uses_an_existing_unbound_instance_first():
    state = fleet(node("m", 1, MIG, mig=[[(19, 0, True), (19, 1, False)]]))
    placer = Placer(state)
    decision = placed(placer, mig("1g.10gb"))
    unit = decision.units[0]
    assert (unit.mig_profile_id, unit.mig_start, unit.creates_mig_instance) == (19, 1, False)
    assert not decision.mig_layouts
    geometry = geometry_of("H100-80GB")
    assert unit.milli == round(geometry.weight(geometry.profile(19)) * 1000) == 143
    placer.commit(decision)
    assert mig_layout(state, "m/0") == [(19, 0, True), (19, 1, True)]


def test_mig_creates_a_new_instance_on_free_slices_with_a_valid_complete_layout():
    state = fleet(node("m", 1, MIG, mig=[[(9, 0, True)]]))
    placer = Placer(state)
    decision = placed(placer, mig("1g.10gb"))
    unit = decision.units[0]
    assert unit.creates_mig_instance and unit.mig_profile_id == 19 and unit.mig_start >= 4
    layout = decision.mig_layouts["m/0"]
    assert {(s.profile_id, s.start) for s in layout} == {(9, 0), (19, unit.mig_start)}
    assert layout_problems(geometry_of("H100-80GB"), layout) == []
    placer.commit(decision)
    assert mig_layout(state, "m/0") == [(9, 0, True), (19, unit.mig_start, True)]


def test_mig_new_instance_keeps_room_for_big_profiles():
    state = fleet(node("m", 1, MIG, mig=[[]]))
    decision = placed(Placer(state), mig("1g.10gb"))
    # a 1g at slice 6 leaves 0-3 for a 4g and 4-5 for a 2g; at slice 0 it would block 4g
    assert decision.units[0].mig_start == 6


def test_mig_repartitions_a_gpu_with_no_bound_instance():
    state = fleet(node("m", 1, MIG, mig=[[(0, 0, False)]]))
    placer = Placer(state)
    decision = placed(placer, mig("3g.40gb"))
    unit = decision.units[0]
    assert unit.creates_mig_instance
    assert [(s.profile_id, s.start) for s in decision.mig_layouts["m/0"]] == [(9, unit.mig_start)]
    placer.commit(decision)
    assert mig_layout(state, "m/0") == [(9, unit.mig_start, True)]
    placer.release(decision)
    assert mig_layout(state, "m/0") == [(0, 0, False)]


def test_mig_never_repartitions_a_gpu_with_a_bound_instance():
    state = fleet(node("m", 1, MIG, mig=[[(0, 0, True)]]))
    refused(Placer(state), mig("1g.10gb"), "no_capacity")


def test_mig_respects_profile_caps():
    # 1g.10gb+me (id 20) is capped at one instance per GPU
    state = fleet(node("m", 1, MIG, mig=[[(20, 0, True)]]))
    refused(Placer(state), mig("1g.10gb+me"), "no_capacity")


def test_mig_on_a_model_without_geometry_is_refused_never_guessed():
    state = fleet(node("t", 2, MIG, model="Tesla-Z9"))
    refused(Placer(state), mig("1g.10gb"), "mig_model_unknown")
    state = fleet(node("m", 1, MIG, mig=[[]]))
    refused(Placer(state), mig("9g.999gb"), "unknown_mig_profile")
    refused(Placer(state), mig("1g.10gb", models=frozenset({"L40S-48GB"})), "unknown_model")


def test_mig_profile_names_resolve_per_model():
    a100 = node("a", 1, MIG, model="A100-40GB", mig=[[]])
    h100 = node("h", 1, MIG, model="H100-80GB", mig=[[]])
    state = fleet(a100, h100)
    decision = placed(Placer(state), mig("1g.5gb"))
    assert decision.units[0].node == "a"  # 1g.5gb exists on A100-40GB only
    decision = placed(Placer(state), mig("1g.10gb", models=frozenset({"A100-40GB"})))
    assert decision.units[0].mig_profile_id == 15  # 1g.10gb on A100-40GB: 2 memory slices


def test_several_mig_units_on_one_gpu_get_distinct_instances():
    state = fleet(node("m", 1, MIG, mig=[[]]))
    placer = Placer(state)
    decision = placed(placer, mig("2g.20gb", 3, same_node=True))
    starts = sorted(u.mig_start for u in decision.units)
    assert starts == [0, 2, 4]
    placer.commit(decision)
    assert layout_problems(geometry_of("H100-80GB"), decision.mig_layouts["m/0"]) == []
    refused(placer, mig("2g.20gb"), "no_capacity")


# --- host resources, filters -------------------------------------------------------------
def test_host_cpu_memory_and_task_limit_bound_a_node():
    state = fleet(node("a", 4, cpu=4000, memory=1024, max_tasks=2))
    placer = Placer(state)
    refused(placer, whole(1, cpu_milli=5000), "host_resources")
    refused(placer, whole(1, memory_mib=2048), "host_resources")
    placer.commit(placed(placer, whole(1, cpu_milli=3000, memory_mib=512)))
    assert state.node("a").cpu_milli_free == 1000
    assert state.node("a").memory_mib_free == 512
    refused(placer, whole(1, cpu_milli=1001), "host_resources")
    placer.commit(placed(placer, whole(0, cpu_milli=1000)))
    assert state.node("a").tasks == 2
    refused(placer, whole(1), "host_resources")


def test_host_only_task_takes_host_resources_and_no_gpu():
    state = fleet(node("a", 1, cpu=2000, memory=100))
    placer = Placer(state)
    decision = placed(placer, whole(0, cpu_milli=1500, memory_mib=50))
    assert decision.units == () and decision.nodes == ("a",)
    placer.commit(decision)
    assert state.node("a").cpu_milli_free == 500
    refused(placer, whole(0, cpu_milli=1500), "host_resources")


def test_model_and_environment_filters():
    state = fleet(node("h", 1, model="H100-80GB", environment="cloud"),
                  node("a", 1, model="A100-80GB", environment="onprem"))
    placer = Placer(state)
    assert placed(placer, whole(1, models=frozenset({"A100-80GB"}))).units[0].node == "a"
    assert placed(placer, whole(1, environments=frozenset({"cloud"}))).units[0].node == "h"
    refused(placer, whole(1, models=frozenset({"B200-180GB"})), "unknown_model")
    refused(placer, whole(1, environments=frozenset({"mars"})), "unknown_environment")
    refused(placer, whole(1, models=frozenset({"A100-80GB"}),
                          environments=frozenset({"cloud"})), "no_capacity")


def test_gpu_filter_excludes_units():
    state = fleet(node("a", 2), node("b", 2))
    decision = placed(Placer(state), whole(1), gpu_filter=lambda n, g: g.key == "b/1")
    assert decision.units[0].gpu == "b/1"


# --- policies ----------------------------------------------------------------------------
def test_unknown_policy_is_a_value_error():
    with pytest.raises(ValueError, match="unknown placement policy"):
        Placer(fleet(node("a")), "first-fit")
    assert POLICIES == ("default", "binpack", "spread")


def test_binpack_fills_the_fullest_node_and_spread_the_emptiest():
    def build() -> FleetState:
        state = fleet(node("busy", 4), node("idle", 4))
        state.node("busy").gpus[0].whole_bound = True
        state.refresh("busy")
        return state

    assert placed(Placer(build(), "binpack"), whole(1)).units[0].node == "busy"
    assert placed(Placer(build(), "spread"), whole(1)).units[0].node == "idle"


def test_default_policy_keeps_whole_gpus_free_for_the_workload_it_expects():
    state = fleet(node("s", 2, SHARED, used=[500, 0]))
    expected = Workload([whole(1)] * 8 + [shared(400)] * 2)
    placer = Placer(state, workload=expected, whole_gpus_from_shared=True)
    assert placed(placer, shared(400)).units[0].gpu == "s/0"  # not the empty GPU
    spread = Placer(state, "spread")
    assert placed(spread, shared(400)).units[0].gpu == "s/1"


def test_default_policy_gives_several_whole_gpus_the_node_they_fill_exactly():
    # On "four" the expected single-GPU tasks would run out of host CPU before GPUs (and
    # so would the fleet's: "bare" has GPUs and no CPU), so the fragmentation measure
    # alone takes it for the 2-GPU task (it strands less there); the exact-fit rule keeps
    # its free GPUs together and fills "two" instead.
    def build() -> FleetState:
        state = fleet(node("four", 4, cpu=3000), node("two", 4, cpu=2000),
                      node("bare", 8, cpu=0))
        for gpu in state.node("two").gpus[:2]:
            gpu.whole_bound = True
        state.refresh("two")
        return state

    expected = Workload([whole(1, cpu_milli=1000)] * 8)
    demand = whole(2, cpu_milli=1000)
    assert placed(Placer(build(), workload=expected), demand).units[0].node == "two"
    measure_alone = Placer(build(), workload=expected)
    measure_alone._scorer._leaves_whole_gpus = lambda plan: False
    assert placed(measure_alone, demand).units[0].node == "four"


def test_default_policy_keeps_the_node_only_the_largest_multi_gpu_tasks_fit(monkeypatch):
    # 8-GPU tasks ask 78 cores on average, but the largest 120: only "big" holds it. The
    # single-GPU task strands less CPU on "big", so the measure at the mean host alone puts
    # it there; measuring a quarter of the 8-GPU kind at its largest host keeps "big" whole.
    # ("bare", GPUs without CPU, makes the fleet run out of CPU first, so that the
    # stranding the single-GPU kind sees counts.)
    def build() -> FleetState:
        return fleet(node("big", 8, cpu=128_000), node("small", 8, cpu=90_000),
                     node("bare", 8, cpu=0))

    seen = ([whole(1, cpu_milli=13_000)] * 4 + [whole(8, cpu_milli=64_000)] * 3
            + [whole(8, cpu_milli=120_000)])
    demand = whole(1, cpu_milli=26_000)
    placer = Placer(build(), workload=Workload(seen), learn=False)
    assert placed(placer, demand).units[0].node == "small"
    monkeypatch.setattr(workload_module, "LARGEST_HOST_SHARE", 0.0)
    mean_alone = Placer(build(), workload=Workload(seen), learn=False)
    assert placed(mean_alone, demand).units[0].node == "big"


def test_whole_gpu_kinds_host_stranding_counts_only_while_the_fleet_runs_out_of_cpu():
    # A single-GPU task asking 2 cores, against single-GPU tasks asking 1 on average:
    # on "tight" (3 cores for 4 GPUs) it leaves CPU for one more such task beside 3 free
    # GPUs, on "roomy" for dozens. Counting the GPUs "tight" would strand, it goes to
    # "roomy"; not counting them, both leave the kind fitting and the tie goes to the node
    # left with less CPU, "tight". Which holds depends on the fleet: with only these two
    # nodes CPU is to spare (67 cores for 8 free GPUs, at 1 core per GPU asked); with 64
    # more free GPUs behind no CPU ("bare"), the fleet runs out of CPU first.
    def build(bare: bool) -> FleetState:
        nodes = [node("tight", 4, cpu=3000), node("roomy", 4, cpu=64000)]
        if bare:
            nodes += [node(f"bare{n}", 8, cpu=0) for n in range(8)]
        return fleet(*nodes)

    expected = Workload([whole(1, cpu_milli=1000)] * 8)
    demand = whole(1, cpu_milli=2000)
    spare = Placer(build(bare=False), workload=expected, learn=False)
    assert not spare._scorer.cpu_runs_out_first()
    assert placed(spare, demand).units[0].node == "tight"
    short = Placer(build(bare=True), workload=expected, learn=False)
    assert short._scorer.cpu_runs_out_first()
    assert placed(short, demand).units[0].node == "roomy"


def test_only_kinds_of_several_whole_gpus_are_measured_at_their_largest_host():
    seen = [whole(2, cpu_milli=1000), whole(2, cpu_milli=3000), whole(1, cpu_milli=1000),
            whole(1, cpu_milli=5000), shared(500, cpu_milli=1000), shared(500, cpu_milli=9000),
            whole(4, cpu_milli=2000), whole(0, cpu_milli=1000)]
    workload = Workload(seen)
    entries = sorted((t.count, t.milli, host[0], round(w, 4)) for t, w, host in zip(
        workload.gpu_classes, workload.weights, workload.hosts, strict=True))
    share = workload_module.LARGEST_HOST_SHARE
    assert entries == sorted([
        (2, 1000, 2000.0, round(2 / 8 * (1 - share), 4)),
        (2, 1000, 3000, round(2 / 8 * share, 4)),
        (1, 1000, 3000.0, 0.25), (1, 500, 5000.0, 0.25), (4, 1000, 2000.0, 0.125)])
    assert sum(workload.weights) == pytest.approx(7 / 8)



def test_expected_waste_of_a_partly_used_gpu_once_full():
    # 300-milli tasks are most shared arrivals, 160-milli ones rare: 330 free is likely to
    # take a 300 and lose 30; 190 free waits for a rare 160; 100 free fits nothing.
    seen = [shared(300)] * 9 + [shared(160)] + [whole(1)] * 10
    waste = workload_module.ExpectedWaste(Workload(seen))
    stop = workload_module.FILL_STOP_CHANCE
    assert waste.of("H100-80GB", 100) == 100
    assert waste.of("H100-80GB", 190) == pytest.approx(
        (stop * 190 + (1 - stop) * 0.1 * 30) / (stop + (1 - stop) * 0.1))
    # 330: a 300 leaves 30, a 160 leaves 170 (which a 160 may fill to 10)
    after_160 = (stop * 170 + (1 - stop) * 0.1 * 10) / (stop + (1 - stop) * 0.1)
    assert waste.of("H100-80GB", 330) == pytest.approx(
        stop * 330 + (1 - stop) * (0.9 * 30 + 0.1 * after_160))
    assert waste.of("H100-80GB", 330) < waste.of("H100-80GB", 190)
    restricted = Workload([shared(300, models=frozenset({"A100-80GB"}))] * 9 + [whole(1)])
    assert workload_module.ExpectedWaste(restricted).of("H100-80GB", 330) == 330


def test_expected_waste_counts_only_shared_kinds_the_node_host_still_takes():
    # The meter replaces FGD's shared-kind count on partly used GPUs by the expected waste
    # only for the kinds the node's host can take: a node out of CPU measures as FGD does.
    seen = [shared(300, cpu_milli=4000)] * 9 + [whole(1, cpu_milli=1000)] * 10
    workload = Workload(seen)
    pictures = (("H100-80GB", "shared", True, 330, (), False),
                ("H100-80GB", "shared", True, 1000, (), False))
    fgd = workload_module.FragmentationMeter(workload, True)
    waste = workload_module.FragmentationMeter(workload, True, waste_when_full=True)
    assert waste.node(pictures, 2000, None, True) == pytest.approx(
        fgd.node(pictures, 2000, None, True))
    # with CPU for a 300-milli task, the 330 free counts for the 300s (9 of 19 tasks) as
    # what it is expected to lose once full, about 30, not as nothing (a 300 fits it now)
    stop = workload_module.FILL_STOP_CHANCE
    assert waste.node(pictures, 64000, None, True) - fgd.node(pictures, 64000, None, True) \
        == pytest.approx(9 / 19 * (stop * 330 + (1 - stop) * 30))


def test_fraction_host_stranding_in_task_slots_counts_what_the_cpu_cannot_serve():
    # A fresh 8-GPU node with 96 cores takes 9 470-milli tasks of 10 cores, though its
    # GPUs hold 16: one task per fitting GPU sees nothing stranded, task slots see the 7
    # tasks' worth of GPU the CPU cannot serve (7 / 16 of its free capacity).
    workload = Workload([shared(470, cpu_milli=10_000)])
    pictures = (("V100", "shared", True, 1000, (), False),) * 8
    meter = workload_module.FragmentationMeter(workload, True)
    assert meter.node(pictures, 96_000, None, True) == 0
    assert meter.node(pictures, 96_000, None, True, fraction_slots=True) == \
        pytest.approx(7 / 16 * 8000)
    # with CPU for all 16, nothing is stranded either way
    assert meter.node(pictures, 160_000, None, True, fraction_slots=True) == 0


@pytest.mark.parametrize("policy", POLICIES)
def test_a_plan_made_on_one_node_is_reused_on_another_of_the_same_shape(policy):
    # Plans are cached by node shape: the second decision reuses the plan made on the
    # first node for an empty GPU, and must name the other node's GPU, layout and host.
    state = fleet(node("a", 1, MIG, cpu=4000), node("b", 1, MIG, cpu=4000))
    placer = Placer(state, policy)
    first = placed(placer, mig("7g.80gb", cpu_milli=1000))
    placer.commit(first)
    other = "b" if first.units[0].node == "a" else "a"
    second = placed(placer, mig("7g.80gb", cpu_milli=1000))
    assert [(u.node, u.gpu) for u in second.units] == [(other, f"{other}/0")]
    assert set(second.mig_layouts) == set(second.previous_mig_layouts) == {f"{other}/0"}
    assert dict(second.cpu_milli_by_node) == {other: 1000}
    placer.commit(second)
    assert state.node(other).cpu_milli_free == 3000
    refused(placer, mig("7g.80gb"), "no_capacity")


def test_ranks_reused_across_nodes_of_one_shape_still_see_each_nodes_task_room():
    # Alike in GPUs and host resources, but the last task `a` may take would strand its
    # other GPU: the default policy puts the task on `b`, whichever node it ranked first.
    state = fleet(node("a", 2, max_tasks=1, environment="x"), node("b", 2, environment="y"))
    placer = Placer(state, workload=Workload([whole(1)]))
    assert placed(placer, whole(1)).units[0].node == "b"


# --- commit, release, JSON ---------------------------------------------------------------
def test_commit_then_release_restores_the_fleet():
    state = fleet(node("a", 4, cpu=8000, memory=64), node("s", 2, SHARED, cpu=8000),
                  node("m", 2, MIG, mig=[[(9, 0, True)], [(0, 0, False)]]))
    placer = Placer(state)
    for demand in (whole(2, cpu_milli=100, memory_mib=4), shared(300), mig("3g.40gb"),
                   mig("1g.10gb"), whole(0, cpu_milli=10)):
        before = state.to_json()
        decision = placed(placer, demand)
        placer.commit(decision)
        assert state.to_json() != before
        placer.release(decision)
        assert state.to_json() == before


def test_a_stale_decision_is_not_committed():
    state = fleet(node("a", 1))
    placer = Placer(state)
    decision = placed(placer, whole(1))
    placer.commit(decision)
    before = state.to_json()
    with pytest.raises(StaleDecision):
        placer.commit(decision)
    assert state.to_json() == before


def test_fleet_state_json_round_trip():
    state = fleet(node("a", 2, cpu=1, memory=2, max_tasks=3, nvlink=[[0, 1]]),
                  node("m", 1, MIG, mig=[[(9, 4, True)]], environment="x"))
    again = FleetState.from_json(state.to_json())
    assert again.to_json() == state.to_json()
    assert again.gpu("a/0").nvlink_peers == frozenset({"a/1"})
    with pytest.raises(ValueError, match=r"nodes\[0\]"):
        FleetState.from_json({"nodes": [{"name": "x"}]})
    with pytest.raises(ValueError):
        FleetState.from_json({"nodes": "no"})



def _placer_state(placer: Placer) -> tuple:
    """What a decision may change in a placer: the workload learnt and the random draws."""
    return (placer._rng.getstate(), placer.workload.generation,
            {key: task.seen for key, task in placer.workload.classes.items()})


def test_a_preview_answers_as_decide_and_leaves_the_placer_as_it_was():
    """The request preview decides on the server's own placer: it answers what `decide`
    answers, and the next real decision is the one it would have been without it."""
    def build() -> Placer:
        return Placer(fleet(*(node(f"n{i}", gpus=4) for i in range(4)),
                            node("s0", mode=SHARED)), seed=7)

    plain, previewed = build(), build()
    for demand in [whole(2), shared(500), whole(1), whole(3, same_node=True), shared(250, 2),
                   whole(1, models=frozenset({"H100-80GB"})), whole(4, same_node=True)]:
        before = _placer_state(previewed)
        answer = previewed.preview(demand)
        assert _placer_state(previewed) == before, demand
        real = plain.decide(demand)
        assert answer == real == previewed.decide(demand), demand
        if isinstance(real, Decision):
            plain.commit(real)
            previewed.commit(answer)
