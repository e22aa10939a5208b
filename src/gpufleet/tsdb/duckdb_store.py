"""The embedded telemetry store: one DuckDB file (docs/design.md, "Architecture", "embedded
default").

Keyed uploads (`write_columns`, the ingest's path) go to the journal first (journal.py):
appended and fsynced, they are durable and answered; the journal applier moves them into
DuckDB in large transactions (every `apply_interval_s`, or once `apply_at_samples` wait),
with their keys in `ingested_batches` in the same transaction, and only then drops the
journal segments that held them. DuckDB's cost per transaction and per statement is paid
once per few hundred uploads instead of once per upload. Everything that reads DuckDB
(queries, `rollup`, `apply_retention`, `checkpoint`, `write`, `close`) first applies what
is waiting, so a query sees every write that returned before it. On open, a journal left by
a crash is replayed (uploads whose key DuckDB already holds are skipped: the crash fell
between DuckDB's commit and the journal's cleanup). A `:memory:` store keeps the same
pending list without a journal file: nothing of it is durable anyway.

Thread model: DuckDB is single-process, and one Python connection must not be used by two
threads at once. The store keeps one connection; every DuckDB write (`write`, applying the
journal, `rollup`, `apply_retention`) takes the store's lock and runs in one transaction on
it, so a batch is stored whole or not at all. Journalling takes the ingest lock instead (an
RLock, always taken after the store's lock when both are held), so an upload never waits for
a DuckDB transaction, only for the append before it. Every read opens its own cursor (a
connection of its own onto the same database) and reads in one transaction, hence one
consistent snapshot, beside the writer. Several server processes cannot share the file: at
that scale the Prometheus-compatible store is the backend.

The series dictionary is cached in memory (it is small: metrics × units × links) so a
write resolves labels without a query, and queries filter and group series in Python
before DuckDB touches a sample.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import weakref
from array import array
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from operator import itemgetter
from pathlib import Path

import duckdb
import numpy as np

from gpufleet.domain.telemetry.funnel import Thresholds
from gpufleet.domain.telemetry.vocabulary import AcrossSeries, OverTime
from gpufleet.private_files import make_private
from gpufleet.tsdb.compaction import compact_rollups, compact_samples, kept_as_received
from gpufleet.tsdb.duckdb_columns import INT32, registered
from gpufleet.tsdb.duckdb_masks import DuckDBMinuteMasks, series_minutes
from gpufleet.tsdb.duckdb_query import (
    Slots,
    fill_folds,
    fill_pieces,
    plan_range,
    select_slots,
    slots_table,
)
from gpufleet.tsdb.edge_minute_sums import EdgeMinuteSums
from gpufleet.tsdb.edge_pieces import CACHE, EdgePieces
from gpufleet.tsdb.journal import Journal, JournalRecord, packed
from gpufleet.tsdb.journal_applier import JournalApplier
from gpufleet.tsdb.kept_latest import KeptLatest
from gpufleet.tsdb.parquet_columns import PackedColumn, PhysicalType, write_parquet
from gpufleet.tsdb.protocol import (
    HOUR_MS,
    MINUTE_MS,
    OWNER_LABELS,
    Bindings,
    Filters,
    LatestValue,
    Retention,
    Sample,
    SampleColumns,
    SeriesLabels,
    SeriesResult,
    Tier,
    ValueFilter,
    filter_matcher,
    from_ms,
    newest_of_units,
    to_ms,
)
from gpufleet.tsdb.recent_keys import RecentKeys
from gpufleet.tsdb.rollups import TierSources, fold
from gpufleet.tsdb.schema import DDL, ROLLUP_COLUMNS, decode_labels, encode_labels
from gpufleet.tsdb.series_ids import SeriesIds
from gpufleet.tsdb.slot_updates import SelectionPlaces, changed_units, updated_slots
from gpufleet.tsdb.whole_hour_folds import NOT_KEPT, WholeHourFolds
from gpufleet.tsdb.whole_hour_folds import TABLE as FOLDS_TABLE

PIECES_TABLE = f"{CACHE}.piece"

_UNNEST_SERIES = ", ".join(f"unnest(${n}::{kind}[])" for n, kind in enumerate(
    ("INTEGER", *["VARCHAR"] * 7), start=1))


class DuckDBTelemetryStore:
    """The `TelemetryStore` on a DuckDB file (or `:memory:`).

    `apply_interval_s` is how often the journal applier runs (None: no applier thread; what
    is journalled reaches DuckDB when something reads or `apply_journal()` is called — for
    tests); `apply_at_samples` wakes it early; past `max_unapplied_samples` waiting, an
    upload first applies the backlog itself (and fails if DuckDB does)."""

    def __init__(self, path: str | Path, *, retention: Retention = Retention(),
                 threads: int | None = None,
                 apply_interval_s: float | None = 1.0, apply_at_samples: int = 200_000,
                 max_unapplied_samples: int = 4_000_000, future_allowance_s: float = 3600.0):
        self.path = str(path)
        self.retention = retention
        self.apply_at_samples = apply_at_samples
        self.max_unapplied_samples = max_unapplied_samples
        config = {} if threads is None else {"threads": threads}
        self._con = duckdb.connect(self.path, config=config)
        if self.path != ":memory:":
            # DuckDB creates its files 0644 less the umask, and re-creates its WAL after
            # every checkpoint: the owner-only data dir guards those; these are tightened.
            make_private(Path(self.path), Path(f"{self.path}.wal"))
        self._lock = threading.Lock()
        self._ingest_lock = threading.RLock()
        self._dictionary_lock = threading.Lock()
        # Read cursors are made from a connection of their own, so making one never touches
        # the writer's connection while a write runs on it.
        self._cursor_root = self._con.cursor()
        self._cursor_lock = threading.Lock()
        self._key_cursor = self._con.cursor()  # replay checks, under the ingest lock
        for statement in DDL:
            self._con.execute(statement)
        self._ids: dict[SeriesLabels, int] = {}
        self._by_key: dict[tuple, int] = {}
        self._labels: dict[int, SeriesLabels] = {}
        # The dictionary by metric and by GPU, so a query selects its series without
        # walking every series of the store (300,000 at 100,000 GPUs).
        self._by_metric: dict[str, dict[int, SeriesLabels]] = {}
        self._by_gpu: dict[str, dict[int, SeriesLabels]] = {}
        # Bumped whenever the dictionary learns or relabels a series (under its lock): the
        # last range query's slots are reused only while it stands (`_slots_of`).
        self._dictionary_version = 0
        # (key, bindings, Slots, the selection's places or None: made at the first update)
        self._last_slots: tuple | None = None
        self._series_ids = SeriesIds()
        self._fresh: dict[str, int] = {}  # ids handed out to the batch being built
        # Bumped after a transaction that wrote `series` rows commits (not when a series is
        # first seen: the journal applier writes its row later), so the minute masks compare
        # the series table with their copy only when it changed.
        self._series_version = 0
        self._series_written = False
        self._load_series()
        # Metrics asked by `latest_of_units`: their series' newest samples (kept_latest.py).
        self._kept: dict[str, KeptLatest] = {}
        self._pending: list[JournalRecord] = []
        self._pending_keys: set[str] = set()
        self._recent = RecentKeys(future_allowance_ms=int(future_allowance_s * 1000))
        self._unapplied_batches = 0  # pending or being applied: a read must wait for them
        self._unapplied_samples = 0
        in_memory = self.path == ":memory:"
        self._journal = None if in_memory else Journal(self.path + ".journal")
        self._scratch = self._journal.directory if self._journal is not None \
            else Path(tempfile.mkdtemp(prefix="gpufleet-tsdb-"))
        # The scratch directory of a `:memory:` store goes at close, or when it is collected.
        self._drop_scratch = weakref.finalize(self, shutil.rmtree, self._scratch, True) \
            if self._journal is None else None
        if self._journal is not None:
            self._replay(self._journal.recover())
        # Every key stored before this process (the journal's replayed above) is there now.
        self._recent.stored_through(self._con.execute(
            "SELECT max(newest_ms) FROM ingested_batches").fetchone()[0])
        # Pieces are kept no longer than the minutes they fold (a shorter minute retention).
        # How far the hourly rollups reached at this process's last rollup (a fill whose
        # slots and hours are the last ones' then takes no cursor).
        self._hour_done_ms: int | None = self._state(self._con)[1]
        self._pieces = EdgePieces(self._new_cursor, lambda con: self._state(con)[1],
                                  horizon_hours=min(48, int(retention.minute
                                                            / timedelta(hours=1))),
                                  known=lambda: self._hour_done_ms)
        self._folds = WholeHourFolds(self._new_cursor, self._state,
                                     known=lambda: self._hour_done_ms)
        self._edge_sums = EdgeMinuteSums()
        self._applier = None if apply_interval_s is None else JournalApplier(
            self._catch_up, apply_interval_s)

    # -- writes ---------------------------------------------------------------------------

    def write(self, batch: Sequence[Sample]) -> int:
        """One transaction straight into DuckDB (after whatever the journal holds)."""
        with self._lock, self._ingest_lock:
            self._apply_journal()
            ids: list[int] = []
            times: list[int] = []
            values: list[float] = []
            new: dict[SeriesLabels, int] = {}
            self._fresh = {}
            last_at, last_ms = None, 0
            for sample in batch:
                if sample.value is None:
                    continue
                sid = self._ids.get(sample.series)
                if sid is None:
                    sid = self._resolve(sample.series, new)
                if sample.at is not last_at:
                    last_at, last_ms = sample.at, to_ms(sample.at)
                ids.append(sid)
                times.append(last_ms)
                values.append(float(sample.value))
            self._transaction(lambda con: self._store(con, new, ids, times, values), new)
            if times:
                self._edge_sums.raw_writes.wrote(min(times))
            if self._kept:
                self._keep(np.array(ids, dtype=np.int64), np.array(times, dtype=np.int64),
                           np.array(values, dtype=np.float64))
            return len(ids)

    def write_columns(self, batches: Sequence[tuple[str, SampleColumns]]) -> list[int | None]:
        """Journal the uploads (one append, one fsync) and answer; DuckDB gets them later."""
        if self._unapplied_samples >= self.max_unapplied_samples:
            with self._lock:  # DuckDB is behind (or failing): catch up here, or refuse
                self._apply_journal()
        with self._ingest_lock:
            # Keys the recent-keys set can answer for need no DuckDB statement.
            vouched = {key for key, columns in batches
                       if self._recent.answers_for(_oldest(columns.times_ms))}
            held = self._held_keys([key for key, _ in batches], vouched=vouched)
            self._fresh = {}
            new: dict[SeriesLabels, int] = {}
            answers: list[int | None] = [None] * len(batches)
            records: list[JournalRecord] = []
            for n, (key, columns) in enumerate(batches):
                if key in held:
                    continue  # a replay: stored before, answered None
                held.add(key)
                defined = len(new)
                sids = self._series_ids_of(columns.series, new)
                defines = tuple((new[s], s) for s in columns.series if s in new) \
                    if len(new) > defined else ()
                records.append(JournalRecord(
                    key, _newest(columns.times_ms), defines,
                    packed("i", _per_sample(sids, columns.series_index)),
                    packed("q", columns.times_ms), packed("d", columns.values)))
                answers[n] = len(columns)
            if records:
                if self._journal is not None:
                    self._journal.append(records)
                self._remember_all(new)
                self._pending += records
                self._pending_keys.update(r.key for r in records)
                for record in records:
                    self._recent.add(record.key, record.newest_ms)
                self._unapplied_batches += len(records)
                self._unapplied_samples += sum(r.samples for r in records)
        if self._applier is not None and self._unapplied_samples >= self.apply_at_samples:
            self._applier.wake()
        return answers

    def apply_journal(self) -> None:
        """Move every journalled upload into DuckDB now."""
        with self._lock:
            self._apply_journal()

    def rollup(self, until: datetime) -> None:
        until_ms = to_ms(until)
        with self._lock:
            self._apply_journal()
            self._hour_done_ms = None  # unknown while the rollup runs
            try:
                self._transaction(lambda con: self._rollup(con, until_ms))
            finally:
                self._hour_done_ms = self._state(self._con)[1]

    def apply_retention(self, now: datetime) -> None:
        now_ms = to_ms(now)
        r = self.retention
        with self._lock:
            self._apply_journal()

            raw_cut: list[int] = []
            minute_cut: list[int] = []

            def drop(con: duckdb.DuckDBPyConnection) -> None:
                minute_done, hour_done = self._state(con)
                # Raw rows go only once folded: a tier never loses what no coarser one holds.
                raw_cut[:] = [min(now_ms - _ms(r.raw), minute_done)]
                con.execute("DELETE FROM samples WHERE ts_ms < $1", raw_cut)
                minute_cut[:] = [min(now_ms - _ms(r.minute), hour_done)]
                con.execute("DELETE FROM rollup_1m WHERE bucket_ms < $1", minute_cut)
                con.execute("DELETE FROM rollup_1h WHERE bucket_ms < $1",
                            [now_ms - _ms(r.hour)])
                con.execute("DELETE FROM ingested_batches WHERE newest_ms < $1",
                            [now_ms - _ms(r.raw)])
            self._transaction(drop)
            self._folds.drop_before(now_ms - _ms(r.hour))
            self._edge_sums.forget_before(minute_cut[0], now_ms - _ms(r.hour))
            for kept in self._kept.values():
                kept.drop_before(raw_cut[0])

    def checkpoint(self) -> None:
        """Write everything to the file now (DuckDB otherwise checkpoints by WAL size)."""
        with self._lock:
            self._apply_journal()
            self._con.execute("CHECKPOINT")

    def close(self) -> None:
        """Apply what the journal holds and close. If DuckDB refuses, the journal stays on
        disk and is replayed at the next open."""
        if self._applier is not None:
            self._applier.stop()
        with self._lock:
            try:
                self._apply_journal()
            finally:
                self._close_handles()

    def _simulate_crash(self) -> None:
        """Test hook: stop as a killed server would, leaving the journal unapplied on disk
        (what DuckDB committed stays committed) and releasing every handle so another store
        can open the same path in this process."""
        if self._applier is not None:
            self._applier.stop()
        with self._lock:
            self._close_handles()

    def _close_handles(self) -> None:
        with self._ingest_lock, self._cursor_lock:
            if self._journal is not None:
                self._journal.close()
            else:
                self._drop_scratch()
            self._key_cursor.close()
            self._cursor_root.close()
            self._con.close()

    # -- reads ----------------------------------------------------------------------------

    def query_range(self, metric: str, start: datetime, end: datetime, step: timedelta, *,
                    filters: Filters | None = None, group_by: Sequence[str] = (),
                    over_time: OverTime | None = None, across: AcrossSeries | None = None,
                    tier: Tier | None = None, bindings: Bindings | None = None,
                    where: ValueFilter | None = None) -> list[SeriesResult]:
        """See the protocol; which rows are read is duckdb_query.py's concern."""
        if where is not None:
            where.refuse_percent()
        plan = plan_range(metric, start, end, step, over_time=over_time, across=across,
                          tier=tier, with_bindings=bindings is not None,
                          retention=self.retention)
        unit_filters = {k: v for k, v in (filters or {}).items() if k not in OWNER_LABELS}
        owner_filters = {k: set(v) for k, v in (filters or {}).items() if k in OWNER_LABELS}
        slots = self._slots_of(metric, unit_filters, group_by, bindings, owner_filters)
        if not slots.ids:
            return []
        self._catch_up()
        pieces = fill_pieces(plan, self._pieces, slots)
        folds_done = fill_folds(plan, self._folds, slots, pieces)

        raw_version = self._edge_sums.raw_writes.version  # before the read's snapshot

        def run(cur: duckdb.DuckDBPyConnection) -> list[tuple]:
            kept = FOLDS_TABLE if folds_done != NOT_KEPT else \
                PIECES_TABLE if pieces[0] < pieces[1] else None
            if kept is not None:
                # The kept folds' and pieces' in-memory database begins its transaction
                # at its first use: used before the rollup state is read, a snapshot that
                # reads the state the fills kept them for reads them too, not a later
                # fill's deletes (that fill follows a rollup this state would show).
                cur.execute(f"SELECT 1 FROM {kept} LIMIT 0").fetchall()
            minute_done, hour_done = self._state(cur)
            if EdgeMinuteSums.answers(plan, where, minute_done, hour_done, folds_done):
                got = self._edge_sums.answer(cur, plan, slots, metric, minute_done,
                                             hour_done, raw_version)
                if got is not None:  # else a NaN or inf reached the sums
                    return got
            with registered(cur, slots.columns()) as view:
                cur.execute(slots_table(view))  # gone with the read's rollback
            return cur.execute(plan.sql(minute_done, hour_done, pieces, where,
                                        folds_done)).fetchall()

        # A result is made for the groups answered only: with a value filter, a handful.
        keys = list(slots.keys)  # in group number order (numbered as added)
        results: dict[int, SeriesResult] = {}
        for grp, bucket_ms, value in self._read(run):
            found = results.get(grp)
            if found is None:
                found = results[grp] = SeriesResult(dict(zip(group_by, keys[grp],
                                                             strict=True)))
            found.points.append((from_ms(bucket_ms), float(value)))
        return [results[grp] for grp in sorted(results)]

    def _slots_of(self, metric: str, unit_filters: Filters, group_by: Sequence[str],
                  bindings: Bindings | None,
                  owner_filters: Mapping[str, set[str]]) -> Slots:
        """`select_slots` of the query, or the last query's slots when it asked the same
        of the same dictionary through the same `Bindings` object (the caller's bindings
        are read-only once passed: telemetry's range query hands the same object again
        while the bindings have not changed). At 10,000 GPUs a project average spent
        ~6 ms CPU walking 10,000 series into 7,251 slots, a fifth of its whole time. When
        the same question comes with bindings that differ for a few units (a binding
        started or ended), the last slots are updated for those units' series only
        (slot_updates.py) — the same slots the walk would give."""
        with self._dictionary_lock:
            version = self._dictionary_version
        key = (metric, frozenset((k, frozenset(v)) for k, v in unit_filters.items()),
               tuple(group_by), frozenset((k, frozenset(v)) for k, v in owner_filters.items()),
               version)
        last = self._last_slots
        if last is not None and last[0] == key and last[1] is bindings:
            return last[2]
        places, units = None, None
        if last is not None and last[0] == key and bindings is not None \
                and last[1] is not None:
            units = changed_units(last[1], bindings)
        if units is None:
            slots = select_slots(self._selection(metric, unit_filters), group_by, bindings,
                                 owner_filters)
        elif not units:  # equal bindings in a new object
            slots, places = last[2], last[3]
        else:  # the same question, some units' bindings changed (slot_updates.py)
            places = last[3]
            if places is None:
                places = SelectionPlaces(self._selection(metric, unit_filters))
            slots = updated_slots(last[2], places, self._series_of_units(metric, units),
                                  group_by, bindings, owner_filters)
        with self._dictionary_lock:
            if self._dictionary_version == version:  # else a series came meanwhile
                self._last_slots = (key, bindings, slots, places)
        return slots

    def _series_of_units(self, metric: str,
                         units: Iterable[tuple[str, str | None]]) -> list[tuple[int, SeriesLabels]]:
        """The series of `metric` on the units (GPU, MIG instance), through the GPU index."""
        with self._dictionary_lock:
            return [(sid, s) for gpu, mig in units
                    for sid, s in self._by_gpu.get(gpu, {}).items()
                    if s.metric == metric and s.mig_uuid == mig]

    def latest(self, filters: Filters | None = None, *, metric: str | None = None,
               since: datetime | None = None,
               where: ValueFilter | None = None) -> list[LatestValue]:
        gpus = (filters or {}).get("gpu_uuid")
        # Answered in series id order: which order the series were selected in is moot.
        chosen = self._select(metric, filters) if gpus is None else \
            self._select_gpus(metric, gpus, filters)
        if not chosen:
            return []
        since_ms = to_ms(since) if since is not None else -(2**62)
        if where is not None and where.percent_of is not None:
            totals = self._select(where.percent_of, filters) if gpus is None else \
                self._select_gpus(where.percent_of, gpus, filters)
            return self._latest_percent(chosen, totals, since_ms, where)
        labels = dict(chosen)
        return [LatestValue(labels[sid], from_ms(ms), value)
                for sid, ms, value in sorted(self._latest_rows(labels, since_ms, where))]

    def _latest_rows(self, ids: Collection[int], since_ms: int,
                     where: ValueFilter | None = None) -> list[tuple[int, int, float]]:
        """(series id, time ms, value) of each series' newest sample at or after since_ms
        (that passes `where`), in no particular order."""
        self._catch_up()

        def run(cur: duckdb.DuckDBPyConnection) -> list[tuple]:
            with registered(cur, {"series_id": (INT32, list(ids))}) as view:
                return cur.execute(f"""
                    SELECT series_id, max(ts_ms), arg_max(value, ts_ms) FROM samples
                    WHERE series_id IN (SELECT series_id FROM {view}) AND ts_ms >= $since
                    GROUP BY series_id
                    {'' if where is None else 'HAVING ' + where.sql('arg_max(value, ts_ms)')}
                    """, {"since": since_ms}).fetchall()

        return self._read(run)

    def latest_of_units(self, metric: str, units: Collection[tuple[str, str | None]],
                        since: datetime) -> dict[tuple[str, str | None], float]:
        """See protocol.TelemetryStore: `latest` of the units' GPUs, folded by unit, from
        the engine's rows (no `LatestValue`, no datetime, per series: the idle list asks
        this of ~1,500 candidates at 10,000 GPUs)."""
        if not units:
            return {}
        since_ms = to_ms(since)
        kept = self._kept_latest(metric)
        if kept is not None and since_ms >= kept.horizon_ms:
            return kept.newest_of(units, since_ms)
        chosen = self._select_gpus(metric, sorted({gpu for gpu, _ in units}), None)
        if not chosen:
            return {}
        unit_of = {sid: (s.gpu_uuid, s.mig_uuid) for sid, s in chosen}
        return newest_of_units(((unit_of[sid], ms, value) for sid, ms, value
                                in self._latest_rows(unit_of, since_ms)), units)

    def _kept_latest(self, metric: str) -> KeptLatest | None:
        """`metric`'s newest samples kept in memory (kept_latest.py), built from the raw tier
        when first asked (under the store's lock: no write between the read and keeping);
        None for a metric whose values compaction rounds."""
        kept = self._kept.get(metric)
        if kept is not None:
            self._catch_up()  # what returned before this question is kept
            return kept
        if not kept_as_received(metric):
            return None
        with self._lock:
            self._apply_journal()
            kept = self._kept.get(metric)
            if kept is None:
                series = self._units_of_series(metric)
                # From an hour before the rolled-up minutes: the newest row groups only.
                # (Nothing rolled up yet: the whole raw tier, a young store's.)
                minute_done = self._read(lambda cur: self._state(cur)[0])
                horizon = minute_done - HOUR_MS if minute_done else -(2**62)
                rows = self._read(lambda cur: _newest_rows(cur, list(series), horizon))
                kept = self._kept[metric] = KeptLatest(horizon, rows, series)
            return kept

    def _keep(self, ids: np.ndarray, times_ms: np.ndarray, values: np.ndarray) -> None:
        """Stored samples to the kept metrics (under the store's lock, after the commit)."""
        for metric, kept in self._kept.items():
            if len(self._by_metric.get(metric, ())) != kept.tracked:  # new series
                kept.track(self._units_of_series(metric))
            kept.add(ids, times_ms, values)

    def _units_of_series(self, metric: str) -> dict[int, tuple[str, str | None]]:
        with self._dictionary_lock:
            return {sid: (s.gpu_uuid, s.mig_uuid)
                    for sid, s in self._by_metric.get(metric, {}).items()}

    def _latest_percent(self, chosen: Sequence[tuple[int, SeriesLabels]],
                        totals: Sequence[tuple[int, SeriesLabels]], since_ms: int,
                        where: ValueFilter) -> list[LatestValue]:
        """`latest` with `where.percent_of`: each series' latest value beside its unit's
        latest total (matched by the series table's unit columns), compared in one
        statement."""
        if not totals:
            return []
        self._catch_up()

        def run(cur: duckdb.DuckDBPyConnection) -> list[tuple]:
            return cur.execute(f"""
                WITH last AS (SELECT series_id, max(ts_ms) AS ts_ms,
                                     arg_max(value, ts_ms) AS v FROM samples
                              WHERE series_id IN (SELECT unnest($ids::INTEGER[]))
                                AND ts_ms >= $since GROUP BY series_id),
                     total AS (SELECT gpu_uuid, mig_uuid, arg_max(value, ts_ms) AS v
                               FROM samples JOIN series USING (series_id)
                               WHERE series_id IN (SELECT unnest($tids::INTEGER[]))
                                 AND ts_ms >= $since GROUP BY gpu_uuid, mig_uuid)
                SELECT series_id, last.ts_ms, last.v FROM last JOIN series USING (series_id)
                JOIN total ON total.gpu_uuid = series.gpu_uuid
                          AND total.mig_uuid IS NOT DISTINCT FROM series.mig_uuid
                WHERE total.v <> 0 AND {where.sql('100.0 * last.v / total.v')}
                ORDER BY series_id""",
                {"ids": [sid for sid, _ in chosen], "tids": [sid for sid, _ in totals],
                 "since": since_ms}).fetchall()

        labels = dict(chosen)
        return [LatestValue(labels[sid], from_ms(ms), value) for sid, ms, value in self._read(run)]

    def series(self, metric: str | None = None,
               filters: Filters | None = None) -> list[SeriesLabels]:
        """The series the dictionary holds (whether or not any tier still has their rows)."""
        return [labels for _, labels in self._select(metric, filters)]

    # -- the funnel's minute masks (duckdb_masks.py) ---------------------------------------

    def minute_masks(self, thresholds: Thresholds) -> DuckDBMinuteMasks:
        """Per-unit minute masks over this store's 1-minute rollups (masks.MinuteMasks); the
        caller keeps the object, whose cache of closed hours lives in this DuckDB instance."""
        return DuckDBMinuteMasks(self._read, self._new_cursor,
                                 lambda con: self._state(con)[0], thresholds,
                                 series_version=lambda: self._series_version)

    def _new_cursor(self) -> duckdb.DuckDBPyConnection:
        with self._cursor_lock:
            return self._cursor_root.cursor()

    def series_minutes(self, chosen: Sequence[SeriesLabels], lo_ms: int, hi_ms: int,
                       above: float) -> dict[SeriesLabels, tuple[int, int, int | None]]:
        """See masks.MaskStore."""
        with self._dictionary_lock:
            ids = {self._ids[s]: s for s in chosen if s in self._ids}
        return series_minutes(self._read, ids, lo_ms, hi_ms, above)

    # -- internals ------------------------------------------------------------------------

    def _load_series(self) -> None:
        rows = self._con.execute(
            "SELECT series_id, metric, gpu_uuid, mig_uuid, labels, node, environment, model "
            "FROM series").fetchall()
        for sid, metric, gpu, mig, labels, node, environment, model in rows:
            self._remember(sid, SeriesLabels(metric, gpu, mig, decode_labels(labels),
                                             node, environment, model))

    def _remember(self, sid: int, labels: SeriesLabels) -> None:
        old = self._labels.get(sid)
        if old is not None:
            self._ids.pop(old, None)
            self._by_metric[old.metric].pop(sid, None)
            self._by_gpu[old.gpu_uuid].pop(sid, None)
        self._ids[labels] = sid
        self._by_key[labels.key] = sid
        self._labels[sid] = labels
        self._by_metric.setdefault(labels.metric, {})[sid] = labels
        self._by_gpu.setdefault(labels.gpu_uuid, {})[sid] = labels
        self._dictionary_version += 1
        self._series_ids.known(sid, labels.metric)

    def _remember_all(self, new: dict[SeriesLabels, int]) -> None:
        if new:
            with self._dictionary_lock:
                for labels, sid in new.items():
                    self._remember(sid, labels)

    def _series_ids_of(self, labels: Sequence[SeriesLabels],
                       new: dict[SeriesLabels, int]) -> list[int]:
        """The store's id of each series: the known ones by one dict read apiece (remote-write sends
        one sample a series, so this runs once a sample), the rest resolved."""
        sids = list(map(self._ids.get, labels))
        if None in sids:
            sids = [self._resolve(s, new) if sid is None else sid
                    for s, sid in zip(labels, sids, strict=True)]
        return sids

    def _resolve(self, labels: SeriesLabels, new: dict[SeriesLabels, int]) -> int:
        """The id of a series seen for the first time in this form: a new series, or a known
        one whose attributes (node, environment, model) changed."""
        sid = new.get(labels)
        if sid is None:
            sid = self._by_key.get(labels.key)
            if sid is None:
                sid = self._series_ids.allocate(labels.metric, self._fresh)
            new[labels] = sid
        return sid

    def _store(self, con: duckdb.DuckDBPyConnection, new: dict[SeriesLabels, int],
               ids: list[int], times: list[int], values: list[float]) -> None:
        # A unit moved twice: the last form.
        self._series_written |= _store_series(con, {sid: s for s, sid in new.items()})
        if ids:
            # Three lists in, unnested in the engine: one statement, columnar, no per-row
            # round trips (executemany is orders of magnitude slower).
            # In id order (metric order, series_ids.py): interleaved as sent, every row
            # would jump between metrics' id blocks, ~3 bytes more an id until compaction.
            con.execute("INSERT INTO samples SELECT * FROM (SELECT unnest($1::INTEGER[]) AS i, "
                        "unnest($2::BIGINT[]), unnest($3::DOUBLE[])) ORDER BY i",
                        [ids, times, values])

    def _transaction(self, work, new: dict[SeriesLabels, int] | None = None) -> None:
        con = self._con
        self._series_written = False
        con.begin()
        try:
            work(con)
            con.commit()
        except BaseException:
            con.rollback()
            raise
        finally:
            wrote, self._series_written = self._series_written, False
        if wrote:  # after the commit: a reader that sees the new version sees the rows
            self._series_version += 1
        self._remember_all(new or {})

    # -- the journal ----------------------------------------------------------------------

    def _held_keys(self, keys: Sequence[str], *, vouched: set[str] | None = None) -> set[str]:
        """The keys already stored: journalled and waiting, or in DuckDB. Under the ingest
        lock: a key leaves the pending set only after DuckDB committed it, so it is always
        in one of the two. DuckDB is not asked about `vouched` keys: the recent keys
        answer for them (tsdb/recent_keys.py)."""
        held = {key for key in keys if key in self._pending_keys or key in self._recent}
        rest = [key for key in keys if key not in held and key not in (vouched or ())]
        for at in range(0, len(rest), 1000):
            chunk = rest[at:at + 1000]
            # An IN list of parameters is answered from the primary key's index (an unnest
            # subquery scans the table): ~0.4 ms a statement rather than ~1 ms and growing.
            held.update(key for (key,) in self._key_cursor.execute(
                "SELECT batch_key FROM ingested_batches WHERE batch_key IN "
                f"({', '.join('?' * len(chunk))})", chunk).fetchall())
        return held

    def _catch_up(self) -> None:
        """Apply what is journalled, if anything: before a read (read-your-writes; one being
        applied right now is waited for by taking the lock), and as the applier's round."""
        if self._unapplied_batches:
            with self._lock:
                self._apply_journal()

    def _apply_journal(self) -> None:
        """Move the pending uploads into DuckDB in one transaction, then forget their
        journal segments. The caller holds the store's lock."""
        with self._ingest_lock:
            taken, self._pending = self._pending, []
            if not taken:
                return
            through = self._journal.rotate() if self._journal is not None else 0
        try:
            self._transaction(lambda con: self._load(con, taken, with_keys=True))
        except BaseException:
            with self._ingest_lock:
                self._pending[:0] = taken
            raise
        oldest = min((_oldest(np.frombuffer(r.times_ms, dtype="<i8")) for r in taken
                      if r.samples), default=None)
        if oldest is not None:  # after the commit: raw_writes.py
            self._edge_sums.raw_writes.wrote(oldest)
        if self._kept:
            self._keep(*(np.frombuffer(b"".join(getattr(r, name) for r in taken), dtype=kind)
                         for name, kind in (("series_ids", "<i4"), ("times_ms", "<i8"),
                                            ("values", "<f8"))))
        with self._ingest_lock:
            self._pending_keys.difference_update(r.key for r in taken)
            self._unapplied_batches -= len(taken)
            self._unapplied_samples -= sum(r.samples for r in taken)
            if self._journal is not None:
                self._journal.discard_through(through)

    def _replay(self, records: list[JournalRecord]) -> None:
        """Apply what a crash left journalled: uploads whose key DuckDB holds were applied
        before the crash and are skipped; their series definitions are applied again
        (harmless, and a later record may rely on them)."""
        if records:
            held = self._held_keys(sorted({r.key for r in records}))
            fresh: list[JournalRecord] = []
            for record in records:
                if record.key not in held:
                    held.add(record.key)
                    fresh.append(record)
            defines = {sid: labels for r in records for sid, labels in r.defines}
            self._transaction(lambda con: self._load(con, fresh, with_keys=True,
                                                     defines=defines))
            self._remember_all({labels: sid for sid, labels in defines.items()})
            # A series defined in a corrupt part of the journal keeps its id unused.
            for sid in {sid for r in fresh for sid in array("i", r.series_ids)}:
                self._series_ids.known(sid, None)
        self._journal.discard_through(self._journal.rotate())

    def _load(self, con: duckdb.DuckDBPyConnection, records: list[JournalRecord], *,
              with_keys: bool, defines: dict[int, SeriesLabels] | None = None) -> None:
        if defines is None:
            defines = {sid: labels for r in records for sid, labels in r.defines}
        self._series_written |= _store_series(con, defines)
        if any(r.samples for r in records):
            # Packed columns to Parquet, loaded by DuckDB in C++: ~20x cheaper than handing
            # it Python lists (parquet_columns.py).
            scratch = self._scratch / "applying.parquet"
            write_parquet(scratch, [
                PackedColumn("series_id", PhysicalType.INT32,
                             b"".join(r.series_ids for r in records)),
                PackedColumn("ts_ms", PhysicalType.INT64, b"".join(r.times_ms for r in records)),
                PackedColumn("value", PhysicalType.DOUBLE, b"".join(r.values for r in records))])
            try:
                quoted = str(scratch).replace("'", "''")
                con.execute(f"INSERT INTO samples SELECT * FROM read_parquet('{quoted}') "
                            "ORDER BY series_id")  # as in _store
            finally:
                scratch.unlink(missing_ok=True)
        if with_keys and records:
            con.execute("INSERT INTO ingested_batches SELECT unnest($1::VARCHAR[]), "
                        "unnest($2::BIGINT[])",
                        [[r.key for r in records], [r.newest_ms for r in records]])

    def _rollup(self, con: duckdb.DuckDBPyConnection, until_ms: int) -> None:
        minute_hi = until_ms // MINUTE_MS * MINUTE_MS
        hour_hi = until_ms // HOUR_MS * HOUR_MS
        minute_done, hour_done = self._state(con)
        if minute_done == 0:
            (first,) = con.execute("SELECT min(ts_ms) FROM samples").fetchone()
            if first is None:
                return
            minute_done, hour_done = first // MINUTE_MS * MINUTE_MS, first // HOUR_MS * HOUR_MS
        sources = TierSources(minute_done, hour_done)
        if minute_done < minute_hi:
            con.execute(f"INSERT INTO rollup_1m SELECT {ROLLUP_COLUMNS} FROM "
                        f"({fold(sources.raw(minute_done, minute_hi), MINUTE_MS)})")
            minute_done = minute_hi
        sources = TierSources(minute_done, hour_done)
        if hour_done < hour_hi:
            con.execute(f"INSERT INTO rollup_1h SELECT {ROLLUP_COLUMNS} FROM "
                        f"({fold(sources.minute(hour_done, hour_hi), HOUR_MS)})")
            compact_samples(con, hour_done, hour_hi)
            compact_rollups(con, "rollup_1m", "bucket_ms", hour_done, hour_hi)
            hour_done = hour_hi
        con.execute("INSERT OR REPLACE INTO rollup_state VALUES ('1m', $1), ('1h', $2)",
                    [minute_done, hour_done])

    @staticmethod
    def _state(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
        done = dict(con.execute("SELECT tier, done_until_ms FROM rollup_state").fetchall())
        return done.get("1m", 0), done.get("1h", 0)

    def _read(self, work):
        with self._cursor_lock:
            cur = self._cursor_root.cursor()
        try:
            cur.begin()
            try:
                return work(cur)
            finally:
                cur.rollback()
        finally:
            cur.close()

    def _select(self, metric: str | None,
                filters: Filters | None) -> list[tuple[int, SeriesLabels]]:
        """The series of `metric` (every metric: None) that pass `filters`, in the order
        the dictionary learnt them (a query's groups are numbered in this order)."""
        return list(self._select_iter(metric, filters))

    def _select_iter(self, metric: str | None,
                     filters: Filters | None) -> Iterator[tuple[int, SeriesLabels]]:
        """As `_select`, walked once: two lists copied under the lock and zipped, so a range
        query over 100,000 series makes no (id, labels) tuple per series (kept alive through
        the question they were promoted and set off full garbage collections)."""
        with self._dictionary_lock:  # not the write lock: a read never waits on a write
            known = self._labels if metric is None else self._by_metric.get(metric, {})
            ids, labels = list(known), list(known.values())
        pairs = zip(ids, labels, strict=True)
        if not filters:
            return pairs
        passes = filter_matcher(filters)
        return ((sid, s) for sid, s in pairs if passes(s))

    def _selection(self, metric: str, filters: Filters) -> Iterable[tuple[int, SeriesLabels]]:
        """A range query's series: through the GPU index when it names GPUs (one GPU's
        page need not walk 100,000 GPUs' series), in the dictionary's order either way —
        the groups are numbered in it."""
        gpus = filters.get("gpu_uuid")
        if not gpus or None in gpus:
            return self._select_iter(metric, filters)
        return sorted(self._select_gpus(metric, gpus, filters), key=itemgetter(0))

    def _select_gpus(self, metric: str | None, gpu_uuids: Sequence[str],
                     filters: Filters | None) -> list[tuple[int, SeriesLabels]]:
        """As `_select` with a `gpu_uuid` filter, reading only those GPUs' series (in no
        particular order)."""
        with self._dictionary_lock:
            known = [(sid, s) for gpu in set(gpu_uuids)
                     for sid, s in self._by_gpu.get(gpu, {}).items()
                     if metric is None or s.metric == metric]
        rest = {k: v for k, v in (filters or {}).items() if k != "gpu_uuid"}
        if not rest:  # the index has applied the gpu_uuid filter ("" and None alike)
            return known
        passes = filter_matcher(rest)
        return [(sid, s) for sid, s in known if passes(s)]


def _newest_rows(cur: duckdb.DuckDBPyConnection, series: list[int],
                 since_ms: int) -> list[tuple[int, int, float]]:
    """(series id, time ms, value) of each of `series`' newest raw sample at or after
    since_ms; at the same time, the larger value (as kept_latest.py keeps them)."""
    with registered(cur, {"series_id": (INT32, series)}) as view:
        return cur.execute(f"""
            SELECT series_id, max(ts_ms), arg_max(value, (ts_ms, value)) FROM samples
            WHERE series_id IN (SELECT series_id FROM {view}) AND ts_ms >= $since
            GROUP BY series_id""", {"since": since_ms}).fetchall()


def _store_series(con: duckdb.DuckDBPyConnection, by_sid: dict[int, SeriesLabels]) -> bool:
    """Insert or replace series rows (a unit that moved keeps its id, new attributes);
    whether there were any."""
    if not by_sid:
        return False
    rows = [(sid, s.metric, s.gpu_uuid, s.mig_uuid, encode_labels(s.labels), s.node,
             s.environment, s.model) for sid, s in by_sid.items()]
    con.execute("DELETE FROM series WHERE series_id IN (SELECT unnest($1::INTEGER[]))",
                [[row[0] for row in rows]])
    con.execute(f"INSERT INTO series SELECT {_UNNEST_SERIES}",
                [list(column) for column in zip(*rows, strict=True)])
    return True


def _ms(span: timedelta) -> int:
    return int(span.total_seconds() * 1000)


def _oldest(times_ms: Sequence[int] | np.ndarray) -> int:
    if isinstance(times_ms, np.ndarray):  # min() would make a numpy scalar a sample
        return int(times_ms.min()) if len(times_ms) else 0
    return min(times_ms, default=0)


def _newest(times_ms: Sequence[int] | np.ndarray) -> int:
    if isinstance(times_ms, np.ndarray):
        return int(times_ms.max()) if len(times_ms) else 0
    return max(times_ms, default=0)


def _per_sample(series_ids: list[int], series_index: Sequence[int]) -> Sequence[int]:
    """Each sample's series id. One sample a series in order (a remote-write body's
    columns) is `series_ids` itself: compared at C speed rather than indexed per sample."""
    if isinstance(series_index, range):  # remote-write's steady body: 0, 1, 2, …
        if series_index == range(len(series_ids)):
            return series_ids
    elif len(series_index) == len(series_ids) and \
            list(range(len(series_ids))) == list(series_index):
        return series_ids
    return [series_ids[i] for i in series_index]
