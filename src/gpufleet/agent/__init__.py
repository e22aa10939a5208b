"""The node agent: discovers GPUs through a backend (NVML, a dcgm-exporter, or the
simulator), registers, heartbeats, and collects and uploads telemetry, spooled while the
server cannot take it (docs/design.md, "Architecture").

It imports the domain and the wire schemas, never the server.
"""
