"""Chargeback: rate cards, charge lines and statements (docs/billing.md).

Pure domain code: intervals, rate cards and a window in, exact figures out. The store, API,
CLI and demo are built on top of it; nothing here reads a clock or a database.
"""
