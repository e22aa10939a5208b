"""Signing in and out: `/` sends the browser to `/ui/`; `/ui/login` turns an API token into
a session; `/ui/logout` ends it (docs/dashboard.md, "Sessions")."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gpufleet.api.deps import caller
from gpufleet.api.web import csrf
from gpufleet.api.web.page import (
    UI,
    form_fields,
    render,
    safe_next,
    services,
    sessions,
    signed_in,
    to_login,
)
from gpufleet.api.web.sessions import COOKIE_NAME, SESSION_MAX_AGE_S
from gpufleet.domain.errors import GpufleetError, Unauthenticated

router = APIRouter(include_in_schema=False)


def set_cookie(request: Request, response: Response, name: str, value: str,
               max_age_s: int, path: str) -> None:
    response.set_cookie(name, value, max_age=max_age_s, path=path, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")


@router.get("/")
def root() -> RedirectResponse:
    """The dashboard lives under /ui/; the API under /api/v1."""
    return RedirectResponse(f"{UI}/", status_code=307)


@router.get(f"{UI}/login")
async def login_page(request: Request, next: str | None = None) -> HTMLResponse:
    if await signed_in(request):
        return RedirectResponse(safe_next(next), status_code=303)
    return _login_form(request, next)


def _login_form(request: Request, next_url: str | None, error: str | None = None,
                status_code: int = 200) -> HTMLResponse:
    token = secrets.token_urlsafe(32)
    response = render(request, "login.html", status_code=status_code, csrf_token=token,
                      error=error, next_url=safe_next(next_url))
    set_cookie(request, response, csrf.LOGIN_COOKIE_NAME, token, 3600, path=UI)
    return response


@router.post(f"{UI}/login")
async def login(request: Request) -> Response:
    token, csrf_token, next_url = await form_fields(request, "token", csrf.FIELD_NAME, "next")
    try:
        csrf.check(request.cookies.get(csrf.LOGIN_COOKIE_NAME), csrf_token)
    except GpufleetError as exc:
        return _login_form(request, next_url, exc.message, 403)
    raw = token.strip()
    try:
        if not raw:
            raise Unauthenticated("paste an API token (gfa_…) to sign in")
        await caller(raw, services(request))
    except Unauthenticated as exc:
        return _login_form(request, next_url, exc.message, 401)
    session_id, _ = sessions(request).start(raw)
    response = RedirectResponse(safe_next(next_url), status_code=303)
    # Path=/ so that the API links on each page open in the browser (GET only: the API's
    # gate lets a session read, never write, docs/dashboard.md "Sessions").
    set_cookie(request, response, COOKIE_NAME, session_id, SESSION_MAX_AGE_S, path="/")
    response.delete_cookie(csrf.LOGIN_COOKIE_NAME, path=UI)
    return response


@router.post(f"{UI}/logout")
async def logout(request: Request) -> Response:
    (csrf_token,) = await form_fields(request, csrf.FIELD_NAME)
    viewer = await signed_in(request)
    if viewer is None:
        return to_login()
    try:
        csrf.check(viewer.csrf_token, csrf_token)
    except GpufleetError as exc:
        return render(request, "error.html", viewer, 403, message=exc.message)
    sessions(request).end(viewer.session_id)
    return to_login()
