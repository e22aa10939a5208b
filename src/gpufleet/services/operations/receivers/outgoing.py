"""What a receiver module is given: one message, read when it was claimed, and the means to
send it (a shared HTTP client, the per-attempt timeout)."""

from __future__ import annotations

import email.utils
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from gpufleet.domain.operations.delivery import DELIVERED, Attempt


@dataclass(frozen=True)
class Outgoing:
    """One outbox message for one receiver and recipient (None: the broadcast copy).
    `recipient_email`: the recipient user's e-mail, for kinds that reach people by it."""

    id: int
    receiver: str
    receiver_kind: str
    config: dict[str, Any]
    recipient: str | None
    recipient_email: str | None
    idempotency_key: str
    kind: str
    severity: str
    payload: dict[str, Any]
    created_at: datetime
    attempt: int


@dataclass(frozen=True)
class Transport:
    """`http` is shared by every delivery (its connection pool is thread-safe); every
    attempt is bounded by `timeout_s`, so a receiver that hangs costs its own worker that
    long and nobody else anything."""

    http: httpx.Client
    timeout_s: float


def retry_after_s(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds: delta-seconds, or an HTTP date measured against the same
    response's `Date` (so no clock of ours is involved)."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        until = email.utils.parsedate_to_datetime(value)
        sent = email.utils.parsedate_to_datetime(response.headers.get("date", ""))
    except (TypeError, ValueError):
        return None
    return max(0.0, (until - sent).total_seconds())


def http_attempt(send) -> Attempt:
    """Run `send()` (an httpx request) and judge it: 2xx delivered; anything else failed,
    with the status as the outcome (`http_503`) and the start of the body as detail."""
    try:
        response = send()
    except httpx.TimeoutException as exc:
        return Attempt(ok=False, outcome="timeout", detail=str(exc) or "timed out")
    except httpx.HTTPError as exc:
        return Attempt(ok=False, outcome="unreachable", detail=f"{type(exc).__name__}: {exc}")
    if 200 <= response.status_code < 300:
        return Attempt(ok=True, outcome="delivered", status=response.status_code)
    return Attempt(ok=False, outcome=f"http_{response.status_code}",
                   status=response.status_code, detail=response.text[:500] or None,
                   retry_after_s=retry_after_s(response))


def no_email(message: Outgoing) -> Attempt:
    """An owner gpufleet has no e-mail address for cannot be reached by e-mail or Slack
    DM, however often we try."""
    return Attempt(ok=False, outcome="no_email", permanent=True,
                   detail=f"user '{message.recipient}' has no e-mail address in gpufleet")


__all__ = ["DELIVERED", "Outgoing", "Transport", "http_attempt", "no_email", "retry_after_s"]
