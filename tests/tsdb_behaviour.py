"""Behaviour every telemetry store must show, whatever the engine (docs/design.md, "Telemetry
model").

A backend's test module imports these tests and provides the `open_store` fixture: a
callable that opens the store on the same storage each time it is called (so a test can
close and reopen it). The tests speak only the `TelemetryStore` protocol.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.vocabulary import Comparison
from gpufleet.tsdb import Binding, Sample, ValueFilter, series

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ticks(metric: str, gpu: str, values, *, every_s: int = 10, **attrs) -> list[Sample]:
    s = series(metric, gpu, **attrs)
    return [Sample(s, at(i * every_s), v) for i, v in enumerate(values)]


def only(results):
    assert len(results) == 1, results
    return results[0]


def values_of(result) -> list[float]:
    return [v for _, v in result.points]


@pytest.fixture
def store(open_store):
    opened = open_store()
    yield opened
    opened.close()


def test_written_values_come_back_at_their_times(store):
    assert store.write(ticks("gpu.sm_active", "GPU-a", [10.0, 20.0, 30.0])) == 3
    result = only(store.query_range("gpu.sm_active", T0, at(30), timedelta(seconds=10),
                                    group_by=["gpu_uuid"]))
    assert result.labels == {"gpu_uuid": "GPU-a"}
    assert result.points == [(at(0), 10.0), (at(10), 20.0), (at(20), 30.0)]


def test_missing_values_are_not_stored_as_numbers(store):
    assert store.write(ticks("gpu.sm_active", "GPU-a", [None, 40.0, None, 60.0])) == 2
    result = only(store.query_range("gpu.sm_active", T0, at(40), timedelta(seconds=10)))
    assert result.points == [(at(10), 40.0), (at(30), 60.0)]
    mean = only(store.query_range("gpu.sm_active", T0, at(40), timedelta(minutes=1)))
    assert values_of(mean) == [50.0]  # not (0 + 40 + 0 + 60) / 4


def test_percentages_are_averaged_across_gpus_never_summed(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [20.0] * 6)
                + ticks("gpu.sm_active", "GPU-b", [80.0] * 6))
    result = only(store.query_range("gpu.sm_active", T0, at(60), timedelta(minutes=1)))
    assert values_of(result) == [50.0]


def test_absolute_usage_sums_across_gpus(store):
    store.write(ticks("gpu.memory_used_bytes", "GPU-a", [1e9] * 6)
                + ticks("gpu.memory_used_bytes", "GPU-b", [3e9] * 6))
    result = only(store.query_range("gpu.memory_used_bytes", T0, at(60), timedelta(minutes=1)))
    assert values_of(result) == [4e9]


def test_sensors_average_across_gpus_and_can_give_the_peak(store):
    store.write(ticks("gpu.temperature_celsius", "GPU-a", [40.0, 50.0, 60.0])
                + ticks("gpu.temperature_celsius", "GPU-b", [70.0, 70.0, 70.0]))
    mean = only(store.query_range("gpu.temperature_celsius", T0, at(30), timedelta(minutes=1)))
    assert values_of(mean) == [60.0]
    peak = only(store.query_range("gpu.temperature_celsius", T0, at(30), timedelta(minutes=1),
                                  across="max"))
    assert values_of(peak) == [70.0]


def test_states_take_the_last_value_and_count_the_series_in_that_state(store):
    store.write(ticks("gpu.remapped_rows_pending", "GPU-a", [1.0, 1.0, 0.0])
                + ticks("gpu.remapped_rows_pending", "GPU-b", [0.0, 1.0, 1.0])
                + ticks("gpu.remapped_rows_pending", "GPU-c", [0.0, 0.0, 1.0]))
    result = only(store.query_range("gpu.remapped_rows_pending", T0, at(30),
                                    timedelta(minutes=1)))
    assert values_of(result) == [2.0]  # GPU-b and GPU-c end the minute with rows pending


def test_counters_give_their_increase_and_a_drop_is_a_reset(store):
    # 100 → 130 (+30), reset to 5 (+5 counted from 0), → 25 (+20): 55 in all.
    store.write(ticks("gpu.pcie_replays_total", "GPU-a", [100.0, 110.0, 130.0, 5.0, 25.0]))
    result = only(store.query_range("gpu.pcie_replays_total", T0, at(60),
                                    timedelta(minutes=1)))
    assert values_of(result) == [55.0]
    total = only(store.query_range("gpu.pcie_replays_total", T0, at(60), timedelta(minutes=1),
                                   over_time="last"))
    assert values_of(total) == [25.0]


def test_counter_increases_of_the_steps_add_up_to_the_window(store):
    values = [0.0, 4.0, 9.0, 2.0, 3.0, 8.0, 1.0, 1.0, 6.0, 7.0, 20.0, 21.0]
    store.write(ticks("gpu.ecc_uncorrected_errors_total", "GPU-a", values, every_s=30))
    by_minute = only(store.query_range("gpu.ecc_uncorrected_errors_total", T0, at(360),
                                       timedelta(minutes=1)))
    whole = only(store.query_range("gpu.ecc_uncorrected_errors_total", T0, at(360),
                                   timedelta(minutes=6)))
    assert sum(values_of(by_minute)) == values_of(whole)[0] == 4 + 5 + 2 + 1 + 5 + 1 + 5 + 1 \
        + 13 + 1


def test_group_by_environment(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [10.0] * 6, environment="prod")
                + ticks("gpu.sm_active", "GPU-b", [30.0] * 6, environment="prod")
                + ticks("gpu.sm_active", "GPU-c", [90.0] * 6, environment="dev"))
    results = store.query_range("gpu.sm_active", T0, at(60), timedelta(minutes=1),
                                group_by=["environment"])
    assert {r.labels["environment"]: values_of(r) for r in results} == \
        {"prod": [20.0], "dev": [90.0]}


def test_filters_on_unit_and_extra_labels(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [10.0] * 3, node="n1")
                + ticks("gpu.sm_active", "GPU-b", [30.0] * 3, node="n2")
                + ticks("gpu.sm_active", "GPU-c", [50.0] * 3, node="n2"))
    result = only(store.query_range("gpu.sm_active", T0, at(30), timedelta(minutes=1),
                                    filters={"node": ["n2"], "gpu_uuid": ["GPU-b", "GPU-a"]}))
    assert values_of(result) == [30.0]
    link = "gpu.nvlink_link_tx_bytes_per_second"
    store.write([Sample(series(link, "GPU-a", labels={"link": str(n)}), at(0), 100.0 * n)
                 for n in range(4)])
    by_link = store.query_range(link, T0, at(10), timedelta(seconds=10),
                                filters={"link": ["1", "3"]}, group_by=["link"])
    assert {r.labels["link"]: values_of(r) for r in by_link} == {"1": [100.0], "3": [300.0]}
    assert store.query_range("gpu.sm_active", T0, at(30), timedelta(minutes=1),
                             filters={"node": ["nowhere"]}) == []


def test_an_empty_or_none_filter_value_means_the_label_is_absent(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [10.0] * 3)
                + ticks("gpu.sm_active", "GPU-a", [30.0] * 3, mig_uuid="MIG-1"))
    for absent in ("", None):  # `?filter=mig_uuid=` at the API, or None from code
        result = only(store.query_range("gpu.sm_active", T0, at(30), timedelta(minutes=1),
                                        filters={"mig_uuid": [absent]}))
        assert values_of(result) == [10.0]  # the whole GPU, not its MIG instance


def test_mig_instances_are_series_of_their_own(store):
    store.write([Sample(series("gpu.sm_active", "GPU-a", "MIG-1"), at(0), 10.0),
                 Sample(series("gpu.sm_active", "GPU-a", "MIG-2"), at(0), 30.0),
                 Sample(series("gpu.sm_active", "GPU-a"), at(0), 90.0)])
    migs = only(store.query_range("gpu.sm_active", T0, at(10), timedelta(seconds=10),
                                  filters={"mig_uuid": ["MIG-1", "MIG-2"]}))
    whole = only(store.query_range("gpu.sm_active", T0, at(10), timedelta(seconds=10),
                                   filters={"mig_uuid": [None]}))
    assert (values_of(migs), values_of(whole)) == ([20.0], [90.0])


def test_one_gpus_series_by_instance_are_those_of_the_whole_fleet(store):
    """A `gpu_uuid` filter (the GPU page's question) answers what the unfiltered query
    answers for that GPU: its own series and each instance's, no other GPU's."""
    store.write([Sample(series("gpu.sm_active", "GPU-b"), at(0), 5.0)]
                + [Sample(series("gpu.sm_active", "GPU-a", mig), at(0), value)
                   for mig, value in (("MIG-2", 30.0), (None, 90.0), ("MIG-1", 10.0))])
    ask = {"metric": "gpu.sm_active", "start": T0, "end": at(10),
           "step": timedelta(seconds=10)}
    one = store.query_range(**ask, filters={"gpu_uuid": ["GPU-a"]}, group_by=["mig_uuid"])
    every = store.query_range(**ask, group_by=["gpu_uuid", "mig_uuid"])
    assert {r.labels["mig_uuid"]: values_of(r) for r in one} == \
        {r.labels["mig_uuid"]: values_of(r) for r in every if r.labels["gpu_uuid"] == "GPU-a"} \
        == {"MIG-2": [30.0], None: [90.0], "MIG-1": [10.0]}


def test_latest_gives_the_newest_value_of_each_series(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [10.0, 20.0, None])
                + ticks("gpu.sm_active", "GPU-b", [70.0])
                + ticks("gpu.power_usage_watts", "GPU-a", [300.0, 310.0]))
    latest = store.latest({"gpu_uuid": ["GPU-a", "GPU-b"]}, metric="gpu.sm_active")
    assert {(v.series.gpu_uuid, v.at, v.value) for v in latest} == \
        {("GPU-a", at(10), 20.0), ("GPU-b", at(0), 70.0)}
    everything = store.latest({"gpu_uuid": ["GPU-a"]})
    assert {(v.series.metric, v.value) for v in everything} == \
        {("gpu.sm_active", 20.0), ("gpu.power_usage_watts", 310.0)}
    assert store.latest(metric="gpu.sm_active", since=at(5)) == \
        [v for v in latest if v.series.gpu_uuid == "GPU-a"]
    # GPU-b's only sample lies at `since` itself: the oldest allowed, still answered
    assert store.latest(metric="gpu.sm_active", since=at(0)) == latest


def test_latest_of_units_gives_each_asked_units_newest_value(store):
    store.write(ticks("gpu.memory_used_bytes", "GPU-a", [1e9, 2e9])
                + ticks("gpu.memory_used_bytes", "GPU-m", [5e8], mig_uuid="MIG-1")
                + ticks("gpu.memory_used_bytes", "GPU-m", [7e8], mig_uuid="MIG-2")
                # GPU-c moved node: its series on node-2 is the newer one
                + ticks("gpu.memory_used_bytes", "GPU-c", [3e9, 4e9], node="node-2")
                + [Sample(series("gpu.memory_used_bytes", "GPU-c", node="node-1"), at(5), 9e9)]
                + ticks("gpu.memory_used_bytes", "GPU-x", [6e9])  # not asked
                + ticks("gpu.sm_active", "GPU-a", [50.0]))  # another metric
    asked = [("GPU-a", None), ("GPU-m", "MIG-1"), ("GPU-m", "MIG-2"), ("GPU-c", None),
             ("GPU-gone", None)]
    assert store.latest_of_units("gpu.memory_used_bytes", asked, since=at(0)) == \
        {("GPU-a", None): 2e9, ("GPU-m", "MIG-1"): 5e8, ("GPU-m", "MIG-2"): 7e8,
         ("GPU-c", None): 4e9}
    assert store.latest_of_units("gpu.memory_used_bytes", asked, since=at(5)) == \
        {("GPU-a", None): 2e9, ("GPU-c", None): 4e9}
    assert store.latest_of_units("gpu.memory_used_bytes", [], since=at(0)) == {}


def test_a_value_filter_answers_only_the_values_that_pass_it(store):
    # The comparison an alert rule makes, made by the store: only what passes comes back.
    store.write(ticks("gpu.temperature_celsius", "GPU-a", [80.0, 90.0, 95.0])
                + ticks("gpu.temperature_celsius", "GPU-b", [50.0, 50.0, 50.0])
                + ticks("gpu.temperature_celsius", "GPU-c", [88.0, 88.0, 88.0]))
    hot = store.query_range("gpu.temperature_celsius", T0, at(30), timedelta(minutes=1),
                            group_by=["gpu_uuid"], where=ValueFilter(Comparison.GE, 88.0))
    assert {r.labels["gpu_uuid"]: values_of(r) for r in hot} == {"GPU-a": [88.0 + 1 / 3],
                                                                 "GPU-c": [88.0]}
    assert store.query_range("gpu.temperature_celsius", T0, at(30), timedelta(minutes=1),
                             group_by=["gpu_uuid"], where=ValueFilter(Comparison.GT, 99.0)) \
        == []
    newest = store.latest(metric="gpu.temperature_celsius",
                          where=ValueFilter(Comparison.LT, 90.0))
    assert {(v.series.gpu_uuid, v.value) for v in newest} == {("GPU-b", 50.0),
                                                              ("GPU-c", 88.0)}


def test_a_value_filter_tests_bits_and_counter_increases(store):
    store.write(ticks("gpu.clock_throttle_reasons", "GPU-a", [0.0, 64.0])
                + ticks("gpu.clock_throttle_reasons", "GPU-b", [0.0, 4.0 + 1.0])
                + ticks("gpu.clock_throttle_reasons", "GPU-c", [128.0, 0.0])
                + ticks("gpu.xid_errors_total", "GPU-a", [3.0, 3.0, 3.0], labels={"xid": "79"})
                + ticks("gpu.xid_errors_total", "GPU-b", [3.0, 4.0, 6.0], labels={"xid": "79"})
                + ticks("gpu.xid_errors_total", "GPU-c", [9.0, 1.0, 1.0], labels={"xid": "79"}))
    slowed = store.latest(metric="gpu.clock_throttle_reasons",
                          where=ValueFilter(Comparison.HAS_ANY_BITS, 64.0 + 4.0))
    assert {(v.series.gpu_uuid, v.value) for v in slowed} == {("GPU-a", 64.0),
                                                              ("GPU-b", 5.0)}
    # Runs of adjacent bits (0xE8: bit 3, bits 5–7), as the throttling rule's mask.
    store.write(ticks("gpu.clock_throttle_reasons", "GPU-d", [0.0, 32.0 + 16.0 + 1.0])
                + ticks("gpu.clock_throttle_reasons", "GPU-e", [0.0, 16.0 + 4.0]))
    assert {v.series.gpu_uuid for v in store.latest(
        metric="gpu.clock_throttle_reasons",
        where=ValueFilter(Comparison.HAS_ANY_BITS, 0xE8))} == {"GPU-a", "GPU-d"}
    # One step over the whole window: the increase an alert rule compares.
    grew = store.query_range("gpu.xid_errors_total", T0, at(30), timedelta(minutes=1),
                             group_by=["gpu_uuid", "xid"],
                             where=ValueFilter(Comparison.GE, 1.0))
    assert {r.labels["gpu_uuid"]: values_of(r) for r in grew} == {"GPU-b": [3.0],
                                                                  "GPU-c": [1.0]}
    assert store.query_range("gpu.xid_errors_total", T0, at(30), timedelta(minutes=1),
                             group_by=["gpu_uuid", "xid"],
                             where=ValueFilter(Comparison.GT, 3.0)) == []


def test_a_value_filter_can_compare_a_percentage_of_the_units_total(store):
    gib = 1024.0**3
    store.write(ticks("gpu.memory_used_bytes", "GPU-a", [70 * gib, 79 * gib])
                + ticks("gpu.memory_used_bytes", "GPU-b", [79 * gib, 10 * gib])
                + ticks("gpu.memory_used_bytes", "GPU-c", [40 * gib])  # a 40 GiB board
                + ticks("gpu.memory_used_bytes", "GPU-d", [80 * gib])  # no total: never
                + ticks("gpu.memory_used_bytes", "GPU-e", [1 * gib])  # total 0: never
                + ticks("gpu.memory_total_bytes", "GPU-a", [80 * gib, 80 * gib])
                + ticks("gpu.memory_total_bytes", "GPU-b", [80 * gib, 80 * gib])
                + ticks("gpu.memory_total_bytes", "GPU-c", [40 * gib])
                + ticks("gpu.memory_total_bytes", "GPU-e", [0.0]))
    full = store.latest(metric="gpu.memory_used_bytes",
                        where=ValueFilter(Comparison.GE, 95.0,
                                          percent_of="gpu.memory_total_bytes"))
    assert {(v.series.gpu_uuid, v.value) for v in full} == {("GPU-a", 79 * gib),
                                                            ("GPU-c", 40 * gib)}
    with pytest.raises(InvalidInput):
        store.query_range("gpu.memory_used_bytes", T0, at(30), timedelta(minutes=1),
                          where=ValueFilter(Comparison.GE, 95.0,
                                            percent_of="gpu.memory_total_bytes"))


def test_data_survives_a_reopen(open_store):
    first = open_store()
    first.write(ticks("gpu.sm_active", "GPU-a", [10.0, 30.0], environment="prod"))
    first.close()
    second = open_store()
    try:
        second.write(ticks("gpu.sm_active", "GPU-b", [50.0, 50.0], environment="prod"))
        result = only(second.query_range("gpu.sm_active", T0, at(20), timedelta(minutes=1),
                                         group_by=["environment"]))
        assert result.labels == {"environment": "prod"}
        assert values_of(result) == [35.0]  # (20 + 50) / 2: GPU-a kept its series
    finally:
        second.close()


def test_concurrent_writers_and_readers_do_not_corrupt(store):
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for batch in range(10):
                store.write([Sample(series("gpu.sm_active", f"GPU-{n}-{g}"),
                                    at(batch * 10), float(n)) for g in range(20)])
        except BaseException as error:
            errors.append(error)

    def reader() -> None:
        try:
            for _ in range(10):
                store.query_range("gpu.sm_active", T0, at(100), timedelta(seconds=10))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    result = only(store.query_range("gpu.sm_active", T0, at(100), timedelta(seconds=100),
                                    group_by=[], across="sum"))
    assert values_of(result) == [sum(range(6)) * 20.0]
    assert len(store.latest(metric="gpu.sm_active")) == 6 * 20


def test_ownership_comes_from_binding_intervals_at_query_time(store):
    half = 180  # ticks in 30 minutes
    store.write(ticks("gpu.sm_active", "GPU-a", [20.0] * half + [40.0] * half)
                + ticks("gpu.sm_active", "GPU-b", [80.0] * 2 * half)
                + ticks("gpu.sm_active", "GPU-c", [99.0] * 2 * half))
    middle = T0 + timedelta(minutes=30)
    bindings = {("GPU-a", None): [Binding(T0, middle, "alloc-1", "p1"),
                                  Binding(middle, None, "alloc-2", "p2")],
                ("GPU-b", None): [Binding(T0 - HOUR, None, "alloc-3", "p1")]}
    step = timedelta(minutes=30)
    results = store.query_range("gpu.sm_active", T0, T0 + HOUR, step, group_by=["project"],
                                bindings=bindings)
    assert {r.labels["project"]: r.points for r in results} == {
        "p1": [(T0, 50.0), (middle, 80.0)],  # GPU-a left p1 at the half hour
        "p2": [(middle, 40.0)],
    }  # GPU-c, held by nobody, counts nowhere
    p2 = only(store.query_range("gpu.sm_active", T0, T0 + HOUR, HOUR, bindings=bindings,
                                filters={"project": ["p2"]}, group_by=["allocation"]))
    assert (p2.labels, values_of(p2)) == ({"allocation": "alloc-2"}, [40.0])


def columns_of(samples: list[Sample]):
    """The samples as ingest hands them over: parallel columns over a series list."""
    from gpufleet.tsdb import SampleColumns

    index: dict = {}
    for s in samples:
        index.setdefault(s.series, len(index))
    return SampleColumns(series=list(index), series_index=[index[s.series] for s in samples],
                         times_ms=[int(s.at.timestamp() * 1000) for s in samples],
                         values=[s.value for s in samples])


def test_columns_are_stored_like_samples_and_a_replayed_key_is_not_counted_twice(store):
    first = columns_of(ticks("gpu.power_usage_watts", "GPU-a", [100.0, 200.0]))
    second = columns_of(ticks("gpu.power_usage_watts", "GPU-b", [50.0, 50.0]))
    assert store.write_columns([("node-1:b1", first), ("node-2:b1", second)]) == [2, 2]
    # A replay after a lost acknowledgement, alone and beside a new batch (and the same key
    # twice in one call): each replay is answered None and nothing is stored twice.
    third = columns_of(ticks("gpu.power_usage_watts", "GPU-c", [10.0]))
    assert store.write_columns([("node-1:b1", first), ("node-3:b1", third),
                                ("node-3:b1", third)]) == [None, 1, None]
    total = only(store.query_range("gpu.power_usage_watts", T0, at(20), timedelta(seconds=10)))
    assert total.points == [(at(0), 160.0), (at(10), 250.0)]


def test_numpy_columns_are_stored_as_lists_are(store):
    """Remote-write's steady body hands the store numpy columns and a range index (sample i
    of series i): stored as the same samples in lists would be."""
    import numpy as np

    from gpufleet.tsdb import SampleColumns

    listed = columns_of([*ticks("gpu.power_usage_watts", "GPU-a", [100.0]),
                         *ticks("gpu.power_usage_watts", "GPU-b", [50.5])])
    as_numpy = SampleColumns(listed.series, range(2),
                             np.array([at(10).timestamp() * 1000] * 2, np.int64),
                             np.array([300.0, 25.25]))
    assert store.write_columns([("node-1:l", listed), ("node-1:n", as_numpy)]) == [2, 2]
    assert store.write_columns([("node-1:n", as_numpy)]) == [None]  # its key was kept
    total = only(store.query_range("gpu.power_usage_watts", T0, at(20), timedelta(seconds=10)))
    assert total.points == [(at(0), 150.5), (at(10), 325.25)]
    assert sorted(v.value for v in store.latest()) == [25.25, 300.0]
