"""What can go wrong in the CLI, as one tree the entry point turns into one line.

    CliError              a message for the operator; exit status 1, never a traceback
    ├── ApiError          the server answered with its error body (status, code, details)
    ├── ServerUnreachable no connection, or no answer in time
    └── NotLoggedIn       no token from the environment, the config file or `gpufleet login`
"""

from __future__ import annotations

from typing import Any


class CliError(Exception):
    """An error the operator can act on; `str(error)` is the whole message."""


class ApiError(CliError):
    def __init__(self, status: int, code: str, message: str,
                 details: dict[str, Any] | None = None, hint: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.code})" + (f"; {self.hint}" if self.hint else "")


class ServerUnreachable(CliError):
    pass


class NotLoggedIn(CliError):
    pass
