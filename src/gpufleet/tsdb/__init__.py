"""The telemetry store (docs/design.md, "Telemetry model"–§5): samples, rollups and class-aware
queries behind one protocol (`protocol.TelemetryStore`); the embedded default is
`DuckDBTelemetryStore`.

Nothing here knows who owns a GPU: series are keyed by unit, and ownership is joined from the
state store's binding intervals by the services.
"""

from gpufleet.tsdb.protocol import (
    Binding,
    Bindings,
    LatestValue,
    Retention,
    Sample,
    SampleColumns,
    SeriesLabels,
    SeriesResult,
    TelemetryStore,
    Tier,
    ValueFilter,
    choose_tier,
    series,
)

__all__ = ["Binding", "Bindings", "LatestValue", "Retention", "Sample", "SampleColumns",
           "SeriesLabels", "SeriesResult", "TelemetryStore", "Tier", "ValueFilter", "choose_tier",
           "series"]
