"""`Server-Timing: app;dur=<ms>` on every response: server-side latency, visible to clients
and benchmarks without counting the network or the client's own start-up."""

from __future__ import annotations

import time


class ServerTiming:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started_s = time.perf_counter()

        async def timed_send(message):
            if message["type"] == "http.response.start":
                duration_ms = (time.perf_counter() - started_s) * 1000
                headers = list(message.get("headers", []))
                headers.append((b"server-timing", f"app;dur={duration_ms:.2f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed_send)
