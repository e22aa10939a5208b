"""The dashboard's routes: `/` sends the browser to `/ui/`; `/ui/login` turns an API token
into a session; `/ui/` is the Fleet page (docs/dashboard.md)."""

from __future__ import annotations

import secrets
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from gpufleet.api.deps import caller
from gpufleet.api.web import csrf, formatting
from gpufleet.api.web.fleet_page import DEFAULT_WINDOW, fleet_page, page_status
from gpufleet.api.web.sessions import COOKIE_NAME, SESSION_MAX_AGE_S, WebSessions
from gpufleet.domain.errors import GpufleetError, Unauthenticated
from gpufleet.services.access.principal import Principal

UI = "/ui"
STATIC_PATH = f"{UI}/static"
HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
formatting.install(templates.env)
router = APIRouter(include_in_schema=False)


def mount_static(app) -> None:
    """The stylesheet and the local-time script, from the package: nothing from elsewhere."""
    app.mount(STATIC_PATH, StaticFiles(directory=HERE / "static"), name="web-static")


def _sessions(request: Request) -> WebSessions:
    return request.app.state.web_sessions


def _set_cookie(request: Request, response: Response, name: str, value: str,
                max_age_s: int) -> None:
    response.set_cookie(name, value, max_age=max_age_s, path=UI, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")


def _to_login(request: Request) -> RedirectResponse:
    response = RedirectResponse(f"{UI}/login", status_code=303)
    response.delete_cookie(COOKIE_NAME, path=UI)
    return response


async def _signed_in(request: Request):
    """The session and its principal, or None when there is none or its token no longer
    authenticates (revoked, expired): then the session ends here."""
    session_id = request.cookies.get(COOKIE_NAME)
    session = _sessions(request).find(session_id)
    if session is None:
        return None
    try:
        return session, await caller(session.raw_token, request.app.state.gpufleet)
    except Unauthenticated:
        _sessions(request).end(session_id)
        return None


async def _form_fields(request: Request, *names: str) -> list[str]:
    """Text fields of a posted form, "" where absent. Read here rather than with `Form()`:
    the app's NUL check reads the body first, and `Form()` would have consumed it."""
    form = await request.form()
    return [value if isinstance(value := form.get(name), str) else "" for name in names]


# Only this server's own assets, no framing (clickjacking of the forms), forms post back
# here; pages show one caller's data, so no cache keeps them.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}


def _page(request: Request, name: str, status_code: int = 200, **context) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status_code,
                                      headers=PAGE_HEADERS)


@router.get("/")
def root() -> RedirectResponse:
    """The dashboard lives under /ui/; the API under /api/v1."""
    return RedirectResponse(f"{UI}/", status_code=307)


@router.get(f"{UI}/login")
async def login_page(request: Request) -> HTMLResponse:
    if await _signed_in(request):
        return RedirectResponse(f"{UI}/", status_code=303)
    return _login_form(request)


def _login_form(request: Request, error: str | None = None,
                status_code: int = 200) -> HTMLResponse:
    token = secrets.token_urlsafe(32)
    response = _page(request, "login.html", status_code, csrf_token=token, error=error)
    _set_cookie(request, response, csrf.LOGIN_COOKIE_NAME, token, 3600)
    return response


@router.post(f"{UI}/login")
async def login(request: Request) -> Response:
    token, csrf_token = await _form_fields(request, "token", csrf.FIELD_NAME)
    try:
        csrf.check(request.cookies.get(csrf.LOGIN_COOKIE_NAME), csrf_token)
    except GpufleetError as exc:
        return _login_form(request, exc.message, 403)
    raw = token.strip()
    try:
        if not raw:
            raise Unauthenticated("paste an API token (gfa_…) to sign in")
        await caller(raw, request.app.state.gpufleet)
    except Unauthenticated as exc:
        return _login_form(request, exc.message, 401)
    session_id, _ = _sessions(request).start(raw)
    response = RedirectResponse(f"{UI}/", status_code=303)
    _set_cookie(request, response, COOKIE_NAME, session_id, SESSION_MAX_AGE_S)
    response.delete_cookie(csrf.LOGIN_COOKIE_NAME, path=UI)
    return response


@router.post(f"{UI}/logout")
async def logout(request: Request) -> Response:
    (csrf_token,) = await _form_fields(request, csrf.FIELD_NAME)
    signed_in = await _signed_in(request)
    if signed_in is None:
        return _to_login(request)
    session, principal = signed_in
    try:
        csrf.check(session.csrf_token, csrf_token)
    except GpufleetError as exc:
        return _page(request, "error.html", 403, message=exc.message, principal=principal,
                     csrf_token=session.csrf_token)
    _sessions(request).end(request.cookies.get(COOKIE_NAME))
    return _to_login(request)


def _who(principal: Principal) -> str:
    return principal.user_name or principal.token_name or principal.role


@router.get(f"{UI}/")
async def fleet(request: Request, window: str = DEFAULT_WINDOW) -> Response:
    signed_in = await _signed_in(request)
    if signed_in is None:
        return _to_login(request)
    session, principal = signed_in
    gf = request.app.state.gpufleet
    sections = await run_in_threadpool(fleet_page, gf, principal, window)
    return _page(request, "fleet.html", page_status(sections), sections=sections,
                 window=window, principal=principal, who=_who(principal),
                 csrf_token=session.csrf_token)
