"""Dashboard sessions: a random id in a cookie, the API token it stands for kept on the
server.

Why in memory: a session holds a raw API token, which the state store never keeps (it keeps
token hashes). So a session survives nothing it should not — logout deletes it, a restart
ends it, and every request re-authenticates its token (`Gpufleet.authenticate`), so a revoked
or expired token ends its sessions at once. The cost: with several replicas a browser must
stick to one (docs/dashboard.md, "Sessions")."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass

COOKIE_NAME = "gf_session"
SESSION_MAX_AGE_S = 12 * 3600
MAX_SESSIONS = 10_000  # a bound on memory; the oldest goes first


@dataclass(frozen=True)
class WebSession:
    raw_token: str
    csrf_token: str
    started_monotonic_s: float


def _key(session_id: str) -> str:
    """Sessions are found by a hash of their id: a dump of the dict names no cookie."""
    return hashlib.sha256(session_id.encode()).hexdigest()


class WebSessions:
    def __init__(self, max_age_s: float = SESSION_MAX_AGE_S, max_sessions: int = MAX_SESSIONS):
        self.max_age_s = max_age_s
        self.max_sessions = max_sessions
        self._by_key: dict[str, WebSession] = {}
        self._lock = threading.Lock()

    def start(self, raw_token: str) -> tuple[str, WebSession]:
        """A new session for an authenticated token: its id (for the cookie) and itself."""
        session_id = secrets.token_urlsafe(32)
        session = WebSession(raw_token, secrets.token_urlsafe(32), time.monotonic())
        with self._lock:
            while len(self._by_key) >= self.max_sessions:
                self._by_key.pop(next(iter(self._by_key)))
            self._by_key[_key(session_id)] = session
        return session_id, session

    def find(self, session_id: str | None) -> WebSession | None:
        if not session_id:
            return None
        key = _key(session_id)
        with self._lock:
            session = self._by_key.get(key)
            if session and time.monotonic() - session.started_monotonic_s > self.max_age_s:
                del self._by_key[key]
                return None
        return session

    def end(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._by_key.pop(_key(session_id), None)
