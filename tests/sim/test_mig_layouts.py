"""Layouts named by profile become explicit placements the hardware accepts."""

from __future__ import annotations

import pytest

from gpufleet.domain.gpu_models import model
from gpufleet.domain.mig import layout_problems
from gpufleet.sim.mig_layouts import MigLayoutError, instance_reports, resolve_layout

H100 = model("H100-80GB").mig
A100 = model("A100-80GB").mig


def starts(layout):
    return [(spec.profile_id, spec.start) for spec in layout]


@pytest.mark.parametrize("entries, expected", [
    (["3g.40gb", "3g.40gb"], [(9, 0), (9, 4)]),
    (["1g.10gb"] * 7, [(19, i) for i in range(7)]),
    (["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"], [(14, 0), (14, 2), (14, 4), (19, 6)]),
    (["3g.40gb", "4g.40gb"], [(5, 0), (9, 4)]),  # 4g.40gb can only start at 0
    ([9, "2g.20gb", "1g.20gb"], [(9, 0), (14, 4), (15, 6)]),
    (["7g.80gb"], [(0, 0)]),
    (["3g.40gb@4", "2g.20gb"], [(14, 0), (9, 4)]),
])
def test_h100_layouts_resolve_to_valid_placements(entries, expected):
    layout = resolve_layout(H100, entries)
    assert starts(layout) == expected
    assert layout_problems(H100, layout) == []


@pytest.mark.parametrize("entries, message", [
    (["5g.50gb"], "unknown MIG profile '5g.50gb'"),
    (["1g.10gb"] * 8, "exceed the GPU's cap of 7"),
    (["4g.40gb", "4g.40gb"], "does not fit on one GPU"),
    (["7g.80gb", "1g.10gb"], "does not fit on one GPU"),
    (["3g.40gb@2"], "cannot start at memory slice 2"),
    (["3g.40gb@x"], "must be a number"),
    (["2g.20gb"] * 4, "does not fit on one GPU"),  # only 3 placements exist
])
def test_impossible_layouts_are_refused_with_a_reason(entries, message):
    with pytest.raises(MigLayoutError, match=message):
        resolve_layout(H100, entries)


def test_instance_reports_carry_placement_and_memory():
    layout = resolve_layout(A100, ["4g.40gb", "2g.20gb", "1g.10gb"])
    reports = instance_reports(A100, layout, seed=1, hostname="n1", gpu_index=0,
                               gpu_memory_bytes=81920 * 1024**2)
    assert [(r.profile_id, r.placement_start, r.placement_size, r.profile_name)
            for r in reports] == [(5, 0, 4, "4g.40gb"), (14, 4, 2, "2g.20gb"),
                                  (19, 6, 1, "1g.10gb")]
    assert reports[0].memory_bytes == round(39.25 * 1024) * 1024**2
    assert all(r.mig_uuid.startswith("MIG-") for r in reports)
    again = instance_reports(A100, layout, seed=1, hostname="n1", gpu_index=0,
                             gpu_memory_bytes=81920 * 1024**2, generation=1)
    assert {r.mig_uuid for r in reports}.isdisjoint(r.mig_uuid for r in again)
