"""An outgoing message as the sender hands it to a receiver module, and a transport."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from gpufleet.services.operations.receivers import Outgoing, Transport
from tests.conftest import START

PAYLOAD = {"kind": "health.quarantined", "severity": "critical",
           "summary": "GPU-3f2a quarantined by XID 79", "text": "fallen off the bus",
           "labels": {"project": "vision", "node": "n1", "gpu": "GPU-3f2a", "owner": "alice"},
           "dedup_key": "q-1"}


def outgoing(kind: str, config: dict, *, recipient: str | None = None,
             email: str | None = None, payload: dict | None = None) -> Outgoing:
    return Outgoing(id=7, receiver="r", receiver_kind=kind, config=config,
                    recipient=recipient, recipient_email=email,
                    idempotency_key=f"q-1|r|{recipient or '*'}", kind=(payload or PAYLOAD)["kind"],
                    severity="critical", payload=payload or PAYLOAD, created_at=START, attempt=1)


@contextmanager
def transport(timeout_s: float = 5.0) -> Iterator[Transport]:
    with httpx.Client() as http:
        yield Transport(http, timeout_s)
