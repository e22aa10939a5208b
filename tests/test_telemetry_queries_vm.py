"""The telemetry questions through the API on the Prometheus-compatible store, on a real
VictoriaMetrics: the tests of tests/test_telemetry_queries.py — the funnel, idle and
idle-held lists, zombies, the /metrics funnel gauges, MIG activity — and the CLI's
`gpufleet funnel` and `gpufleet idle` (tests/test_cli_telemetry.py) run here unchanged,
with the same expected answers as on the embedded store."""

from __future__ import annotations

import pytest

from gpufleet.services.app import Gpufleet
from tests.test_cli_telemetry import cli, test_funnel, test_idle
from tests.test_telemetry_queries import (
    fleet,
    migs,
    test_an_old_window_keeps_its_bindings,
    test_funnel_counts_only_the_window,
    test_funnel_of_the_fleet_and_by_project,
    test_idle_and_idle_held,
    test_latest_snapshots_charge_processes_to_the_binding,
    test_members_see_only_their_projects,
    test_metrics_carry_the_funnel_by_environment,
    test_mig_activity_is_one_rule_in_latest_top_and_the_funnel,
    test_range_query_by_project_and_environment,
    test_top,
    test_unattributed_usage,
    test_zombies,
)
from tests.vm_engine import FlushingStore, clear, victoria_metrics

__all__ = [
    "cli",
    "fleet",
    "migs",
    "test_an_old_window_keeps_its_bindings",
    "test_funnel",
    "test_funnel_counts_only_the_window",
    "test_funnel_of_the_fleet_and_by_project",
    "test_idle",
    "test_idle_and_idle_held",
    "test_latest_snapshots_charge_processes_to_the_binding",
    "test_members_see_only_their_projects",
    "test_metrics_carry_the_funnel_by_environment",
    "test_mig_activity_is_one_rule_in_latest_top_and_the_funnel",
    "test_range_query_by_project_and_environment",
    "test_top",
    "test_unattributed_usage",
    "test_zombies",
    "victoria_metrics",
]


@pytest.fixture
def gf(store, settings, clock, victoria_metrics):
    """The services with their telemetry in VictoriaMetrics (`telemetry_url`'s store)."""
    clear(victoria_metrics)
    services = Gpufleet(store, settings, clock, telemetry=FlushingStore(victoria_metrics))
    yield services
    services.close_telemetry()
