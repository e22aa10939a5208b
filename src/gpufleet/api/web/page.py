"""What every dashboard page shares: the signed-in viewer, rendering with the page headers,
the "API call behind it" links, and sections that show their own error in place
(docs/dashboard.md, "Pages")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from gpufleet.api.deps import caller
from gpufleet.api.web import charts, csrf, formatting
from gpufleet.api.web.sessions import COOKIE_NAME, WebSession, WebSessions
from gpufleet.domain.errors import GpufleetError, Unauthenticated
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet

UI = "/ui"
HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
formatting.install(templates.env)
charts.install(templates.env)

# Only this server's own assets, no framing (clickjacking of the forms), forms post back
# here; pages show one caller's data, so no cache keeps them.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}


@dataclass(frozen=True)
class Viewer:
    """The signed-in person looking at a page: their session, and the principal its token
    authenticates to now (so every page applies the API's role model)."""

    session_id: str
    session: WebSession
    principal: Principal

    @property
    def csrf_token(self) -> str:
        return self.session.csrf_token

    @property
    def who(self) -> str:
        p = self.principal
        return p.user_name or p.token_name or p.role


class SignInRequired(Exception):
    """Raised by the `viewer` dependency; the app answers it with a redirect to the sign-in
    form that comes back to `next` afterwards."""

    def __init__(self, next_url: str):
        self.next_url = next_url


def sessions(request: Request) -> WebSessions:
    return request.app.state.web_sessions


def services(request: Request) -> Gpufleet:
    return request.app.state.gpufleet


async def signed_in(request: Request) -> Viewer | None:
    """The viewer, or None when there is no session or its token no longer authenticates
    (revoked, expired): then the session ends here."""
    session_id = request.cookies.get(COOKIE_NAME)
    session = sessions(request).find(session_id)
    if session is None:
        return None
    try:
        return Viewer(session_id, session, await caller(session.raw_token, services(request)))
    except Unauthenticated:
        sessions(request).end(session_id)
        return None


async def viewer(request: Request) -> Viewer:
    """A page's dependency: the signed-in viewer, or a redirect to the sign-in form."""
    found = await signed_in(request)
    if found is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(target)
    return found


def to_login(next_url: str | None = None) -> RedirectResponse:
    suffix = f"?{urlencode({'next': next_url})}" if next_url and next_url != f"{UI}/" else ""
    response = RedirectResponse(f"{UI}/login{suffix}", status_code=303)
    response.delete_cookie(COOKIE_NAME, path="/")
    return response


def safe_next(next_url: str | None) -> str:
    """Where to go after signing in: only a dashboard path on this server (never
    `//elsewhere` or a full URL), else the Fleet page."""
    if next_url and next_url.startswith(f"{UI}/") and "//" not in next_url \
            and "\\" not in next_url:
        return next_url
    return f"{UI}/"


def render(request: Request, name: str, viewer: Viewer | None = None,
           status_code: int = 200, **context) -> HTMLResponse:
    if viewer is not None:
        context.update(principal=viewer.principal, who=viewer.who,
                       csrf_token=viewer.csrf_token)
    return templates.TemplateResponse(request, name, context, status_code=status_code,
                                      headers=PAGE_HEADERS)


async def form_fields(request: Request, *names: str) -> list[str]:
    """Text fields of a posted form, "" where absent. Read here rather than with `Form()`:
    the app's NUL check reads the body first, and `Form()` would have consumed it."""
    form = await request.form()
    return [value if isinstance(value := form.get(name), str) else "" for name in names]


async def checked_form(request: Request, viewer: Viewer, *names: str) -> list[str]:
    """A signed-in form's fields after its CSRF token matched the session's (else 403
    `csrf_failed`, raised before anything changes)."""
    values = await form_fields(request, csrf.FIELD_NAME, *names)
    csrf.check(viewer.csrf_token, values[0])
    return values[1:]


def api_url(path: str, **params: Any) -> str:
    """The JSON call behind a section, for its "API call" link (it opens in the browser:
    a signed-in session may GET the API, docs/dashboard.md "Sessions")."""
    pairs = [(k, v) for k, v in params.items() if v is not None]
    return f"/api/v1/{path}" + (f"?{urlencode(pairs, safe=',')}" if pairs else "")


def ui_url(path: str, **params: Any) -> str:
    """A dashboard URL with its path segments quoted: names may hold any character."""
    pairs = [(k, v) for k, v in params.items() if v is not None]
    return f"{UI}/{quote(path)}" + (f"?{urlencode(pairs)}" if pairs else "")


@dataclass
class Section:
    """One section's data, the API call behind it, or the error it met."""

    api: str
    data: Any = None
    error: str | None = None
    error_status: int | None = None


def section(api: str, compute) -> Section:
    """Run one section's service call; its error is shown in place of the section."""
    try:
        return Section(api, compute())
    except GpufleetError as exc:
        return Section(api, error=exc.message, error_status=exc.http_status)


def page_status(sections: dict[str, Section]) -> int:
    """400 when the caller's input was bad (a section says which), so a bad `window` is a
    4xx as it is on the API; a server-side failure leaves the rest of the page a 200."""
    asked_wrong = [s.error_status for s in sections.values()
                   if s.error_status and 400 <= s.error_status < 500]
    return min(asked_wrong, default=200)
