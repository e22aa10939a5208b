"""The DuckDB store's ingest journal: durable on return, exactly once across crashes, torn
and corrupt records handled, and the packed-column Parquet loader it relies on.

Stores here run without the applier thread (`apply_interval_s=None`) unless a test is about
that thread, so what is journalled stays pending until the test applies or reads it."""

from __future__ import annotations

import logging
import threading
from array import array
from datetime import timedelta

import duckdb
import numpy as np
import pytest

from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.journal import SUFFIX, JournalRecord, encode_record, packed, read_segment
from gpufleet.tsdb.parquet_columns import PackedColumn, PhysicalType, write_parquet
from gpufleet.tsdb.protocol import series
from tests.tsdb_behaviour import T0, at, columns_of, only, ticks


def batch(gpu: str, values: list[float]):
    return columns_of(ticks("gpu.power_usage_watts", gpu, values, node="node-1"))


def open_store(path, **options) -> DuckDBTelemetryStore:
    return DuckDBTelemetryStore(path, threads=1, apply_interval_s=options.pop(
        "apply_interval_s", None), **options)


def stored(store: DuckDBTelemetryStore) -> list[tuple]:
    """Every raw sample in DuckDB (not the journal), with its series' GPU."""
    return store._con.execute("SELECT s.gpu_uuid, ts_ms, value FROM samples JOIN series s "
                              "USING (series_id) ORDER BY ALL").fetchall()


def keys_in_duckdb(store: DuckDBTelemetryStore) -> list[str]:
    return [k for (k,) in store._con.execute(
        "SELECT batch_key FROM ingested_batches ORDER BY 1").fetchall()]


def segments(path) -> list:
    return sorted((path.parent / (path.name + ".journal")).glob(f"*{SUFFIX}"))


@pytest.fixture
def path(tmp_path):
    return tmp_path / "telemetry.duckdb"


def test_a_replay_of_a_key_still_in_the_journal_is_answered_none(path):
    store = open_store(path)
    assert store.write_columns([("n:1", batch("GPU-a", [1.0, 2.0]))]) == [2]
    assert stored(store) == []  # journalled, not applied yet
    assert store.write_columns([("n:1", batch("GPU-a", [1.0, 2.0])),
                                ("n:2", batch("GPU-b", [5.0]))]) == [None, 1]
    store.apply_journal()
    assert store.write_columns([("n:1", batch("GPU-a", [1.0, 2.0]))]) == [None]
    assert len(stored(store)) == 3
    assert keys_in_duckdb(store) == ["n:1", "n:2"]
    store.close()


def test_a_query_sees_what_was_journalled_before_it(path):
    store = open_store(path)
    store.write_columns([("n:1", batch("GPU-a", [10.0, 30.0]))])
    result = only(store.query_range("gpu.power_usage_watts", T0, at(20), timedelta(minutes=1)))
    assert result.points == [(T0, 20.0)]
    store.write_columns([("n:2", batch("GPU-b", [7.0]))])
    assert {v.series.gpu_uuid: v.value for v in store.latest()} == {"GPU-a": 30.0,
                                                                    "GPU-b": 7.0}
    store.close()


def test_after_a_crash_everything_acknowledged_is_there_once(path):
    store = open_store(path)
    store.write_columns([("n:1", batch("GPU-a", [1.0])), ("n:2", batch("GPU-b", [2.0]))])
    store.apply_journal()  # these two reached DuckDB
    store.write_columns([("n:3", batch("GPU-c", [3.0]))])
    store.write_columns([("n:4", columns_of(ticks("gpu.power_usage_watts", "GPU-a", [4.0],
                                                  node="node-2")))])  # GPU-a moved
    store._simulate_crash()  # n:3 and n:4 only in the journal

    reopened = open_store(path)
    assert stored(reopened) == [("GPU-a", T0.timestamp() * 1000, 1.0),
                                ("GPU-a", T0.timestamp() * 1000, 4.0),
                                ("GPU-b", T0.timestamp() * 1000, 2.0),
                                ("GPU-c", T0.timestamp() * 1000, 3.0)]
    assert keys_in_duckdb(reopened) == ["n:1", "n:2", "n:3", "n:4"]
    assert [s.node for s in reopened.series() if s.gpu_uuid == "GPU-a"] == ["node-2"]
    assert segments(path) == []
    assert reopened.write_columns([("n:3", batch("GPU-c", [3.0])),
                                   ("n:5", batch("GPU-d", [5.0]))]) == [None, 1]
    assert {s.gpu_uuid for s in reopened.series()} == {"GPU-a", "GPU-b", "GPU-c", "GPU-d"}
    reopened.close()


def test_a_crash_between_duckdb_commit_and_journal_cleanup_counts_nothing_twice(path,
                                                                               monkeypatch):
    store = open_store(path)
    store.write_columns([("n:1", batch("GPU-a", [1.0, 2.0]))])
    monkeypatch.setattr(type(store._journal), "discard_through", lambda self, number: None)
    store.apply_journal()  # committed to DuckDB, journal segment left behind
    monkeypatch.undo()
    store._simulate_crash()
    assert segments(path)

    reopened = open_store(path)
    assert len(stored(reopened)) == 2
    assert keys_in_duckdb(reopened) == ["n:1"]
    assert segments(path) == []
    reopened.close()


def test_a_torn_last_record_is_dropped_and_earlier_records_kept(path, caplog):
    store = open_store(path)
    store.write_columns([("n:1", batch("GPU-a", [1.0]))])
    store.write_columns([("n:2", batch("GPU-b", [2.0, 3.0]))])
    store._simulate_crash()
    (segment,) = segments(path)
    segment.write_bytes(segment.read_bytes()[:-5])  # the crash cut the last append short

    with caplog.at_level(logging.WARNING, logger="gpufleet.tsdb.journal"):
        reopened = open_store(path)
    assert [gpu for gpu, _, _ in stored(reopened)] == ["GPU-a"]
    assert "torn final record" in caplog.text
    # n:2 was never acknowledged: the agent sends it again, and it is stored.
    assert reopened.write_columns([("n:2", batch("GPU-b", [2.0, 3.0]))]) == [2]
    reopened.close()


def test_a_corrupt_record_stops_the_replay_there_and_keeps_the_segment(path, caplog):
    store = open_store(path)
    for n, gpu in enumerate(("GPU-a", "GPU-b", "GPU-c"), start=1):
        store.write_columns([(f"n:{n}", batch(gpu, [float(n)]))])
    store._simulate_crash()
    (segment,) = segments(path)
    data = bytearray(segment.read_bytes())
    reading = read_segment(bytes(data))
    middle = len(encode_record(reading.records[0])) + 30  # inside the second record's body
    data[middle] ^= 0xFF
    segment.write_bytes(bytes(data))

    with caplog.at_level(logging.ERROR, logger="gpufleet.tsdb.journal"):
        reopened = open_store(path)
    assert [gpu for gpu, _, _ in stored(reopened)] == ["GPU-a"]
    assert "corrupt" in caplog.text
    assert segment.with_suffix(".corrupt").exists()
    assert segments(path) == []
    # Journalling goes on in a segment of its own.
    assert reopened.write_columns([("n:9", batch("GPU-z", [9.0]))]) == [1]
    reopened.close()
    assert sorted(p.suffix for p in segment.parent.iterdir()) == [".corrupt"]


def test_a_failed_apply_keeps_the_uploads_journalled_and_pending(path, monkeypatch):
    store = open_store(path)
    store.write_columns([("n:1", batch("GPU-a", [1.0]))])

    def refuse(self, con, records, **options):
        raise duckdb.IOException("disk full")

    monkeypatch.setattr(DuckDBTelemetryStore, "_load", refuse)
    with pytest.raises(duckdb.IOException):
        store.apply_journal()
    assert store.write_columns([("n:1", batch("GPU-a", [1.0])),
                                ("n:2", batch("GPU-b", [2.0]))]) == [None, 1]
    monkeypatch.undo()
    assert {v.series.gpu_uuid for v in store.latest()} == {"GPU-a", "GPU-b"}
    assert keys_in_duckdb(store) == ["n:1", "n:2"]
    assert segments(path) == []
    store.close()


def test_a_failed_append_answers_nothing_and_leaves_no_record(path, monkeypatch):
    store = open_store(path)
    store.write_columns([("n:1", batch("GPU-a", [1.0]))])

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("gpufleet.tsdb.journal.os.fdatasync", no_space)
    with pytest.raises(OSError):
        store.write_columns([("n:2", batch("GPU-new", [2.0]))])
    monkeypatch.undo()
    assert [s.gpu_uuid for s in store.series()] == ["GPU-a"]
    store._simulate_crash()
    reopened = open_store(path)
    assert keys_in_duckdb(reopened) == ["n:1"]
    assert reopened.write_columns([("n:2", batch("GPU-new", [2.0]))]) == [1]
    reopened.close()


def test_the_applier_thread_applies_once_enough_samples_wait(path):
    store = open_store(path, apply_interval_s=3600, apply_at_samples=3)
    store.write_columns([("n:1", batch("GPU-a", [1.0, 2.0]))])
    assert store._unapplied_batches == 1  # below the threshold: waits for the interval
    store.write_columns([("n:2", batch("GPU-b", [3.0]))])
    applied = threading.Event()
    for _ in range(500):  # the thread was woken; wait for it, not for a clock
        if store._unapplied_batches == 0:
            applied.set()
            break
        threading.Event().wait(0.01)
    assert applied.is_set()
    assert keys_in_duckdb(store) == ["n:1", "n:2"]
    store.close()


def test_concurrent_uploads_and_queries_do_not_corrupt(path):
    store = open_store(path, apply_interval_s=0.005, apply_at_samples=50)
    errors: list[BaseException] = []

    def uploader(n: int) -> None:
        try:
            for round_ in range(15):
                key = f"node-{n}:{round_}"
                columns = columns_of([s for g in range(4) for s in ticks(
                    "gpu.sm_active", f"GPU-{n}-{g}", [float(n)] * 3)])
                assert store.write_columns([(key, columns)]) == [12]
                assert store.write_columns([(key, columns)]) == [None]
        except BaseException as error:
            errors.append(error)

    def reader() -> None:
        try:
            for _ in range(15):
                store.query_range("gpu.sm_active", T0, at(30), timedelta(seconds=10))
                store.latest(metric="gpu.sm_active")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=uploader, args=(n,)) for n in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    store.close()
    reopened = open_store(path)
    assert len(keys_in_duckdb(reopened)) == 4 * 15
    (count,) = reopened._con.execute("SELECT count(*) FROM samples").fetchone()
    assert count == 4 * 15 * 12
    assert len(reopened.series("gpu.sm_active")) == 4 * 4
    reopened.close()


def test_an_in_memory_store_keeps_the_same_contract_without_a_file():
    store = DuckDBTelemetryStore(":memory:", apply_interval_s=None)
    assert store.write_columns([("n:1", batch("GPU-a", [1.0]))]) == [1]
    assert store.write_columns([("n:1", batch("GPU-a", [1.0]))]) == [None]
    assert [v.value for v in store.latest()] == [1.0]
    scratch = store._scratch
    store.close()
    assert not scratch.exists()


def test_records_round_trip_through_their_encoding():
    record = JournalRecord("node-1:b7", 1234, ((3, series("gpu.sm_active", "GPU-a",
                                                          labels={"link": "2"}, node="n1")),),
                           packed("i", [3, 3]), packed("q", [1, 2]), packed("d", [0.5, 1.5]))
    reading = read_segment(encode_record(record) * 2)
    assert reading.records == [record, record]
    assert (reading.torn_bytes, reading.corrupt_at) == (0, None)


def test_numpy_columns_pack_to_the_bytes_lists_pack_to():
    """The record's encoding is one: remote-write's numpy columns (any integer or float
    width, slices of a larger column) give the bytes the same numbers in lists give."""
    ids, times, values = [1, 7, 2**31 - 1], [-5, 0, 2**62], [0.1, -2.5, 1e300]
    assert packed("i", np.array(ids, np.int64)) == packed("i", ids)
    assert packed("q", np.array(times)) == packed("q", times)
    assert packed("q", np.array([0, *times, 9])[1:4]) == packed("q", times)
    assert packed("d", np.array(values)) == packed("d", values)
    assert packed("d", np.array(values, ">f8")) == packed("d", values)
    assert packed("d", np.array(values[::-1])[::-1]) == packed("d", values)  # strided
    assert packed("q", np.array([], np.int64)) == packed("q", []) == b""


def test_a_number_too_wide_is_refused_from_numpy_as_from_a_list():
    with pytest.raises(OverflowError):
        packed("i", [2**31])
    with pytest.raises(OverflowError):
        packed("i", np.array([1, 2**31], np.int64))


def test_packed_columns_load_into_duckdb_through_parquet(tmp_path):
    ids, times, values = [1, 2, 2**31 - 1], [-5, 0, 2**62], [0.1, -2.5, 1e300]
    path = tmp_path / "x.parquet"
    write_parquet(path, [PackedColumn("id", PhysicalType.INT32, packed("i", ids)),
                         PackedColumn("t", PhysicalType.INT64, packed("q", times)),
                         PackedColumn("v", PhysicalType.DOUBLE, packed("d", values))])
    rows = duckdb.connect().execute(f"SELECT * FROM read_parquet('{path}')").fetchall()
    assert rows == list(zip(ids, times, values, strict=True))
    many = list(range(20))  # a list header of 15 or more elements
    write_parquet(path, [PackedColumn(f"c{i}", PhysicalType.INT32, packed("i", [i]))
                         for i in many])
    assert duckdb.connect().execute(f"SELECT * FROM read_parquet('{path}')").fetchall() \
        == [tuple(many)]
    with pytest.raises(ValueError):
        write_parquet(path, [PackedColumn("a", PhysicalType.INT32, array("i", [1]).tobytes()),
                             PackedColumn("b", PhysicalType.INT64, b"")])
