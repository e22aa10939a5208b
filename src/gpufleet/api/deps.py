"""Request dependencies: the services facade, the caller, and paging limits.

The dependencies that do no I/O are `async def`: FastAPI runs a plain `def` dependency in
its thread pool, and three thread hand-offs per request were a large part of what a small
request (an agent's telemetry upload) cost the server."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from gpufleet.domain.errors import InvalidInput
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet

bearer = HTTPBearer(auto_error=False, description="An API token: `Authorization: Bearer gfa_…`")


async def services(request: Request) -> Gpufleet:
    return request.app.state.gpufleet


async def raw_token(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:
    return credentials.credentials.strip() if credentials else ""


async def principal(token: str = Depends(raw_token),
                    gf: Gpufleet = Depends(services)) -> Principal:
    """The authenticated caller; every /api/v1 route except agent registration needs one."""
    return await caller(token, gf)


async def request_principal(request: Request) -> Principal:
    """`principal` for a `RequestRoute` (which solves no dependencies): the same bearer
    parsing, the same checks."""
    return await caller(await raw_token(await bearer(request)), request.app.state.gpufleet)


async def caller(token: str, gf: Gpufleet) -> Principal:
    """A token the server has recently found valid is answered from memory, on the event
    loop; otherwise the token table is read in the thread pool."""
    cached = gf.cached_principal(token)
    if cached is not None:
        return cached
    return await run_in_threadpool(gf.authenticate, token)


def page_limit(limit: int | None, gf: Gpufleet) -> int:
    if limit is None:
        return gf.settings.page_size_default
    if limit < 1 or limit > gf.settings.page_size_max:
        raise InvalidInput(f"limit must be between 1 and {gf.settings.page_size_max}",
                           code="invalid_limit", details={"limit": limit})
    return limit
