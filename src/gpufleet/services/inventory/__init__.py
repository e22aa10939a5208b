"""Inventory: what the fleet is — environments, nodes and their agents' registrations, GPUs,
MIG configs — and the fleet listings and summaries read from it."""
