"""Refuse `/api/v1` requests that carry no bearer token before anything else reads them.

Route dependencies authenticate each token properly; this gate only makes sure a caller
without one learns nothing else first — not even whether its request body was valid.
"""

from __future__ import annotations

from gpufleet.api.errors import error_response

API_PREFIX = "/api/v1/"


class BearerRequired:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(API_PREFIX):
            authorization = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not authorization.lower().startswith(b"bearer ") or not authorization[7:].strip():
                response = error_response(
                    401, "missing_token",
                    "missing bearer token: send `Authorization: Bearer <token>`",
                    headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
