"""The replay check's shortcut: recent uploads are answered from memory, exactly; anything
it cannot vouch for is still asked of DuckDB."""

from __future__ import annotations

import time

from gpufleet.tsdb import SampleColumns, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.recent_keys import RecentKeys

MINUTE_MS = 60_000


class Clock:
    def __init__(self, now_ms: int):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def test_only_uploads_newer_than_the_start_allowance_and_the_window_are_answered():
    clock = Clock(1_000 * MINUTE_MS)
    recent = RecentKeys(window_ms=10 * MINUTE_MS, future_allowance_ms=60 * MINUTE_MS,
                        now_ms=clock)
    assert not recent.answers_for(clock.now_ms)  # within the allowance after a start
    clock.now_ms += 80 * MINUTE_MS
    assert recent.answers_for(clock.now_ms - 9 * MINUTE_MS)
    assert not recent.answers_for(clock.now_ms - 11 * MINUTE_MS)  # a spool replay: ask DuckDB


def test_keys_stay_while_their_samples_are_in_the_window():
    clock = Clock(0)
    recent = RecentKeys(window_ms=10 * MINUTE_MS, future_allowance_ms=0, now_ms=clock)
    recent.add("old", newest_sample_ms=0)
    recent.add("new", newest_sample_ms=15 * MINUTE_MS)
    clock.now_ms = 20 * MINUTE_MS
    for n in range(4096):  # enough additions to sweep
        recent.add(f"k{n}", newest_sample_ms=20 * MINUTE_MS)
    assert "new" in recent and "old" not in recent


def upload(gpu: str, at_ms: int) -> SampleColumns:
    return SampleColumns([series("gpu.sm_active", gpu)], [0], [at_ms], [50.0])


def test_a_recent_replay_is_caught_after_it_was_applied_and_an_old_one_by_duckdb(tmp_path):
    now_ms = int(time.time() * 1000)
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", apply_interval_s=None,
                                 future_allowance_s=0)
    try:
        assert store.write_columns([("n:new", upload("GPU-a", now_ms))]) == [1]
        assert store.write_columns([("n:old", upload("GPU-b", now_ms - 3_600_000))]) == [1]
        store.apply_journal()  # neither key is pending any more
        assert store.write_columns([("n:new", upload("GPU-a", now_ms)),
                                    ("n:old", upload("GPU-b", now_ms - 3_600_000))]) == [
            None, None]
    finally:
        store.close()
    reopened = DuckDBTelemetryStore(tmp_path / "t.duckdb", apply_interval_s=None)
    try:  # a new process remembers nothing; DuckDB still knows both keys
        assert reopened.write_columns([("n:new", upload("GPU-a", now_ms))]) == [None]
    finally:
        reopened.close()


def test_the_start_allowance_ends_at_the_newest_sample_earlier_processes_stored():
    clock = Clock(1_000 * MINUTE_MS)
    recent = RecentKeys(window_ms=10 * MINUTE_MS, future_allowance_ms=60 * MINUTE_MS,
                        now_ms=clock)
    recent.stored_through(clock.now_ms - 2 * MINUTE_MS)
    assert recent.answers_for(clock.now_ms - 2 * MINUTE_MS + 1)
    assert not recent.answers_for(clock.now_ms - 2 * MINUTE_MS)  # may be a replay: ask DuckDB
    assert not recent.answers_for(clock.now_ms - 11 * MINUTE_MS)  # the window still holds
    fresh = RecentKeys(window_ms=10 * MINUTE_MS, future_allowance_ms=60 * MINUTE_MS,
                       now_ms=clock)
    assert not fresh.answers_for(clock.now_ms)
    fresh.stored_through(None)  # nothing stored: the window alone decides
    assert fresh.answers_for(clock.now_ms - 9 * MINUTE_MS)


def test_a_reopened_store_vouches_only_for_uploads_newer_than_what_it_holds(tmp_path):
    now_ms = int(time.time() * 1000)
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", apply_interval_s=None)
    try:  # within the first hour after a start, but nothing stored yet: answered in memory
        assert store._recent.answers_for(now_ms)
        assert store.write_columns([("n:a", upload("GPU-a", now_ms))]) == [1]
    finally:
        store.close()  # applied at close: the key is in DuckDB, not in the journal
    reopened = DuckDBTelemetryStore(tmp_path / "t.duckdb", apply_interval_s=None)
    try:
        assert not reopened._recent.answers_for(now_ms)
        assert reopened._recent.answers_for(now_ms + 1)
        assert reopened.write_columns([("n:a", upload("GPU-a", now_ms)),
                                       ("n:b", upload("GPU-b", now_ms + 1))]) == [None, 1]
    finally:
        reopened.close()
