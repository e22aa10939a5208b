"""Which telemetry store the server keeps its samples in, chosen by one setting.

`telemetry_url` empty: the embedded DuckDB store in the data dir (one server process).
Set: a Prometheus-compatible engine (VictoriaMetrics, Prometheus, Mimir) at that URL,
written by remote-write and read with PromQL — the store for several server replicas.
"""

from __future__ import annotations

from datetime import timedelta

from gpufleet.settings import Settings
from gpufleet.tsdb import Retention, TelemetryStore

TELEMETRY_FILE = "telemetry.duckdb"


def retention_of(settings: Settings) -> Retention:
    return Retention(raw=timedelta(days=settings.telemetry_raw_retention_days),
                     minute=timedelta(days=settings.telemetry_minute_retention_days),
                     hour=timedelta(days=settings.telemetry_hour_retention_days))


def open_telemetry_store(settings: Settings, *, in_memory: bool = False) -> TelemetryStore:
    """The store the settings name; `in_memory` keeps an embedded store off the disk (tests,
    and services built without a data dir)."""
    if settings.telemetry_url:
        from gpufleet.tsdb.prometheus_store import PrometheusTelemetryStore

        return PrometheusTelemetryStore(settings.telemetry_url.rstrip("/"),
                                        (settings.telemetry_query_url or "").rstrip("/")
                                        or None)
    from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore

    path = ":memory:" if in_memory else settings.data_dir / TELEMETRY_FILE
    return DuckDBTelemetryStore(
        path, retention=retention_of(settings), threads=settings.telemetry_duckdb_threads,
        # How far ahead of the clock ingest lets a sample be (and a minute for clock steps):
        # what the replay check's shortcut must allow for (tsdb/recent_keys.py).
        future_allowance_s=settings.telemetry_max_sample_future_s + 60.0)
