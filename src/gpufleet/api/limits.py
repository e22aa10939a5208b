"""Refuse oversized request bodies before they are read into memory (ASGI middleware)."""

from __future__ import annotations

import contextlib
import json

from gpufleet.api.errors import error_body


class BodySizeLimit:
    """`max_bytes` for every path, except those `limits_by_path` names (telemetry uploads
    are larger than any other request, and are bounded by settings of their own)."""

    def __init__(self, app, max_bytes: int, limits_by_path: dict[str, int] | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.limits_by_path = limits_by_path or {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self.limits_by_path.get(scope.get("path", ""), self.max_bytes)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            await self._refuse(send, max_bytes)
            return
        received = 0
        refused = False
        started = False

        async def limited_receive():
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    refused = True
                    raise _TooLarge
            return message

        async def guarded_send(message):
            # The framework may catch `_TooLarge` while reading the body and answer with its
            # own error (FastAPI: 400 "error parsing the body"); once the body was refused,
            # the answer is ours.
            nonlocal started
            if refused and not started:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        with contextlib.suppress(_TooLarge):
            await self.app(scope, limited_receive, guarded_send)
        if refused and not started:
            await self._refuse(send, max_bytes)

    @staticmethod
    async def _refuse(send, max_bytes: int) -> None:
        body = json.dumps(error_body(
            "payload_too_large", f"request body exceeds the limit of {max_bytes} bytes",
            {"max_bytes": max_bytes})).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass
