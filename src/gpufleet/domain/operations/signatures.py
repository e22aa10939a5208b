"""The webhook receiver's signature: `X-Gpufleet-Signature: t=<unix>,v1=<hex>`.

`v1` is HMAC-SHA256 with the receiver's secret over `f"{t}.{body}"` — the timestamp binds
the signature to one moment, so a captured request cannot be replayed later than the
reader's tolerance (the scheme of Stripe's webhooks; docs/operations.md, "Receivers").
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Gpufleet-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, header: str, body: bytes, now_unix: int,
           tolerance_s: int = 300) -> bool:
    """What a reader runs: the header parses, its time is within `tolerance_s` of now, and
    one of its `v1` values is the HMAC of this body (compared in constant time)."""
    parts = [p.split("=", 1) for p in header.split(",") if "=" in p]
    stamps = [v for k, v in parts if k.strip() == "t"]
    macs = [v for k, v in parts if k.strip() == "v1"]
    if len(stamps) != 1 or not stamps[0].isdigit() or not macs:
        return False
    timestamp = int(stamps[0])
    if abs(now_unix - timestamp) > tolerance_s:
        return False
    expected = signature(secret, timestamp, body).split("v1=", 1)[1]
    return any(hmac.compare_digest(expected, m.strip()) for m in macs)
