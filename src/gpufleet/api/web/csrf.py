"""CSRF checks for the dashboard's forms: every POST carries a token in a hidden field.

After login the token is the session's own; the login form (no session yet) uses a
double-submit token: a random value in a SameSite=Strict cookie and in the form."""

from __future__ import annotations

import hmac

from gpufleet.domain.errors import Forbidden

FIELD_NAME = "csrf_token"
LOGIN_COOKIE_NAME = "gf_login_csrf"


def check(expected: str | None, submitted: str | None) -> None:
    """403 `csrf_failed` unless the form's token equals the expected one."""
    if not expected or not submitted or not hmac.compare_digest(expected, submitted):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page and "
                        "submit again", code="csrf_failed")
