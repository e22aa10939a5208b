"""`RequestRoute`: an API route whose endpoint is handed the `Request` and returns a `Response`.

FastAPI documents such a route from its declaration as usual — security from the route's
`dependencies`, the body from `openapi_extra`, the answer from `response_model` — but calls
the endpoint with the request alone: no dependency solving, no body parsing, no validation
and re-encoding of the answer. The endpoint authenticates with `deps.request_principal`
(the same parsing, cache and checks as `deps.principal`) and encodes its own answer; errors
it raises reach the same handlers (api/errors.py) as any route's.

For the telemetry upload routes. They carry most of the server's requests, and for a
450-sample upload FastAPI's per-request machinery cost about as much CPU as decoding and
checking its samples (BENCHMARKS.md, "Telemetry ingest at the API").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


class RequestRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        if not inspect.iscoroutinefunction(self.endpoint):
            raise TypeError(f"{self.path}: a RequestRoute's endpoint is `async def "
                            "endpoint(request) -> Response`")
        return self.endpoint
