"""Series plans: kept by label bytes, bounded, and refusing what the decoder refused."""

from __future__ import annotations

import pytest

from gpufleet.services.telemetry.remote_write_plans import SeriesPlans, plan_of
from gpufleet.wire.remote_write import encode_write_request
from gpufleet.wire.remote_write_columns import decode_write_columns

GPU = "GPU-aaaa"


def blocks(*label_sets: dict[str, str]) -> list[bytes]:
    body = encode_write_request([(labels, [(1, 1.0)]) for labels in label_sets])
    return decode_write_columns(body, 1 << 20).label_blocks


def test_a_known_series_gets_the_plan_made_for_it_before():
    plans = SeriesPlans()
    util = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": GPU, "gpu": "0"}
    (first,) = plans.plans_of(blocks(util))
    (again,) = plans.plans_of(blocks(util))
    assert again is first and len(plans) == 1
    assert first.dcgm and first.gpu == GPU and first.row == ("gpu.utilization", GPU, None, ())
    assert first.problem is None and first.labels_key == ("gpu.utilization", GPU, None)


def test_what_is_not_stored_is_planned_as_such():
    other, unknown, no_gpu, bad_instance, no_xid = (plan_of(labels) for labels in (
        {"__name__": "up", "UUID": GPU},
        {"__name__": "DCGM_FI_DEV_SOMETHING_NEW", "UUID": GPU},
        {"__name__": "DCGM_FI_DEV_GPU_UTIL"},
        {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": GPU, "GPU_I_ID": "x"},
        {"__name__": "DCGM_EXP_XID_ERRORS_TOTAL", "UUID": GPU, "pod": "p"}))
    assert not other.dcgm and other.gpu == GPU and not no_gpu.dcgm
    assert unknown.dcgm and unknown.route is None
    assert bad_instance.route is not None and bad_instance.address is None
    assert no_xid.row is None and no_xid.workload == ("p", None, None, None)


def test_a_series_without_a_name_is_refused_and_not_kept():
    plans = SeriesPlans()
    with pytest.raises(ValueError, match="__name__"):
        plans.plans_of(blocks({"__name__": "up"}, {"job": "x"}))
    assert len(plans) == 0


def test_the_cache_is_emptied_when_full_and_never_holds_more_than_its_bound():
    plans = SeriesPlans(max_series=3)
    plans.plans_of(blocks(*({"__name__": f"m{i}"} for i in range(3))))
    assert len(plans) == 3
    plans.plans_of(blocks({"__name__": "m9"}))
    assert len(plans) == 1
    plans.plans_of(blocks(*({"__name__": f"n{i}"} for i in range(5))))  # more than it keeps
    assert len(plans) == 0
