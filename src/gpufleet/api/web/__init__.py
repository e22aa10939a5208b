"""The dashboard: server-rendered pages over the same service calls the API answers with
(docs/dashboard.md)."""
