"""Derived inventory states: every input combination of `node_status` and `gpu_status`."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.inventory import (
    GpuHealth,
    GpuStatus,
    NodeAdminState,
    NodeStatus,
    canonical_gpu_uuid,
    gpu_status,
    is_silent,
    node_status,
)

# (admin_state, reachable) -> status: retired wins, then silence, then the cordon.
NODE_STATUS = {
    (NodeAdminState.ACTIVE, True): NodeStatus.READY,
    (NodeAdminState.ACTIVE, False): NodeStatus.UNREACHABLE,
    (NodeAdminState.CORDONED, True): NodeStatus.CORDONED,
    (NodeAdminState.CORDONED, False): NodeStatus.UNREACHABLE,
    (NodeAdminState.RETIRED, True): NodeStatus.RETIRED,
    (NodeAdminState.RETIRED, False): NodeStatus.RETIRED,
}

NODE_CASES = list(itertools.product(NodeAdminState, [True, False]))


def test_node_status_table_covers_every_input():
    assert set(NODE_STATUS) == set(NODE_CASES)


@pytest.mark.parametrize(
    ("admin_state", "reachable"), NODE_CASES,
    ids=[f"{a.value} + {'reachable' if r else 'silent'} => {NODE_STATUS[(a, r)].value}"
         for a, r in NODE_CASES])
def test_node_status(admin_state, reachable):
    assert node_status(admin_state, reachable) is NODE_STATUS[(admin_state, reachable)]


def expected_gpu_status(node: NodeStatus, health: GpuHealth, allocated: bool) -> GpuStatus:
    """The documented precedence, written as a table walk rather than the code's ifs:
    retired (node or GPU) > unreachable > quarantined > allocated > cordoned > free."""
    precedence = [
        (node is NodeStatus.RETIRED or health is GpuHealth.RETIRED, GpuStatus.RETIRED),
        (node is NodeStatus.UNREACHABLE, GpuStatus.UNREACHABLE),
        (health is GpuHealth.QUARANTINED, GpuStatus.QUARANTINED),
        (allocated, GpuStatus.ALLOCATED),
        (node is NodeStatus.CORDONED, GpuStatus.CORDONED),
    ]
    return next((status for applies, status in precedence if applies), GpuStatus.FREE)


GPU_CASES = list(itertools.product(NodeStatus, GpuHealth, [False, True]))


@pytest.mark.parametrize(
    ("node", "health", "allocated"), GPU_CASES,
    ids=[f"{n.value} + {h.value} + {'allocated' if a else 'unallocated'} => "
         f"{expected_gpu_status(n, h, a).value}" for n, h, a in GPU_CASES])
def test_gpu_status_precedence(node, health, allocated):
    assert gpu_status(node, health, allocated) is expected_gpu_status(node, health, allocated)


@pytest.mark.parametrize(
    ("node", "health", "allocated", "status"),
    [
        # Spelled out, so a change to the precedence above cannot hide in the oracle.
        (NodeStatus.READY, GpuHealth.HEALTHY, False, GpuStatus.FREE),
        (NodeStatus.READY, GpuHealth.SUSPECT, False, GpuStatus.FREE),
        (NodeStatus.READY, GpuHealth.HEALTHY, True, GpuStatus.ALLOCATED),
        (NodeStatus.CORDONED, GpuHealth.HEALTHY, True, GpuStatus.ALLOCATED),
        (NodeStatus.CORDONED, GpuHealth.HEALTHY, False, GpuStatus.CORDONED),
        (NodeStatus.CORDONED, GpuHealth.QUARANTINED, False, GpuStatus.QUARANTINED),
        (NodeStatus.READY, GpuHealth.QUARANTINED, True, GpuStatus.QUARANTINED),
        (NodeStatus.UNREACHABLE, GpuHealth.QUARANTINED, True, GpuStatus.UNREACHABLE),
        (NodeStatus.RETIRED, GpuHealth.QUARANTINED, True, GpuStatus.RETIRED),
    ],
)
def test_gpu_status_examples(node, health, allocated, status):
    assert gpu_status(node, health, allocated) is status


def test_a_cordoned_node_that_goes_silent_and_returns_is_cordoned_again():
    states = [node_status(NodeAdminState.CORDONED, reachable) for reachable in (True, False, True)]
    assert states == [NodeStatus.CORDONED, NodeStatus.UNREACHABLE, NodeStatus.CORDONED]


T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("silent_for_s", "silent"),
    [(0, False), (89, False), (90, False), (90.001, True), (3600, True)],
)
def test_is_silent_after_missed_intervals(silent_for_s, silent):
    now = T0 + timedelta(seconds=silent_for_s)
    assert is_silent(T0, now, heartbeat_interval_s=30, missed_intervals=3) is silent


def test_never_seen_is_silent():
    assert is_silent(None, T0, heartbeat_interval_s=30, missed_intervals=3)


@pytest.mark.parametrize(
    ("reported", "canonical"),
    [
        ("GPU-ABCDEF01-2345-6789-ABCD-EF0123456789", "GPU-abcdef01-2345-6789-abcd-ef0123456789"),
        ("gpu-abcdef01-2345-6789-abcd-ef0123456789", "GPU-abcdef01-2345-6789-abcd-ef0123456789"),
        ("GPU-abcdef01-2345-6789-abcd-ef0123456789", "GPU-abcdef01-2345-6789-abcd-ef0123456789"),
        ("MIG-1234", "MIG-1234"),
    ],
)
def test_canonical_gpu_uuid(reported, canonical):
    assert canonical_gpu_uuid(reported) == canonical
