"""The DuckDB schema of the embedded telemetry store.

* `series` — the series dictionary: one row per (metric, unit, extra labels), with the
  unit's node / environment / model as attributes. Extra labels are stored as canonical
  JSON text (`{"link":"3"}`); filtering and grouping by label happen on this small table.
* `samples` — the raw tier: (series_id INTEGER, ts_ms BIGINT, value DOUBLE), nothing else,
  so columnar compression keeps a sample to a few bytes.
* `rollup_1m`, `rollup_1h` — one row per series and bucket: first, last, mean, min, max,
  count (`v_first` … `n`), and the increase inside the bucket (`inc`, resets handled),
  which lets counters answer from rollups without their raw samples.
* `rollup_state` — per tier, the bucket up to which it has been folded (exclusive).
* `ingested_batches` — the key of every upload stored (`node:batch_id`) and the time of its
  newest sample, written in the same transaction as its samples: a replay is recognised
  exactly, even after a crash between storing and acknowledging. Kept as long as raw
  samples are, which is as old as a sample may be when it arrives.
"""

from __future__ import annotations

import json

ROLLUP_COLUMNS = "series_id, bucket_ms, v_first, v_last, v_mean, v_min, v_max, n, inc"

DDL = (
    """CREATE TABLE IF NOT EXISTS series (
        series_id INTEGER PRIMARY KEY, metric VARCHAR NOT NULL, gpu_uuid VARCHAR NOT NULL,
        mig_uuid VARCHAR, labels VARCHAR NOT NULL, node VARCHAR NOT NULL,
        environment VARCHAR NOT NULL, model VARCHAR NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS samples (
        series_id INTEGER NOT NULL, ts_ms BIGINT NOT NULL, value DOUBLE NOT NULL)""",
    *(f"""CREATE TABLE IF NOT EXISTS {table} (
        series_id INTEGER NOT NULL, bucket_ms BIGINT NOT NULL, v_first DOUBLE NOT NULL,
        v_last DOUBLE NOT NULL, v_mean DOUBLE NOT NULL, v_min DOUBLE NOT NULL,
        v_max DOUBLE NOT NULL, n INTEGER NOT NULL, inc DOUBLE NOT NULL)"""
      for table in ("rollup_1m", "rollup_1h")),
    """CREATE TABLE IF NOT EXISTS rollup_state (
        tier VARCHAR PRIMARY KEY, done_until_ms BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ingested_batches (
        batch_key VARCHAR PRIMARY KEY, newest_ms BIGINT NOT NULL)""",
)


def encode_labels(labels: tuple[tuple[str, str], ...]) -> str:
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":")) if labels else ""


def decode_labels(text: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(json.loads(text).items())) if text else ()
