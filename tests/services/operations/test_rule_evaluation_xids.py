"""An XID code's counter is born at its first XID (value 1: its reader counts from zero),
so the window's increase alone never sees it; the first XID of a code must still be
observed, and an old one not again (services/operations/rule_evaluation.py,
`_born_in_window`). Same world as test_rule_evaluation.py."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.domain.operations.rule_files import default_rules
from gpufleet.tsdb import Sample, series
from tests.services.operations.test_rule_evaluation import ATTRS, observed, world

__all__ = ["world"]


def xid_samples(gpu: str, code: str, now, seconds_ago: list[int], value: float):
    return [Sample(series("gpu.xid_errors_total", gpu, labels={"xid": code}, **ATTRS),
                   now - timedelta(seconds=s), value) for s in seconds_ago]


def test_the_first_xid_of_a_code_is_observed_and_an_old_one_is_not(gf, clock, world):
    now = clock.now()
    gf.telemetry.write(
        xid_samples(world["held"], "79", now, [120, 90, 60, 30], 1.0)  # born 2 min ago
        + xid_samples(world["held"], "31", now, [1800, 900, 120, 30], 1.0))  # 30 min old
    xid = next(r for r in default_rules() if r.name == "gpu-xid-error")
    found = [o for o in observed(gf, clock, xid) if o.labels.get("gpu") == world["held"]]
    assert [(o.labels["xid"], o.value) for o in found] == [("79", 1.0)]
