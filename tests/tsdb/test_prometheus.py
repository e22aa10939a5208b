"""The Prometheus-compatible telemetry store on a real VictoriaMetrics: the shared behaviour
(tests/tsdb_behaviour.py), then what only a remote engine shows (names, refusals, outages).

One VictoriaMetrics process serves the module (tests/vm_engine.py: it skips without the
binary, or fails under GPUFLEET_TEST_REQUIRE_VICTORIAMETRICS=1); each test starts from an
empty engine and every write is flushed, so a read sees it at once.
"""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from gpufleet.domain.telemetry.vocabulary import Comparison
from gpufleet.tsdb import Sample, ValueFilter, series
from gpufleet.tsdb.prometheus_names import exposition_labels, exposition_name, series_of_labels
from gpufleet.tsdb.prometheus_store import PrometheusTelemetryStore
from gpufleet.tsdb.protocol import TelemetryStoreUnavailable
from gpufleet.wire.remote_write import REQUEST_HEADERS, encode_write_request
from tests.tsdb_behaviour import *  # noqa: F403 - the shared behaviour tests run here
from tests.tsdb_behaviour import T0, at, only, ticks, values_of
from tests.vm_engine import GPUFLEET_SERIES, FlushingStore, clear, free_port, victoria_metrics

__all__ = ["victoria_metrics"]  # the fixture, for pytest


@pytest.fixture
def open_store(victoria_metrics):
    clear(victoria_metrics)
    return lambda: FlushingStore(victoria_metrics)


# -- what only the remote engine shows ------------------------------------------------------

def test_series_are_named_and_labelled_for_the_engine_and_read_back():
    link = series("gpu.nvlink_link_tx_bytes_per_second", "GPU-a", "MIG-1",
                  labels={"link": "3"}, node="n1", environment="prod", model="H100")
    labels = exposition_labels(link)
    assert labels == {"__name__": "gpufleet_gpu_nvlink_link_tx_bytes_per_second",
                      "gpu_uuid": "GPU-a", "mig_uuid": "MIG-1", "node": "n1",
                      "environment": "prod", "model": "H100", "link": "3"}
    assert series_of_labels(labels) == link
    whole = series("gpu.sm_active", "GPU-a")
    assert exposition_labels(whole) == {"__name__": "gpufleet_gpu_sm_active",
                                        "gpu_uuid": "GPU-a"}
    assert series_of_labels(exposition_labels(whole)) == whole
    assert series_of_labels({"__name__": "up", "gpu_uuid": "GPU-a"}) is None
    assert exposition_name("gpu.sm_active") == "gpufleet_gpu_sm_active"


def test_the_engine_holds_the_catalogue_name_and_unit_labels(store, victoria_metrics):
    store.write([Sample(series("gpu.sm_active", "GPU-a", node="n1", environment="prod"),
                        at(0), 42.0)])
    answer = httpx.get(f"{victoria_metrics}/api/v1/series",
                       params={"match[]": GPUFLEET_SERIES,
                               "start": str(T0.timestamp() - 86400)}).json()
    assert answer["data"] == [{"__name__": "gpufleet_gpu_sm_active", "gpu_uuid": "GPU-a",
                               "node": "n1", "environment": "prod"}]


def test_other_series_in_the_engine_are_not_taken_for_ours(store, victoria_metrics):
    body = encode_write_request([({"__name__": "up", "gpu_uuid": "GPU-a"},
                                  [(int(at(0).timestamp() * 1000), 1.0)])])
    httpx.post(f"{victoria_metrics}/api/v1/write", content=body,
               headers=REQUEST_HEADERS).raise_for_status()
    store.write(ticks("gpu.sm_active", "GPU-a", [10.0]))
    assert [v.series.metric for v in store.latest({"gpu_uuid": ["GPU-a"]})] == \
        ["gpu.sm_active"]


def test_a_last_bucket_cut_by_the_end_holds_only_what_is_before_the_end(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [10.0, 20.0, 30.0, 40.0, 90.0]))
    result = only(store.query_range("gpu.sm_active", T0, at(35), timedelta(seconds=30)))
    assert result.points == [(at(0), 20.0), (at(30), 40.0)]  # at(40) is past the end


def test_a_write_the_engine_refuses_raises_and_is_not_acknowledged(victoria_metrics):
    store = PrometheusTelemetryStore(f"{victoria_metrics}/no-such-path")
    with pytest.raises(TelemetryStoreUnavailable) as refused:
        store.write(ticks("gpu.sm_active", "GPU-a", [10.0]))
    assert refused.value.details["status"] in (400, 404)
    store.close()


def test_an_unreachable_engine_raises_on_write_and_query():
    store = PrometheusTelemetryStore(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(TelemetryStoreUnavailable, match="could not be reached"):
        store.write(ticks("gpu.sm_active", "GPU-a", [10.0]))
    with pytest.raises(TelemetryStoreUnavailable):
        store.query_range("gpu.sm_active", T0, at(10), timedelta(seconds=10))
    store.close()


def test_a_long_range_is_asked_in_chunks_the_engine_accepts(store, monkeypatch):
    import gpufleet.tsdb.prometheus_store as module

    monkeypatch.setattr(module, "MAX_POINTS_PER_QUERY", 4)
    store.write(ticks("gpu.sm_active", "GPU-a", [float(i) for i in range(10)]))
    result = only(store.query_range("gpu.sm_active", T0, at(100), timedelta(seconds=10)))
    assert values_of(result) == [float(i) for i in range(10)]


def test_a_filter_too_long_for_the_engine_is_applied_to_its_answer(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [10.0] * 3, node="n1")
                + ticks("gpu.sm_active", "GPU-b", [30.0] * 3, node="n1")
                + ticks("gpu.sm_active", "GPU-c", [50.0] * 3, node="n2"))
    many = [f"GPU-{n:08d}-0000-0000-0000-000000000000" for n in range(400)]
    filters = {"gpu_uuid": [*many, "GPU-b", "GPU-c"], "node": ["n1"]}
    result = only(store.query_range("gpu.sm_active", T0, at(30), timedelta(minutes=1),
                                    filters=filters))
    assert values_of(result) == [30.0]
    assert [v.series.gpu_uuid for v in store.latest(filters)] == ["GPU-b"]


def test_the_times_of_many_passing_series_are_asked_in_selectors_the_engine_accepts(store):
    # A filtered latest() asks for the passing series' sample times by their GPUs: 300
    # UUIDs of NVML's length do not fit in one matcher, so several are asked.
    gpus = [f"GPU-{n:08d}-0000-0000-0000-000000000000" for n in range(300)]
    store.write([sample for n, gpu in enumerate(gpus)
                 for sample in ticks("gpu.temperature_celsius", gpu, [50.0, 80.0 + n % 2])])
    hot = store.latest(metric="gpu.temperature_celsius",
                       where=ValueFilter(Comparison.GT, 80.0))
    assert sorted(v.series.gpu_uuid for v in hot) == gpus[1::2]
    assert {(v.at, v.value) for v in hot} == {(at(10), 81.0)}
