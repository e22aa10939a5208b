"""The dashboard's routes, one module a page (docs/dashboard.md): sign-in, then each page's
router, then the static assets shipped in the package."""

from __future__ import annotations

from fastapi import Request
from fastapi.staticfiles import StaticFiles

from gpufleet.api.web import signin
from gpufleet.api.web.page import HERE, UI, SignInRequired, templates, to_login
from gpufleet.api.web.pages import (
    audit,
    billing,
    environments,
    fleet,
    gpu,
    node,
    nodes,
    pools,
    projects,
    request_form,
    requests,
)

STATIC_PATH = f"{UI}/static"
# Each page module has a `router`; those with a `NAV` entry (key, label, href) are in the
# header's navigation, in this order; a `NAV_ROLES` (a set of roles) shows the entry to
# those roles only — say which the API grants the page's action (the page still checks).
# request_form comes before requests: /requests/new is not a request's code.
PAGES = [fleet, environments, projects, nodes, node, gpu, request_form, requests, pools,
         audit]
PAGES += [billing]  # issue 16's chargeback (docs/dashboard.md, "Billing")


def install(app) -> None:
    """Every page, the redirect to sign in, and the assets: nothing from another host."""
    app.include_router(signin.router)
    for page in PAGES:
        app.include_router(page.router)
    templates.env.globals["nav"] = [page.NAV for page in PAGES if hasattr(page, "NAV")]
    templates.env.globals["nav_roles"] = nav_roles(PAGES)
    app.add_exception_handler(SignInRequired, _sign_in_first)
    app.mount(STATIC_PATH, StaticFiles(directory=HERE / "static"), name="web-static")


def nav_roles(pages) -> dict[str, frozenset[str]]:
    """Navigation key → the roles that see the entry, for pages that restrict it (the
    others' entries are shown to every signed-in role)."""
    return {page.NAV[0]: frozenset(page.NAV_ROLES) for page in pages
            if hasattr(page, "NAV") and hasattr(page, "NAV_ROLES")}


async def _sign_in_first(request: Request, exc: SignInRequired):
    return to_login(exc.next_url)
