"""The funnel's minute masks on the Prometheus-compatible store (tsdb/prometheus_masks.py), on a
real VictoriaMetrics: the property tests of the DuckDB masks
(tests/services/telemetry/test_masks_properties.py, the docs/design.md, "Funnel and activity"
definitions on random histories) run here unchanged, then what only this store does (its cache of
closed hours, and what `rollup` means on it)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.domain.telemetry.funnel import GR_ENGINE_ACTIVE, SM_ACTIVE, Thresholds
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.masks import MaskStore, SlotSpan
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, TelemetryStoreUnavailable, to_ms
from tests.services.telemetry.test_masks_properties import (
    HOUR0,
    test_latest_memory_reads_the_unit_own_series,
    test_the_activity_source_is_chosen_per_minute,
    test_the_idle_list_judges_what_the_definitions_judge,
    test_the_masks_count_what_the_definitions_count,
)
from tests.vm_engine import FlushingStore, clear, free_port, victoria_metrics

__all__ = ["test_latest_memory_reads_the_unit_own_series",
           "test_the_activity_source_is_chosen_per_minute",
           "test_the_idle_list_judges_what_the_definitions_judge",
           "test_the_masks_count_what_the_definitions_count", "victoria_metrics"]


@pytest.fixture
def fresh_store(victoria_metrics):
    """An empty engine each time it is called (the property tests call it per example)."""
    stores = []

    def make() -> FlushingStore:
        clear(victoria_metrics)
        store = FlushingStore(victoria_metrics)
        stores.append(store)
        return store
    yield make
    for store in stores:
        store.close()


def busy_minutes(store, gpu: str, first: int, count: int) -> None:
    store.write([Sample(series(metric, gpu, node="n", environment="e", model="H100-80GB"),
                        HOUR0 + timedelta(minutes=m, seconds=s), value)
                 for m in range(first, first + count) for s in (10, 40)
                 for metric, value in ((GR_ENGINE_ACTIVE, 90.0), (SM_ACTIVE, 70.0))])


def test_the_prometheus_store_answers_the_mask_questions(fresh_store):
    assert isinstance(fresh_store(), MaskStore)


def test_only_minutes_rolled_up_since_the_last_refresh_are_fetched(fresh_store):
    """Closed minutes are final: a refresh asks the engine only for what was rolled up
    since the last one, and the cached answer stays the answer."""
    store = fresh_store()
    busy_minutes(store, "GPU-1", 0, 90)
    masks = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(minutes=80))
    done = masks.refresh()
    assert masks.points_fetched == 80 * 2  # gr_engine_active and sm_active, once a minute
    assert masks.refresh() == done and masks.points_fetched == 160  # nothing new
    store.rollup(HOUR0 + timedelta(minutes=85, seconds=30))  # a minute ends at 85:00
    done = masks.refresh()
    assert done == to_ms(HOUR0) + 85 * MINUTE_MS
    assert masks.points_fetched == 170
    span = SlotSpan(("GPU-1", None), to_ms(HOUR0), to_ms(HOUR0) + 2 * HOUR_MS, 0, 1.0)
    tally = masks.tallies([span], span.lo_ms, span.hi_ms, done)[0]
    assert (tally.known, tally.active, tally.effective) == (85, 85, 85)
    assert tally.sm_percent == pytest.approx(85 * 70.0)


def test_hours_older_than_the_cache_are_fetched_for_the_question(fresh_store):
    store = fresh_store()
    busy_minutes(store, "GPU-1", 0, 30)
    masks = store.minute_masks(Thresholds())
    masks.cache_hours = 1
    store.rollup(HOUR0 + timedelta(hours=5))
    done = masks.refresh()
    assert masks.points_fetched == 0  # hour 0 is past the cache
    span = SlotSpan(("GPU-1", None), to_ms(HOUR0), done, 0, 1.0)
    assert masks.tallies([span], span.lo_ms, done, done)[0].active == 30
    assert masks.reporting_minutes((), span.lo_ms, done, done) == {(): 30}


def test_minutes_are_judged_only_once_rolled_up(fresh_store):
    """The engine has the samples at once, but a minute counts only once `rollup` (the
    upkeep loop, with its grace) has passed it — the DuckDB store's rule."""
    store = fresh_store()
    busy_minutes(store, "GPU-1", 0, 10)
    masks = store.minute_masks(Thresholds())
    assert masks.refresh() == 0
    store.rollup(HOUR0 + timedelta(minutes=4))
    store.rollup(HOUR0 + timedelta(minutes=3))  # the bound never goes back
    done = masks.refresh()
    span = SlotSpan(("GPU-1", None), to_ms(HOUR0), to_ms(HOUR0) + HOUR_MS, 0, 1.0)
    assert masks.tallies([span], span.lo_ms, span.hi_ms, done)[0].known == 4


def test_a_failed_fetch_counts_nothing_twice(victoria_metrics, fresh_store):
    """A refresh whose engine fails raises (the question gets 503) and leaves the cache as
    it was; the next refresh fetches the same minutes once."""
    store = fresh_store()
    busy_minutes(store, "GPU-1", 0, 30)
    masks = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(minutes=10))
    masks.refresh()
    store.rollup(HOUR0 + timedelta(minutes=20))
    store.query_url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TelemetryStoreUnavailable):
        masks.refresh()
    store.query_url = victoria_metrics
    done = masks.refresh()
    span = SlotSpan(("GPU-1", None), to_ms(HOUR0), done, 0, 1.0)
    tally = masks.tallies([span], span.lo_ms, done, done)[0]
    assert (tally.known, tally.sm_percent) == (20, pytest.approx(20 * 70.0))


def test_a_fleet_too_large_for_one_fetch_an_hour_is_fetched_in_shorter_parts(
        fresh_store, monkeypatch):
    import gpufleet.tsdb.prometheus_masks as module

    monkeypatch.setattr(module, "MAX_POINTS_PER_FETCH", 13)  # 6 points a minute: 2 minutes
    store = fresh_store()
    for gpu in ("GPU-1", "GPU-2", "GPU-3"):
        busy_minutes(store, gpu, 0, 30)
    masks = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(minutes=25))
    done = masks.refresh()
    assert masks._chunk_minutes() == 2  # 3 GPUs × 2 signals
    spans = [SlotSpan((gpu, None), to_ms(HOUR0), done, 0, 1.0)
             for gpu in ("GPU-1", "GPU-2", "GPU-3")]
    tally = masks.tallies(spans, to_ms(HOUR0), done, done)[0]
    assert (tally.known, tally.active) == (75, 75)
    assert masks.points_fetched == 25 * 6
