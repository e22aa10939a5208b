"""The dashboard's routes, one module a page (docs/dashboard.md): sign-in, then each page's
router, then the static assets shipped in the package."""

from __future__ import annotations

from fastapi import Request
from fastapi.staticfiles import StaticFiles

from gpufleet.api.web import signin
from gpufleet.api.web.page import HERE, UI, SignInRequired, templates, to_login
from gpufleet.api.web.pages import fleet, gpu, node, nodes, pools, request_form, requests

STATIC_PATH = f"{UI}/static"
# Each page module has a `router`; those with a `NAV` entry (key, label, href) are in the
# header's navigation, in this order.
PAGES = [fleet, nodes, node, gpu, request_form, requests, pools]  # request_form first: /requests/new


def install(app) -> None:
    """Every page, the redirect to sign in, and the assets: nothing from another host."""
    app.include_router(signin.router)
    for page in PAGES:
        app.include_router(page.router)
    templates.env.globals["nav"] = [page.NAV for page in PAGES if hasattr(page, "NAV")]
    app.add_exception_handler(SignInRequired, _sign_in_first)
    app.mount(STATIC_PATH, StaticFiles(directory=HERE / "static"), name="web-static")


async def _sign_in_first(request: Request, exc: SignInRequired):
    return to_login(exc.next_url)
