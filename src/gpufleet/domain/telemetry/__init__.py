"""Telemetry vocabulary: the one metric catalogue (docs/design.md, "Telemetry model"), pure domain
code.

`catalogue` holds the rows and their lookups; `vocabulary` the units, classes, scopes and
architectures; `sources` how a raw NVML / DCGM / Prometheus value becomes a catalogue
value (scale, and sentinels read as missing). The agent, the ingest core, the rollups and
the docs all read these modules; none of them defines a metric of its own.
"""
