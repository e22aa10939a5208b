"""Telemetry: ingest (agent batches, remote-write), the store behind it, and the questions
asked of it — range queries, funnel, idle lists, live view — plus the server's /metrics."""
