"""Use cases: the one way in for every change of state (docs/design.md, "Layers").

The API, the CLI's server-side commands and every background loop call these; each runs
domain rules inside one state-store transaction and records an audit event. Grouped by
concept: `inventory/`, `access/`, `lifecycle/`, `telemetry/`; `app.py` is the front door
(`Gpufleet`), and `lookup`, `paging` and `group_commit` are shared by all four.
"""
