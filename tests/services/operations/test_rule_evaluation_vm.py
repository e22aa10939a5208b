"""Alert rule evaluation on the Prometheus-compatible store, on a real VictoriaMetrics:
the tests of test_rule_evaluation.py and test_rule_evaluation_live.py run here unchanged,
with the same expected observations as on the embedded store."""

from __future__ import annotations

import pytest

from gpufleet.services.app import Gpufleet
from tests.services.operations.test_rule_evaluation import (
    test_a_source_that_cannot_answer_is_unavailable_not_empty,
    test_absence_of_an_agent_and_of_a_metric,
    test_increase_observes_a_new_xid_per_code,
    test_matchers_select_observations,
    test_the_default_pack_evaluates_on_a_quiet_fleet,
    test_threshold_aggregated_across_units,
    test_threshold_as_a_percentage_of_another_metric,
    test_threshold_observes_the_units_over_it_with_their_owner,
    world,
)
from tests.services.operations.test_rule_evaluation_live import (
    test_idle_allocations,
    test_zombies_and_unattributed_usage,
)
from tests.services.telemetry.test_queries import fleet
from tests.vm_engine import FlushingStore, clear, victoria_metrics

__all__ = [
    "fleet",
    "test_a_source_that_cannot_answer_is_unavailable_not_empty",
    "test_absence_of_an_agent_and_of_a_metric",
    "test_idle_allocations",
    "test_increase_observes_a_new_xid_per_code",
    "test_matchers_select_observations",
    "test_the_default_pack_evaluates_on_a_quiet_fleet",
    "test_threshold_aggregated_across_units",
    "test_threshold_as_a_percentage_of_another_metric",
    "test_threshold_observes_the_units_over_it_with_their_owner",
    "test_zombies_and_unattributed_usage",
    "victoria_metrics",
    "world",
]


@pytest.fixture
def gf(store, settings, clock, victoria_metrics):
    """The services with their telemetry in VictoriaMetrics (`telemetry_url`'s store)."""
    clear(victoria_metrics)
    services = Gpufleet(store, settings, clock, telemetry=FlushingStore(victoria_metrics))
    yield services
    services.close_telemetry()
