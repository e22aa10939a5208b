"""Operations: what gpufleet does about what it sees — health verdicts, alert rules,
reclamation policies, and the notifications they send (docs/operations.md)."""
