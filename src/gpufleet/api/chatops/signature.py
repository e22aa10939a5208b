"""Is this raw request from Slack? A verdict from headers, body bytes and a clock alone.

Slack signs `v0:{timestamp}:{body}` with the app's signing secret (HMAC-SHA256) and sends
`X-Slack-Signature: v0=<hex>` and `X-Slack-Request-Timestamp`. The comparison itself is
slack-sdk's `SignatureVerifier` (constant-time, its own five-minute window); this module adds
what it does not say: *why* a request is refused, so the log can tell a stale replay from a
forged signature, and the guards it lacks (a timestamp that is no integer, a non-ASCII signature
or non-UTF-8 body make it raise instead of answering False). Nothing in the body is read before
the verdict: the only way to a body for `payloads` is an accepted check's `VerifiedBody`.
Neither the secret nor a presented signature is ever logged or shown in a repr.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from slack_sdk.signature import SignatureVerifier

from gpufleet.clock import Clock

log = logging.getLogger(__name__)

REPLAY_WINDOW_S = 300  # Slack's documented window, and slack-sdk's
MAX_BODY_BYTES = 1 << 20  # an interactivity payload carries its message's blocks; far below this
SIGNATURE_HEADER = "x-slack-signature"
TIMESTAMP_HEADER = "x-slack-request-timestamp"


class Verdict(StrEnum):
    ACCEPTED = "accepted"
    MISSING_HEADERS = "missing_headers"
    MALFORMED_TIMESTAMP = "malformed_timestamp"
    STALE = "stale"
    FUTURE = "future"
    TOO_LARGE = "too_large"
    BAD_SIGNATURE = "bad_signature"


_MESSAGES = {
    Verdict.ACCEPTED: "signature verified",
    Verdict.MISSING_HEADERS: "the request has no X-Slack-Signature or X-Slack-Request-Timestamp",
    Verdict.MALFORMED_TIMESTAMP: "X-Slack-Request-Timestamp is not a Unix time in seconds",
    Verdict.STALE: "the request is older than the replay window",
    Verdict.FUTURE: "the request is dated later than the replay window allows",
    Verdict.TOO_LARGE: "the request body is larger than any Slack request",
    Verdict.BAD_SIGNATURE: "the signature does not match the body",
}


@dataclass(frozen=True)
class VerifiedBody:
    """The bytes of a request whose signature matched; only `RequestVerifier` makes one."""

    raw: bytes = field(repr=False)


@dataclass(frozen=True)
class SignatureCheck:
    verdict: Verdict
    body: VerifiedBody | None = None  # set exactly when accepted

    @property
    def accepted(self) -> bool:
        return self.verdict is Verdict.ACCEPTED

    @property
    def http_status(self) -> int:
        """200 to go on; 413 for a body too large; 401 for everything else."""
        if self.accepted:
            return 200
        return 413 if self.verdict is Verdict.TOO_LARGE else 401

    @property
    def message(self) -> str:
        return _MESSAGES[self.verdict]


class _SdkClock:
    """slack-sdk's clock interface (float seconds) over ours."""

    def __init__(self, clock: Clock):
        self._clock = clock

    def now(self) -> float:
        return self._clock.now().timestamp()


class RequestVerifier:
    """Built once from the signing secret (a setting) and the server's clock."""

    def __init__(self, signing_secret: str, clock: Clock, *,
                 window_s: int = REPLAY_WINDOW_S, max_body_bytes: int = MAX_BODY_BYTES):
        if not signing_secret.strip():
            raise ValueError("the Slack signing secret is empty")
        self._sdk = SignatureVerifier(signing_secret, clock=_SdkClock(clock))
        self._clock = clock
        self._window_s = window_s
        self._max_body_bytes = max_body_bytes

    def __repr__(self) -> str:
        return f"RequestVerifier(window_s={self._window_s})"

    def check(self, headers: Mapping[str, str], body: bytes) -> SignatureCheck:
        """The verdict on one raw request; a refusal is logged with its reason, never its
        signature."""
        verdict = self._verdict(headers, body)
        if verdict is not Verdict.ACCEPTED:
            log.warning("Slack request refused: %s (%s)", verdict.value, _MESSAGES[verdict])
            return SignatureCheck(verdict)
        return SignatureCheck(verdict, VerifiedBody(body))

    def _verdict(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        lowered = {key.lower(): value for key, value in headers.items()}
        signature = lowered.get(SIGNATURE_HEADER)
        timestamp = lowered.get(TIMESTAMP_HEADER)
        if not signature or not timestamp:
            return Verdict.MISSING_HEADERS
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
            return Verdict.MALFORMED_TIMESTAMP
        age_s = self._clock.now().timestamp() - int(timestamp)
        if age_s > self._window_s:
            return Verdict.STALE
        if age_s < -self._window_s:
            return Verdict.FUTURE
        if len(body) > self._max_body_bytes:
            return Verdict.TOO_LARGE
        if not signature.isascii() or not _is_utf8(body):  # neither can be Slack's
            return Verdict.BAD_SIGNATURE
        if not self._sdk.is_valid(body=body, timestamp=timestamp, signature=signature):
            return Verdict.BAD_SIGNATURE
        return Verdict.ACCEPTED


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
