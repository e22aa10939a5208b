"""Reading the health signals from the real embedded telemetry store: increases, not
totals; counter resets; a series first seen inside the window."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.domain.operations.health_rules import Reading
from gpufleet.services.operations.health_signals import (
    contained_per_gpu,
    counter_increases,
    instance_xids,
    read_signals,
)
from gpufleet.tsdb.protocol import Sample, from_ms, series, to_ms
from tests.conftest import START

WINDOW = timedelta(minutes=10)
# Not a whole millisecond: the store keeps ms, and a window's edge must not fall between.
NOW = START + timedelta(hours=2, microseconds=676258)
GPU = "GPU-aaaaaaaa-0000-4000-8000-000000000001"


def ago(minutes: float):
    """NOW - minutes, as the store gives it back (whole milliseconds)."""
    return from_ms(to_ms(NOW - timedelta(minutes=minutes)))


def write(gf, metric: str, minutes_values: list[tuple[float, float]], labels=None,
          gpu=GPU) -> None:
    """Samples at NOW - minutes, one per (minutes ago, value)."""
    gf.telemetry.write([Sample(series(metric, gpu, labels=labels, node="n1"),
                               NOW - timedelta(minutes=m), v) for m, v in minutes_values])


def increases(gf, metric: str, **options) -> dict:
    return counter_increases(gf.telemetry, metric, NOW, WINDOW, **options)


def test_an_old_total_is_no_increase(gf):
    write(gf, "gpu.ecc_uncorrected_errors_total", [(30, 7), (20, 7), (5, 7), (1, 7)])
    assert increases(gf, "gpu.ecc_uncorrected_errors_total", new_series_counts=False) == {}


def test_the_step_into_the_window_counts(gf):
    write(gf, "gpu.ecc_uncorrected_errors_total", [(30, 7), (11, 7), (9, 8), (1, 9)])
    got = increases(gf, "gpu.ecc_uncorrected_errors_total", new_series_counts=False)
    assert got == {(GPU,): Reading(2, ago(1))}


def test_a_counter_reset_counts_from_zero(gf):
    # 5 → 6 (+1), reset to 2 (+2): the reader restarted and saw two more since
    write(gf, "gpu.nvlink_replay_errors_total", [(20, 5), (8, 6), (4, 2)])
    got = increases(gf, "gpu.nvlink_replay_errors_total", new_series_counts=False)
    assert got[(GPU,)].value == 3


def test_a_new_xid_series_counts_its_value_but_a_new_ecc_total_does_not(gf):
    write(gf, "gpu.xid_errors_total", [(3, 1)], labels={"xid": "79"})
    write(gf, "gpu.ecc_uncorrected_errors_total", [(3, 4)])
    xids = increases(gf, "gpu.xid_errors_total", extra_label="xid", new_series_counts=True)
    assert xids == {(GPU, "79"): Reading(1, ago(3))}
    assert increases(gf, "gpu.ecc_uncorrected_errors_total", new_series_counts=False) == {}


def test_an_xid_seen_before_the_window_is_not_news(gf):
    write(gf, "gpu.xid_errors_total", [(40, 1), (5, 1)], labels={"xid": "79"})
    assert increases(gf, "gpu.xid_errors_total", extra_label="xid",
                     new_series_counts=True) == {}


def test_read_signals_gathers_every_signal_per_gpu(gf):
    write(gf, "gpu.xid_errors_total", [(12, 1), (2, 3)], labels={"xid": "13"})
    write(gf, "gpu.remapped_rows_pending", [(2, 1)])
    write(gf, "gpu.clock_throttle_reasons", [(m, 0x40) for m in range(10, 0, -1)])
    got = read_signals(gf.telemetry, {GPU.upper(): None}, NOW, WINDOW)[GPU.upper()]
    assert got.xid_increases == {13: Reading(2, ago(2))}
    assert got.remap_pending == Reading(1, ago(2))
    assert got.thermal_share.value == 1.0 and got.power_share.value == 0.0
    assert got.throttle_span == timedelta(minutes=10)


def test_instance_xids_are_the_series_filed_under_an_instance(gf):
    """An XID series on a MIG instance counts for that instance and, summed, for its GPU;
    the GPU's own series names no instance."""
    gf.telemetry.write([
        Sample(series("gpu.xid_errors_total", GPU, "MIG-a", labels={"xid": "94"}, node="n1"),
               NOW - timedelta(minutes=3), 1),
        Sample(series("gpu.xid_errors_total", GPU, labels={"xid": "94"}, node="n1"),
               NOW - timedelta(minutes=2), 1)])
    found = instance_xids(gf.telemetry, NOW, WINDOW)
    assert found == {(GPU, "MIG-a"): {94: Reading(1, ago(3))}}
    assert contained_per_gpu(found) == {GPU: 1}
    gpu_level = read_signals(gf.telemetry, {GPU: None}, NOW, WINDOW,
                             contained=contained_per_gpu(found))[GPU]
    assert gpu_level.xid_increases == {94: Reading(2, ago(2))}
    assert gpu_level.contained_on_instances == 1
