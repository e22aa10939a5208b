"""Operations services: health, alert rules, reclamation, and the outbox that tells people
(docs/operations.md). They stand on every other service package; none of those imports
them."""
