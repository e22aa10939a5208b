"""The fleet's running sums of open free CPU and GPU (`FleetState.open_free_cpu_milli` /
`open_free_gpu_milli`, read by the default policy's `cpu_runs_out_first`) equal a count
from scratch through every way a node changes, not only commit and release: cordon and
uncordon, a task limit set or reached, free CPU becoming unknown or changing, a node
removed and added back (Hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.domain.placement import Decision, Placer, Refusal
from tests.domain.placement.test_properties import check_invariants, demands, fleets

CHANGES = st.lists(st.tuples(
    st.sampled_from(["decide", "release", "cordon", "uncordon", "max_tasks", "cpu", "remove",
                     "add back"]),
    demands, st.integers(0, 3), st.none() | st.integers(0, 20_000)), max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(fleets(), CHANGES)
def test_open_free_sums_follow_every_change(fleet, changes):
    placer = Placer(fleet, "default")
    held: list[Decision] = []
    removed = []
    for change, demand, pick, value in changes:
        nodes = list(fleet.nodes)
        node = nodes[pick % len(nodes)]
        if change == "decide":
            result = placer.decide(demand)
            if not isinstance(result, Refusal):
                placer.commit(result)
                held.append(result)
        elif change == "release" and held:
            placer.release(held.pop(0))
        elif change in ("cordon", "uncordon"):
            node.schedulable = change == "uncordon"
            fleet.refresh(node.name)
        elif change == "max_tasks":
            node.max_tasks = None if value is None else value % 4
            fleet.refresh(node.name)
        elif change == "cpu":
            node.cpu_milli_free = value
            fleet.refresh(node.name)
        elif change == "remove" and len(nodes) > 1:
            held = [d for d in held if node.name not in d.nodes]
            removed.append(fleet.remove_node(node.name))
        elif change == "add back" and removed:
            fleet.add_node(removed.pop())
        check_invariants(fleet, [])  # the sums, beside host resources and layouts
