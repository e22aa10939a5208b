"""The OpenAPI document, with the error responses each route really returns.

FastAPI documents a route's success and, for routes with parameters, a 422 in its own
shape; gpufleet answers every failure with one body (api/errors.py). This adds that body's
schema once (`ErrorBody`) and, to every operation but the unauthenticated probes, the
statuses it can answer with, derived from what the route has rather than listed by hand
— so a new route is documented the day it is added:

  400  every route: a NUL character (api/deps.py) or a value the service refuses
  401  every route: no token, or one that is unknown, expired or revoked
  403  every route: the token's role may not do this
  404  a route that names something (a path parameter, a body or a query naming a
       project, node, environment…)
  409  a route that changes state (POST, PUT, DELETE)
  413  a route that takes a body (over the body limit)
  422  a route with parameters or a JSON body that does not validate
  503  every route (and `/readyz`): the state or telemetry store cannot answer now
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from gpufleet.wire.errors import ErrorBody

PROBES = {"/healthz": [], "/readyz": ["503"]}  # no token; their only error statuses
_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
_DESCRIPTIONS = {
    "400": "Bad request: a NUL character in any text, or a value the server refuses "
           "(a sort, cursor, limit, selector, duration…)",
    "401": "No bearer token, or one that is unknown, expired or revoked",
    "403": "The token's role may not do this",
    "404": "The named thing does not exist (or is not visible to the caller)",
    "409": "The request collides with the current state",
    "413": "The request body is over the limit",
    "422": "The parameters or the JSON body do not validate; `details.errors` lists each",
    "503": "A store cannot answer now; try again later",
}
_CHANGES_STATE = {"post", "put", "delete", "patch"}
# Where the rules say more than a route can answer: remote-write drops what it cannot use,
# never refusing a body for what it names (docs/telemetry-ingest.md).
_NEVER = {("post", "/api/v1/telemetry/remote-write"): {"404", "409"}}


def error_statuses(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    """The error statuses of one operation, by the rules of the module docstring."""
    parameters = operation.get("parameters", [])
    has_body = "requestBody" in operation
    statuses = ["400", "401", "403"]
    if parameters or has_body:
        statuses.append("404")
    if method in _CHANGES_STATE:
        statuses.append("409")
    if has_body:
        statuses.append("413")
    if parameters or _json_body(operation):
        statuses.append("422")
    statuses.append("503")
    return [s for s in statuses if s not in _NEVER.get((method, path), ())]


def _json_body(operation: dict[str, Any]) -> bool:
    """A body FastAPI validates (the upload routes declare theirs as binary)."""
    content = operation.get("requestBody", {}).get("content", {})
    return "application/json" in content and \
        content["application/json"].get("schema", {}).get("format") != "binary"


def with_error_responses(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with `ErrorBody` and each API operation's error responses."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(error_schema.pop("$defs", {}))
    schemas["ErrorBody"] = error_schema
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)  # FastAPI's own 422 shape: never sent
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            statuses = PROBES[path] if path in PROBES else \
                error_statuses(method, path, operation)
            for status in statuses:
                responses[status] = {"description": _DESCRIPTIONS[status],
                                     "content": {"application/json": {"schema": _ERROR_REF}}}
    return document


def install(app: FastAPI) -> None:
    """Serve the document with the error responses (built once, on first request)."""
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_error_responses(get_openapi(
                title=app.title, version=app.version, description=app.description,
                routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
