"""Recently authenticated tokens, so a busy endpoint does not read the token table per call.

An agent uploads telemetry every few seconds and each upload would otherwise cost a read
transaction to find its token. A token seen valid is remembered for `ttl` (setting
`token_cache_s`), and never past its own expiry. Revocations made through this server
process clear the cache at once; one made through another replica takes effect here
within `ttl`. Keys are SHA-256 digests, so no raw token is kept beyond its request.
"""

from __future__ import annotations

import hashlib
import threading
from datetime import datetime, timedelta

from gpufleet.services.access.principal import Principal

MAX_ENTRIES = 200_000  # more agents than any fleet has; beyond it, start afresh


class PrincipalCache:
    def __init__(self, ttl: timedelta):
        self.ttl = ttl
        self._lock = threading.Lock()
        self._known: dict[bytes, tuple[Principal, datetime]] = {}

    @staticmethod
    def _key(raw_token: str) -> bytes:
        return hashlib.sha256(raw_token.encode()).digest()

    def get(self, raw_token: str, now: datetime) -> Principal | None:
        if self.ttl <= timedelta(0):
            return None
        with self._lock:
            held = self._known.get(self._key(raw_token))
        if held is None or now >= held[1]:
            return None
        return held[0]

    def put(self, raw_token: str, principal: Principal, now: datetime,
            token_expires_at: datetime | None) -> None:
        if self.ttl <= timedelta(0):
            return
        until = now + self.ttl
        if token_expires_at is not None:
            until = min(until, token_expires_at)
        with self._lock:
            if len(self._known) >= MAX_ENTRIES:
                self._known.clear()
            self._known[self._key(raw_token)] = (principal, until)

    def clear(self) -> None:
        """A token may have been revoked: forget every one."""
        with self._lock:
            self._known.clear()
