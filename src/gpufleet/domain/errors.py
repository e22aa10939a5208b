"""The error tree every layer raises and the API edge maps to one body shape.

    GpufleetError                 code, message, details — never a traceback on the wire
    ├── InvalidInput      400     the request names something impossible or malformed
    ├── Unauthenticated   401     no token, an unknown, expired or revoked token
    ├── Forbidden         403     a valid token whose role may not do this
    ├── NotFound          404     the named thing does not exist (or is not visible to you)
    ├── Conflict          409     the request collides with current state
    ├── PayloadTooLarge   413     the body exceeds the configured limit
    └── Unavailable       503     a dependency (the database) cannot answer now

`code` is a stable snake_case identifier clients may switch on; `message` is one sentence
for a person; `details` carries machine-readable context (the offending field, ids).
"""

from __future__ import annotations

from typing import Any, ClassVar


class GpufleetError(Exception):
    http_status: ClassVar[int] = 500
    default_code: ClassVar[str] = "internal_error"

    def __init__(self, message: str, *, code: str | None = None,
                 details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.details = details or {}


class InvalidInput(GpufleetError):
    http_status = 400
    default_code = "invalid_input"


class Unauthenticated(GpufleetError):
    http_status = 401
    default_code = "unauthenticated"


class Forbidden(GpufleetError):
    http_status = 403
    default_code = "forbidden"


class NotFound(GpufleetError):
    http_status = 404
    default_code = "not_found"


class Conflict(GpufleetError):
    http_status = 409
    default_code = "conflict"


class PayloadTooLarge(GpufleetError):
    http_status = 413
    default_code = "payload_too_large"


class Unavailable(GpufleetError):
    http_status = 503
    default_code = "unavailable"
