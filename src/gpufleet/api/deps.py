"""Request dependencies: the services facade, the caller, and paging limits.

The dependencies that do no I/O are `async def`: FastAPI runs a plain `def` dependency in
its thread pool, and three thread hand-offs per request were a large part of what a small
request (an agent's telemetry upload) cost the server."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from gpufleet.domain.errors import InvalidInput
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.nul_text import NUL, NulCharacter, refuse_nul_json, refuse_nul_pairs

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


@dataclass(frozen=True)
class PageRequest:
    """Which page of a listing the caller asks for."""

    cursor: str | None
    limit: int


async def page_request(
    cursor: str | None = Query(default=None, description="`next_cursor` of the previous page"),
    limit: int | None = Query(default=None, description=(
        "Items per page; default the server's page_size_default, at most page_size_max")),
    gf: Gpufleet = Depends(services),
) -> PageRequest:
    """`cursor` and `limit` as every paged listing takes them (limit checked at once)."""
    return PageRequest(cursor, page_limit(limit, gf))


async def refuse_nul_characters(request: Request) -> None:
    """Every route's first dependency: 400 `nul_character` for a NUL in the URL path, a
    query parameter or any text of the JSON body (wire/nul_text.py says why), before any
    value is parsed or stored — so SQLite and PostgreSQL answer alike."""
    try:
        if NUL in request.url.path:
            raise NulCharacter("URL path")
        refuse_nul_pairs(request.query_params.multi_items(), "query parameter")
        refuse_nul_json(await request.body())
    except NulCharacter as exc:
        raise InvalidInput(str(exc), code="nul_character",
                           details={"field": exc.field}) from None
