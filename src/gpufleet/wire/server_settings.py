"""What `GET /api/v1/server/settings` answers: the running server's settings."""

from __future__ import annotations

from gpufleet.wire.base import View


class ServerSetting(View):
    """One setting of the running server, as it started: its value (secrets and the
    passwords in URLs masked) and where the value came from."""

    name: str
    value: str | int | float | bool | None
    source: str
    description: str
