"""One error body everywhere: `{"error": {"code", "message", "details"}}`.

Every failure the API can produce is mapped here, at the edge: the domain's error tree,
request validation, unknown routes and methods, oversized bodies, and — last resort — any
unexpected exception, which is logged with its traceback and answered with a bare 500.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpufleet.domain.errors import GpufleetError
from gpufleet.wire.validation import field_error, summary

log = logging.getLogger(__name__)

_HTTP_CODES = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 406: "not_acceptable", 413: "payload_too_large",
               415: "unsupported_media_type"}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(status: int, code: str, message: str,
                   details: dict[str, Any] | None = None, headers=None) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)


async def _gpufleet_error(_request: Request, exc: GpufleetError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else None
    return error_response(exc.http_status, exc.code, exc.message, exc.details, headers)


async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = [field_error(e) for e in exc.errors()]
    return error_response(422, "validation_failed", summary(errors), {"errors": errors})


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    if exc.status_code == 404 and message == "Not Found":
        message = f"no such API route: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    return error_response(exc.status_code, code, message, headers=exc.headers)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error serving %s %s", request.method, request.url.path)
    return error_response(500, "internal_error",
                          "internal error; the server log has the details")


def install(app: FastAPI) -> None:
    app.add_exception_handler(GpufleetError, _gpufleet_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
