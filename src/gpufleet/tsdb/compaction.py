"""Compaction of closed hours: their rows rewritten in series-id order, for size and for
row-group pruning (docs/telemetry-store.md, "Storage layout"). Series ids are handed out
metric by metric (series_ids.py), so id order is metric order. Runs inside the store's
rollup transaction."""

from __future__ import annotations

from functools import cache

import duckdb

from gpufleet.domain.telemetry.catalogue import CATALOGUE, find
from gpufleet.domain.telemetry.metric import Metric


def compact_rollups(con: duckdb.DuckDBPyConnection, table: str, time: str, lo: int,
                    hi: int) -> None:
    """Rewrite the rollup rows of closed hours in (series, time) order: written minute by
    minute, a table interleaves every series; sorted, each series' values sit together, the
    series id becomes runs, which compress better and let a query on a few series skip
    most row groups. Series ids are handed out metric by metric (series_ids.py), so this
    is metric order too."""
    where = f"{time} >= {lo} AND {time} < {hi}"
    con.execute(f"""CREATE TEMP TABLE compacting AS SELECT * FROM {table} WHERE {where}
                    ORDER BY series_id, {time}""")
    _replace_rows(con, table, where)


def compact_samples(con: duckdb.DuckDBPyConnection, lo: int, hi: int) -> None:
    """Rewrite the raw samples of closed hours for the raw tier's size (docs/telemetry-store.md,
    "Storage layout"): in series-id order, which is metric order (series_ids.py); each
    series' times ascending and the next series' descending, alternately, so the step
    between two series' runs is as small as the step within one (DuckDB bit-packs the
    differences of 2,048 times at the width of the largest: one jump of an hour made every
    group cost ~3 bytes a time); and values at the catalogue's stored precision
    (`Metric.stored_decimals`). Rows whose series is not in the dictionary (defined in a
    lost journal part) are kept as they are."""
    where = f"ts_ms >= {lo} AND ts_ms < {hi}"
    con.execute(f"""CREATE TEMP TABLE compacting AS {_RUNS.format(where=where)}
        SELECT r.series_id, r.ts_ms, {_rounded_value()} AS value
        FROM samples r JOIN runs USING (series_id) WHERE {where}
        ORDER BY runs.run, CASE WHEN runs.run % 2 = 0 THEN r.ts_ms ELSE -r.ts_ms END""")
    _replace_rows(con, "samples", where)


# The series present in the samples being compacted, numbered in id order, with the decimal
# places their values are stored to (NULL: as received), so the sort and the rounding work
# on integers, not on each row's metric name.
_RUNS = """WITH runs AS (
    SELECT p.series_id, row_number() OVER (ORDER BY p.series_id) AS run, {places} AS places
    FROM (SELECT DISTINCT series_id FROM samples WHERE {{where}}) p
    LEFT JOIN series s USING (series_id))"""


def _replace_rows(con: duckdb.DuckDBPyConnection, table: str, where: str) -> None:
    con.execute(f"DELETE FROM {table} WHERE {where}")
    con.execute(f"INSERT INTO {table} SELECT * FROM compacting")
    con.execute("DROP TABLE compacting")


def kept_as_received(metric: str) -> bool:
    """Whether compaction keeps `metric`'s raw values exactly as they were stored."""
    row = find(metric)
    return row is None or row.stored_decimals is None


def _rounded_value() -> str:
    """SQL: a sample's `value` at its series' stored precision (`runs.places`)."""
    cases = " ".join(f"WHEN {places} THEN round(r.value, {places})"
                     for places in sorted(_stored_precision()))
    return f"CASE runs.places {cases} ELSE r.value END" if cases else "r.value"


def _places_of_metric() -> str:
    """SQL: the decimal places a series' metric (`s.metric`) is stored to, or NULL
    (catalogue names are [a-z0-9_.])."""
    cases = " ".join(
        f"WHEN s.metric IN ({', '.join(repr(m.name) for m in rows)}) THEN {places}"
        for places, rows in _stored_precision().items())
    return f"CASE {cases} END" if cases else "NULL"


@cache
def _stored_precision() -> dict[int, list[Metric]]:
    by_places: dict[int, list[Metric]] = {}
    for row in CATALOGUE:
        if row.stored_decimals is not None:
            by_places.setdefault(row.stored_decimals, []).append(row)
    return by_places


_RUNS = _RUNS.format(places=_places_of_metric())
