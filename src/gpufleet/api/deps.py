"""Request dependencies: the services facade, the caller, and paging limits."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpufleet.domain.errors import InvalidInput
from gpufleet.services.app import Gpufleet
from gpufleet.services.principal import Principal

bearer = HTTPBearer(auto_error=False, description="An API token: `Authorization: Bearer gfa_…`")


def services(request: Request) -> Gpufleet:
    return request.app.state.gpufleet


def raw_token(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:
    return credentials.credentials.strip() if credentials else ""


def principal(token: str = Depends(raw_token), gf: Gpufleet = Depends(services)) -> Principal:
    """The authenticated caller; every /api/v1 route except agent registration needs one."""
    return gf.authenticate(token)


def page_limit(limit: int | None, gf: Gpufleet) -> int:
    if limit is None:
        return gf.settings.page_size_default
    if limit < 1 or limit > gf.settings.page_size_max:
        raise InvalidInput(f"limit must be between 1 and {gf.settings.page_size_max}",
                           code="invalid_limit", details={"limit": limit})
    return limit
