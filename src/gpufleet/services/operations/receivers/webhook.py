"""A generic webhook: the notification POSTed as JSON, with `Idempotency-Key` and, when
the receiver has a secret, `X-Gpufleet-Signature` (domain/operations/signatures.py)."""

from __future__ import annotations

import json
import time

from gpufleet.domain.operations.delivery import Attempt
from gpufleet.domain.operations.signatures import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, signature
from gpufleet.services.operations.receivers.outgoing import Outgoing, Transport, http_attempt


def body(message: Outgoing) -> bytes:
    """The stable JSON a webhook reads (docs/operations.md, "Receivers")."""
    return json.dumps({
        "id": message.id, "idempotency_key": message.idempotency_key,
        "receiver": message.receiver, "recipient": message.recipient,
        "created_at": message.created_at.isoformat(), "attempt": message.attempt,
        "notification": message.payload,
    }, separators=(",", ":"), sort_keys=True).encode()


def deliver(message: Outgoing, transport: Transport, *, now_unix: int | None = None) -> Attempt:
    content = body(message)
    headers = {"Content-Type": "application/json", IDEMPOTENCY_HEADER: message.idempotency_key,
               "User-Agent": "gpufleet-webhook"}
    secret = message.config.get("secret")
    if secret:
        stamp = now_unix if now_unix is not None else int(time.time())
        headers[SIGNATURE_HEADER] = signature(secret, stamp, content)
    return http_attempt(lambda: transport.http.post(
        message.config["url"], content=content, headers=headers, timeout=transport.timeout_s))
