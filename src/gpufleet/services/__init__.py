"""Use cases: the one way in for every change of state (DESIGN.md §5).

The API, the CLI's server-side commands and every background loop call these; each runs
domain rules inside one state-store transaction and records an audit event.
"""
