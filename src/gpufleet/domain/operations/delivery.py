"""What one delivery attempt came to, and when the next one is due.

The sender delivers every outbox message at least once (docs/operations.md, "The outbox"):
a failed attempt is tried again after an exponential backoff with jitter, never sooner
than a receiver's `Retry-After` asks, until the message is older than the give-up age.
Pure: the caller passes the clock's `now` and the jitter draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Attempt:
    """One attempt's result, as the delivery log keeps it.

    `outcome`: a short word for the log (`delivered`, `http_503`, `timeout`,
    `unreachable`, `smtp_451`, `slack_ratelimited`, `no_email`).
    `status`: the receiver's own status code where it has one (HTTP, SMTP).
    `retry_after_s`: the receiver asked to wait at least this long (HTTP 429/503).
    `permanent`: retrying cannot help (an owner with no e-mail address): give up now.
    """

    ok: bool
    outcome: str
    status: int | None = None
    detail: str | None = None
    retry_after_s: float | None = None
    permanent: bool = False


DELIVERED = Attempt(ok=True, outcome="delivered")


@dataclass(frozen=True)
class RetryPolicy:
    """`base_s` doubles per attempt up to `max_s`; `give_up_after_s` counts from the
    message's creation, so a receiver down for less than that loses nothing."""

    base_s: float
    max_s: float
    give_up_after_s: float
    retry_after_max_s: float

    def delay_s(self, attempts: int, jitter: float, retry_after_s: float | None = None) -> float:
        """Seconds to wait after the `attempts`-th failed attempt (1 for the first).

        "Equal jitter": half the exponential delay is fixed, half drawn (`jitter` in [0, 1)),
        so replicas retrying a receiver that came back do not hit it in step, and the wait
        still grows. A `Retry-After` longer than that wins, bounded by `retry_after_max_s`.
        """
        exponential = min(self.max_s, self.base_s * 2 ** max(0, min(attempts - 1, 30)))
        delay = exponential / 2 + exponential / 2 * min(max(jitter, 0.0), 1.0)
        if retry_after_s is not None and retry_after_s > 0:
            delay = max(delay, min(retry_after_s, self.retry_after_max_s))
        return delay

    def gives_up(self, created_at: datetime, now: datetime) -> bool:
        return now - created_at >= timedelta(seconds=self.give_up_after_s)
