"""The telemetry questions through the API on the Prometheus-compatible store, on a real
VictoriaMetrics: the tests of tests/services/telemetry/test_queries.py — the funnel, idle and
idle-held lists, zombies, the /metrics funnel gauges, MIG activity — and the CLI's
`gpufleet funnel` and `gpufleet idle` (tests/cli/test_telemetry.py) run here unchanged,
with the same expected answers as on the embedded store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.services.app import Gpufleet
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.masks import SlotSpan
from gpufleet.tsdb.protocol import HOUR_MS, to_ms
from tests.cli.test_telemetry import cli, test_funnel, test_idle
from tests.services.telemetry.test_queries import (
    fleet,
    migs,
    test_an_old_window_keeps_its_bindings,
    test_funnel_counts_only_the_window,
    test_funnel_of_the_fleet_and_by_project,
    test_idle_and_idle_held,
    test_idle_memory_is_read_as_of_the_judged_minutes,
    test_latest_snapshots_charge_processes_to_the_binding,
    test_members_see_only_their_projects,
    test_metrics_carry_the_funnel_by_environment,
    test_mig_activity_is_one_rule_in_latest_top_and_the_funnel,
    test_range_query_by_project_and_environment,
    test_top,
    test_unattributed_usage,
    test_zombies,
)
from tests.services.telemetry.test_queries import (
    test_a_mig_gpus_own_unit_is_never_unbound as mig_parent_never_unbound,
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
    "test_idle_memory_is_read_as_of_the_judged_minutes",
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


def test_a_mig_gpus_own_unit_is_never_unbound_on_vm(api, migs, gf, clock):
    mig_parent_never_unbound(api, migs, gf, clock)


@pytest.fixture
def gf(store, settings, clock, victoria_metrics):
    """The services with their telemetry in VictoriaMetrics (`telemetry_url`'s store)."""
    clear(victoria_metrics)
    services = Gpufleet(store, settings, clock, telemetry=FlushingStore(victoria_metrics))
    yield services
    services.close_telemetry()


def test_the_upkeep_round_judges_minutes_up_to_its_grace(gf, clock):
    """The server's upkeep loop is what moves "rolled up" on this store: each round marks
    the minutes ending `telemetry_rollup_grace_s` (120 s) before now as final, and warms
    the masks with them."""
    start = clock.now()
    gf.telemetry.write([Sample(series("gpu.gr_engine_active", "GPU-1", node="n",
                                      environment="e", model="H100-80GB"),
                               start + timedelta(minutes=m, seconds=30), 50.0)
                        for m in range(10)])
    clock.advance(600)
    gf.telemetry_upkeep()
    masks = gf.queries.masks
    assert masks.filled_ms == to_ms(start + timedelta(minutes=8))  # warmed by the round
    # The round's leader (SQLite: the only server) recorded the closed hours before.
    assert masks.hours_computed == 25 and masks._recorded_until_ms == \
        to_ms(start) // HOUR_MS * HOUR_MS
    done = masks.refresh()
    assert done == to_ms(start + timedelta(minutes=8))
    span = SlotSpan(("GPU-1", None), to_ms(start), to_ms(clock.now()), 0, 1.0)
    assert masks.tallies([span], span.lo_ms, span.hi_ms, done)[0].active == 8
