"""test_queries_xids.py on a real VictoriaMetrics: a counter its reader starts at zero counts
a series first seen in the window from 0 on the Prometheus-compatible store too."""

from __future__ import annotations

from tests.services.telemetry.test_queries_vm import gf
from tests.services.telemetry.test_queries_xids import (
    fleet,
    test_a_codes_first_xid_counts_in_the_step_it_arrived,
    test_a_first_xid_before_its_gpu_was_granted_is_not_the_holders,
    test_a_member_counts_first_xids_on_their_projects_gpus_only,
    test_a_series_seen_before_the_window_counts_only_what_it_rose,
)
from tests.vm_engine import victoria_metrics

__all__ = [
    "fleet",
    "gf",
    "test_a_codes_first_xid_counts_in_the_step_it_arrived",
    "test_a_first_xid_before_its_gpu_was_granted_is_not_the_holders",
    "test_a_member_counts_first_xids_on_their_projects_gpus_only",
    "test_a_series_seen_before_the_window_counts_only_what_it_rose",
    "victoria_metrics",
]
