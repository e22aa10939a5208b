"""Chargeback on top of the store (docs/billing.md): rate cards so far."""
