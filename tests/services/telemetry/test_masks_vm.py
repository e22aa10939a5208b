"""The funnel's minute masks on the Prometheus-compatible store (tsdb/prometheus_masks.py), on a
real VictoriaMetrics: the property tests of the DuckDB masks
(tests/services/telemetry/test_masks_properties.py, the docs/design.md, "Funnel and activity"
definitions on random histories) run here unchanged, then what only this store does (its cache of
closed hours, the hours recorded in the engine, and what `rollup` means on it)."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest

from gpufleet.domain.telemetry.funnel import GR_ENGINE_ACTIVE, MEMORY_USED, SM_ACTIVE, Thresholds
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.engine_masks import RECORDED_NAME, SLOT_MS, SLOTS
from gpufleet.tsdb.masks import MaskStore, RecordedInEngine, SlotSpan
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
    store = fresh_store()
    assert isinstance(store, MaskStore)
    # the upkeep loop refreshes them less often when quiet, the leader records their hours
    assert isinstance(store.minute_masks(Thresholds()), RecordedInEngine)


def test_only_minutes_rolled_up_since_the_last_refresh_are_fetched(fresh_store):
    """Closed minutes are final: a refresh asks the engine only for what was rolled up
    since the last one, and the cached answer stays the answer."""
    store = fresh_store()
    busy_minutes(store, "GPU-1", 0, 90)
    masks = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(minutes=80))
    done = masks.refresh()
    # Hour 0 in two halves, minutes 60–79 in one: gr, sm and sm's sum each time.
    assert masks.values_fetched == 3 * 3
    assert masks.refresh() == done and masks.values_fetched == 9  # nothing new
    store.rollup(HOUR0 + timedelta(minutes=85, seconds=30))  # a minute ends at 85:00
    done = masks.refresh()
    assert done == to_ms(HOUR0) + 85 * MINUTE_MS
    assert masks.values_fetched == 12
    span = SlotSpan(("GPU-1", None), to_ms(HOUR0), to_ms(HOUR0) + 2 * HOUR_MS, 0, 1.0)
    tally = masks.tallies([span], span.lo_ms, span.hi_ms, done)[0]
    assert (tally.known, tally.active, tally.effective) == (85, 85, 85)
    assert tally.sm_percent == pytest.approx(85 * 70.0)


def test_the_upkeep_refreshes_every_minute_only_while_questions_come(fresh_store):
    """The engine's cost of a refresh follows the series, not the minutes: in a quiet
    spell the upkeep loop folds the new minutes only once they are `quiet_refresh_ms`
    behind, and a question still folds every minute rolled up."""
    store = fresh_store()
    busy_minutes(store, "GPU-1", 0, 50)
    masks = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(minutes=20))
    assert masks.upkeep_refresh() == to_ms(HOUR0) + 20 * MINUTE_MS  # the cold fill
    store.rollup(HOUR0 + timedelta(minutes=21))
    assert masks.upkeep_refresh() is None  # nothing asked yet: quiet
    assert masks.filled_ms == to_ms(HOUR0) + 20 * MINUTE_MS
    store.rollup(HOUR0 + timedelta(minutes=35))
    assert masks.upkeep_refresh() == to_ms(HOUR0) + 35 * MINUTE_MS  # 15 minutes behind
    store.rollup(HOUR0 + timedelta(minutes=36))
    done = masks.refresh()  # a question folds the minute at once ...
    assert done == to_ms(HOUR0) + 36 * MINUTE_MS
    store.rollup(HOUR0 + timedelta(minutes=37))
    assert masks.upkeep_refresh() == done + MINUTE_MS  # ... and the upkeep keeps up
    masks.quiet_after_s = 0.0  # the questions stopped
    store.rollup(HOUR0 + timedelta(minutes=38))
    assert masks.upkeep_refresh() is None
    span = SlotSpan(("GPU-1", None), to_ms(HOUR0), to_ms(HOUR0) + HOUR_MS, 0, 1.0)
    done = masks.refresh()
    assert masks.tallies([span], span.lo_ms, span.hi_ms, done)[0].active == 38


class CountingEngine:
    """The masks' engine, counting its instant queries."""

    def __init__(self, engine):
        self.engine, self.queries = engine, []

    def instant(self, query: str, at_ms: int) -> list[dict]:
        self.queries.append(query)
        return self.engine.instant(query, at_ms)

    def newest_of_units(self, metric: str, at_ms: int, window_ms: int):
        self.queries.append(f"the newest {metric}")
        return self.engine.newest_of_units(metric, at_ms, window_ms)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def test_each_unit_memory_is_kept_beside_the_masks(fresh_store):
    """The idle list's memory: each unit's newest sample no older than `fresh_ms` before the
    masks' judged end (a moved unit's newest of its two series), asked of the engine once
    per refresh; while the idle list keeps asking, each refresh fetches it beside the
    minute's masks, so the question asks the engine nothing."""
    store = fresh_store()
    gib = 1024.0**3

    def memory(gpu: str, node: str, minutes: range, value: float) -> None:
        store.write([Sample(series(MEMORY_USED, gpu, node=node, environment="e",
                                   model="H100-80GB"), HOUR0 + timedelta(minutes=m), value)
                     for m in minutes])
    memory("GPU-1", "n", range(0, 12), 3 * gib)  # moved at minute 12, to a smaller figure
    memory("GPU-1", "m", range(12, 14), 1 * gib)
    memory("GPU-2", "n", range(0, 3), 2 * gib)  # stale by minute 14
    masks = store.minute_masks(Thresholds())
    engine = masks._engine = CountingEngine(masks._engine)
    store.rollup(HOUR0 + timedelta(minutes=14))
    masks.refresh()
    units = [("GPU-1", None), ("GPU-2", None), ("GPU-3", None)]
    fresh_ms = 5 * MINUTE_MS
    asked = len(engine.queries)
    assert masks.unit_memory(units, fresh_ms) == {("GPU-1", None): 1 * gib}
    assert len(engine.queries) == asked + 1  # the fleet's memory, once
    assert masks.unit_memory(units, fresh_ms) == {("GPU-1", None): 1 * gib}
    assert len(engine.queries) == asked + 1  # kept

    memory("GPU-2", "n", range(14, 15), 2 * gib)
    store.rollup(HOUR0 + timedelta(minutes=15))
    masks.refresh()  # the idle list asked a moment ago: fetched beside the masks
    asked = len(engine.queries)
    assert masks.unit_memory(units, fresh_ms) == {("GPU-1", None): 1 * gib,
                                                  ("GPU-2", None): 2 * gib}
    assert len(engine.queries) == asked

    masks.quiet_after_s = 0.0  # the idle list stopped asking: refreshes leave it out
    store.rollup(HOUR0 + timedelta(minutes=16))
    masks.refresh()
    asked = len(engine.queries)
    assert masks.unit_memory(units, fresh_ms) == {("GPU-1", None): 1 * gib,
                                                  ("GPU-2", None): 2 * gib}
    assert len(engine.queries) == asked + 1


def test_memory_of_thousands_of_moved_units_is_asked_within_the_query_length(fresh_store):
    """A row of racks re-cabled: 1,500 GPUs each answered by two series (old node, new
    node). Their UUIDs do not fit in one matcher of the engine's 16 kB queries; each
    unit still gets its newer series' value."""
    store = fresh_store()
    gpus = [f"GPU-{n:08d}-aaaa-bbbb-cccc-dddddddddddd" for n in range(1_500)]
    store.write([Sample(series(MEMORY_USED, gpu, node=node, environment="e",
                               model="H100-80GB"), HOUR0 + timedelta(minutes=minute), value)
                 for gpu in gpus
                 for node, minute, value in (("old", 1, 9.0), ("new", 2, 1.0))])
    masks = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(minutes=3))
    masks.refresh()
    units = [(gpu, None) for gpu in gpus]
    assert masks.unit_memory(units, 5 * MINUTE_MS) == {unit: 1.0 for unit in units}


def test_hours_older_than_the_cache_are_fetched_for_the_question(fresh_store):
    store = fresh_store()
    busy_minutes(store, "GPU-1", 0, 30)
    masks = store.minute_masks(Thresholds())
    masks.cache_hours = 1
    store.rollup(HOUR0 + timedelta(hours=5))
    done = masks.refresh()
    assert masks.values_fetched == 0  # hour 0 is past the cache
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


# -- hours recorded in the engine (the leader's `record_closed_hours`) ----------------------

def two_gpus_over_two_hours(store) -> None:
    """GPU-1 busy in minutes 0–89; GPU-2 in 20–49, then idle in 100–109 on another node
    (a second label set in the engine)."""
    busy_minutes(store, "GPU-1", 0, 90)
    busy_minutes(store, "GPU-2", 20, 30)
    store.write([Sample(series(metric, "GPU-2", node="m", environment="e", model="H100-80GB"),
                        HOUR0 + timedelta(minutes=m, seconds=20), value)
                 for m in range(100, 110)
                 for metric, value in ((GR_ENGINE_ACTIVE, 2.0), (SM_ACTIVE, 20.0))])


def answers(masks, done: int) -> tuple:
    """Everything the questions ask of the masks over hours 0–2, per GPU."""
    lo, hi = to_ms(HOUR0), to_ms(HOUR0) + 3 * HOUR_MS
    spans = [SlotSpan(("GPU-1", None), lo, hi, 1, 1.0),
             SlotSpan(("GPU-2", None), lo + 25 * MINUTE_MS, hi, 2, 0.5)]
    tallies = masks.tallies(spans, lo, hi, done, last_active=True)
    last = masks.last_active_minutes(spans, lo, hi, done)
    assert last == {g: tallies[g].last_active_ms for g in tallies
                    if tallies[g].last_active_ms is not None}
    assert masks.active_known(spans, lo, hi, done) == {g: (tallies[g].active, tallies[g].known)
                                                       for g in tallies}
    return ({g: tuple(tallies[g]) for g in tallies},
            masks.reporting_minutes(("node",), lo, hi, done), last)


def recorded_values(url: str, slot: str) -> dict[tuple[str, int], float]:
    """(GPU, hour) → the recorded value of `slot` (engine_masks.SLOTS)."""
    lines = httpx.post(f"{url}/api/v1/export",
                       data={"match[]": RECORDED_NAME}).text.splitlines()
    found = {}
    for line in lines:
        row = json.loads(line)
        for at, value in zip(row["timestamps"], row["values"], strict=True):
            hour = at // HOUR_MS * HOUR_MS
            if SLOTS[(at - hour) // SLOT_MS] == slot:
                found[(row["metric"]["gpu_uuid"], hour)] = value
    return found


def test_a_closed_hour_is_recorded_once_with_its_codes(victoria_metrics, fresh_store):
    store = fresh_store()
    two_gpus_over_two_hours(store)
    leader = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(hours=2, minutes=5))
    assert leader.record_closed_hours() == 25  # the cache's window: 25 closed hours
    assert leader.record_closed_hours() == 0
    # Another replica (a new leader) finds them recorded.
    assert store.minute_masks(Thresholds()).record_closed_hours() == 0
    codes = recorded_values(victoria_metrics, "activity_lo")
    h0, h1 = to_ms(HOUR0), to_ms(HOUR0) + HOUR_MS
    assert codes[("GPU-1", h0)] == 3**30 - 1  # minutes 0–29 hot: digit 2 each
    assert codes[("GPU-2", h0)] == sum(2 * 3**m for m in range(20, 30))
    assert codes[("GPU-2", h1)] == 0  # known minutes are in the hour's second half
    codes = recorded_values(victoria_metrics, "activity_hi")
    assert codes[("GPU-2", h1)] == sum(3**(m - 30) for m in range(40, 50))  # cold: 1
    assert ("GPU-2", h1 - HOUR_MS * 2) not in codes  # hours without data hold no series


def test_a_cold_replica_reads_the_recorded_hours(victoria_metrics, fresh_store):
    """A replica starting cold reads recorded hours (not the raw samples: they are
    deleted here) and computes only the open hour; its answers are the leader's."""
    store = fresh_store()
    two_gpus_over_two_hours(store)
    leader = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(hours=2, minutes=5))
    leader.record_closed_hours()
    done = leader.refresh()
    expected = answers(leader, done)
    assert expected[0][1][:3] == (90.0, 90.0, 90.0)
    assert expected[0][2][:3] == (12.5, 12.5, 17.5)  # weight 0.5 from minute 25
    assert expected[1] == {("n",): 130}  # a GPU counts where it first reported from
    httpx.post(f"{victoria_metrics}/api/v1/admin/tsdb/delete_series",
               data={"match[]": '{__name__=~"gpufleet_gpu_.+"}'}).raise_for_status()
    replica = store.minute_masks(Thresholds())
    assert replica.refresh() == done
    assert (replica.hours_read, replica.hours_computed) == (25, 0)
    assert answers(replica, done) == expected
    # Masks judged at other thresholds are never read for these.
    other = store.minute_masks(Thresholds(activity_percent=8.0))
    other.refresh()
    assert other.hours_read == 0


def test_an_hour_not_recorded_whole_is_computed(victoria_metrics, fresh_store):
    """No recording at all (no leader yet), or a marker whose units are not all found (an
    import not yet searchable): the replica computes those hours in the engine."""
    store = fresh_store()
    two_gpus_over_two_hours(store)
    store.rollup(HOUR0 + timedelta(hours=2, minutes=5))
    unrecorded = store.minute_masks(Thresholds())
    done = unrecorded.refresh()
    assert unrecorded.hours_read == 0 and unrecorded.hours_computed == 25
    leader = store.minute_masks(Thresholds())
    leader.record_closed_hours()
    # Hours 0 and 1 are vouched for with two units, but GPU-2's recording is not found (as
    # when an import is not yet searchable): neither is taken. (Writing a marker again with
    # another count would leave two samples at one time, and which one the engine's dedup
    # keeps is its own: that made this test flaky.)
    httpx.post(f"{victoria_metrics}/api/v1/admin/tsdb/delete_series",
               data={"match[]": '{__name__="gpufleet_masks", gpu_uuid="GPU-2"}'}
               ).raise_for_status()
    replica = store.minute_masks(Thresholds())
    replica.refresh()
    assert (replica.hours_read, replica.hours_computed) == (23, 2)
    assert answers(replica, done) == answers(unrecorded, done) == answers(leader, done)


def test_a_late_hour_is_recorded_when_it_closes_and_late_samples_stay_out(
        victoria_metrics, fresh_store):
    """The leader records an hour once the rollup bound passes its end; a sample written
    after that is not counted in it (as in a replica's cache, and on the DuckDB store)."""
    store = fresh_store()
    two_gpus_over_two_hours(store)
    leader = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(hours=1, minutes=30))
    assert leader.record_closed_hours() == 25  # up to hour 0
    store.rollup(HOUR0 + timedelta(hours=2, minutes=1))
    assert leader.record_closed_hours() == 1  # hour 1, from the leader's cache
    busy_minutes(store, "GPU-1", 95, 5)  # late: hour 1 is recorded
    replica = store.minute_masks(Thresholds())
    done = replica.refresh()
    assert replica.hours_computed == 0
    span = SlotSpan(("GPU-1", None), to_ms(HOUR0) + HOUR_MS, done, 0, 1.0)
    assert replica.tallies([span], span.lo_ms, done, done)[0].active == 30


# -- the open hour's first half, recorded apart ---------------------------------------------

def test_a_cold_replica_reads_the_open_hour_first_half(victoria_metrics, fresh_store):
    """Once the open hour's first half is closed the leader records it (from its cache,
    folded a refresh at a time); a replica starting cold reads it and computes in the
    engine only the minutes after it. GPU-1's raw samples are deleted: its minutes 60–89
    (hour 1's first half) come from the recording, and the answers stay the leader's."""
    store = fresh_store()
    two_gpus_over_two_hours(store)
    leader = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(hours=1, minutes=20))
    leader.refresh()
    store.rollup(HOUR0 + timedelta(hours=1, minutes=45))
    assert leader.record_closed_hours() == 25
    assert leader.halves_recorded == 1
    assert leader.record_closed_hours() == 0 and leader.halves_recorded == 1
    assert store.minute_masks(Thresholds()).record_closed_hours() == 0  # found recorded
    done = leader.refresh()
    expected = answers(leader, done)
    assert expected[0][1][:3] == (90.0, 90.0, 90.0)
    httpx.post(f"{victoria_metrics}/api/v1/admin/tsdb/delete_series",
               data={"match[]": '{__name__=~"gpufleet_gpu_.+", gpu_uuid="GPU-1"}'}
               ).raise_for_status()
    replica = store.minute_masks(Thresholds())
    assert replica.refresh() == done
    assert (replica.hours_read, replica.halves_read, replica.hours_computed) == (25, 1, 0)
    assert answers(replica, done) == expected


def test_a_first_half_not_recorded_whole_is_computed(victoria_metrics, fresh_store):
    """A half marker whose units are not all found: the replica computes the half."""
    store = fresh_store()
    two_gpus_over_two_hours(store)
    store.write([Sample(series(GR_ENGINE_ACTIVE, "GPU-3", node="n", environment="e",
                               model="H100-80GB"), HOUR0 + timedelta(minutes=m), 50.0)
                 for m in range(65, 70)])
    leader = store.minute_masks(Thresholds())
    store.rollup(HOUR0 + timedelta(hours=1, minutes=45))
    leader.record_closed_hours()
    assert leader.halves_recorded == 1
    done = leader.refresh()
    httpx.post(f"{victoria_metrics}/api/v1/admin/tsdb/delete_series",
               data={"match[]": '{__name__="gpufleet_masks_half", gpu_uuid="GPU-3"}'}
               ).raise_for_status()
    replica = store.minute_masks(Thresholds())
    replica.refresh()
    assert (replica.hours_read, replica.halves_read) == (25, 0)
    assert answers(replica, done) == answers(leader, done)
