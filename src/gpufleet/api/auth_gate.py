"""Refuse `/api/v1` requests that carry no bearer token before anything else reads them.

Route dependencies authenticate each token properly; this gate only makes sure a caller
without one learns nothing else first — not even whether its request body was valid.

One exception, for the dashboard's "API call behind it" links: a GET or HEAD that carries a
dashboard session cookie and no Authorization header is sent on with the session's token as
its bearer token. Reads only: a write always needs the header, so a page on another site
cannot make a signed-in browser change anything (the cookie is SameSite=Strict as well;
docs/dashboard.md, "Sessions").

The chat platforms' request URLs carry no bearer token: Slack signs its requests and
Mattermost sends a command token, and each of those routes verifies that before reading
anything else (docs/chatops.md).
"""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie

from gpufleet.api.chatops.paths import CHAT_PLATFORM_PATHS
from gpufleet.api.errors import error_response
from gpufleet.api.web.sessions import COOKIE_NAME

API_PREFIX = "/api/v1/"
READS = ("GET", "HEAD")


class BearerRequired:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if (scope["type"] == "http" and scope["path"].startswith(API_PREFIX)
                and scope["path"] not in CHAT_PLATFORM_PATHS):  # each verifies its caller
            headers = dict(scope.get("headers") or [])
            authorization = headers.get(b"authorization", b"")
            if not authorization and scope["method"] in READS:
                token = _session_token(scope, headers.get(b"cookie", b""))
                if token:
                    authorization = b"Bearer " + token.encode()
                    scope = dict(scope, headers=[*scope["headers"],
                                                 (b"authorization", authorization)])
            if not authorization.lower().startswith(b"bearer ") or not authorization[7:].strip():
                response = error_response(
                    401, "missing_token",
                    "missing bearer token: send `Authorization: Bearer <token>`",
                    headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _session_token(scope, cookie_header: bytes) -> str | None:
    """The API token of the dashboard session this cookie names, if it is one."""
    if not cookie_header:
        return None
    try:
        cookies = SimpleCookie(cookie_header.decode("latin-1"))
    except CookieError:
        return None
    morsel = cookies.get(COOKIE_NAME)
    if morsel is None:
        return None
    session = scope["app"].state.web_sessions.find(morsel.value)
    return session.raw_token if session else None
