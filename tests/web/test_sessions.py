"""Dashboard sign-in through real HTTP: tokens, cookies, CSRF, logout, revocation
(docs/dashboard.md, "Sessions")."""

from __future__ import annotations

import re

import pytest

from gpufleet.api.web.csrf import LOGIN_COOKIE_NAME
from gpufleet.api.web.sessions import COOKIE_NAME

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    return CSRF_FIELD.search(html).group(1)


def sign_in(client, token: str, next_url: str | None = None):
    form = client.get("/ui/login")
    data = {"token": token, "csrf_token": csrf_of(form.text)}
    return client.post("/ui/login", data=data | ({"next": next_url} if next_url else {}),
                       follow_redirects=False)


def set_cookie_header(response, name: str) -> str:
    return next(h for h in response.headers.get_list("set-cookie") if h.startswith(f"{name}="))


def test_root_sends_the_browser_to_the_dashboard(client):
    response = client.get("/", follow_redirects=False)
    assert response.status_code == 307 and response.headers["location"] == "/ui/"
    assert client.get("/ui/", follow_redirects=False).headers["location"] == "/ui/login"


def test_a_good_token_signs_in_with_a_strict_httponly_cookie(client, admin_token):
    response = sign_in(client, admin_token)
    assert response.status_code == 303 and response.headers["location"] == "/ui/"
    cookie = set_cookie_header(response, COOKIE_NAME).lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/;" in cookie
    assert "secure" not in cookie  # plain http here
    assert admin_token not in cookie
    page = client.get("/ui/")
    assert page.status_code == 200 and "<h1>Fleet</h1>" in page.text


def test_the_cookie_is_secure_over_https(gf, admin_token):
    from fastapi.testclient import TestClient

    from gpufleet.api.app import create_app
    with TestClient(create_app(gf, background_loops=False),
                    base_url="https://testserver") as client:
        cookie = set_cookie_header(sign_in(client, admin_token), COOKIE_NAME).lower()
    assert "secure" in cookie


@pytest.mark.parametrize("token", ["", "gfa_not-a-real-token"])
def test_a_bad_token_is_refused_with_the_form_again(client, token):
    response = sign_in(client, token)
    assert response.status_code == 401
    assert 'role="alert"' in response.text and "<form" in response.text
    assert COOKIE_NAME not in response.cookies
    assert client.get("/ui/", follow_redirects=False).status_code == 303


@pytest.mark.parametrize("submitted", [None, "wrong"])
def test_login_without_the_right_csrf_token_is_403(client, admin_token, submitted):
    client.get("/ui/login")
    data = {"token": admin_token} | ({"csrf_token": submitted} if submitted else {})
    response = client.post("/ui/login", data=data, follow_redirects=False)
    assert response.status_code == 403
    assert COOKIE_NAME not in response.cookies


@pytest.mark.parametrize("submitted", [None, "wrong"])
def test_logout_without_the_right_csrf_token_is_403(client, admin_token, submitted):
    sign_in(client, admin_token)
    data = {"csrf_token": submitted} if submitted else {}
    assert client.post("/ui/logout", data=data, follow_redirects=False).status_code == 403
    assert client.get("/ui/").status_code == 200  # still signed in


def test_logout_ends_the_session(client, admin_token):
    sign_in(client, admin_token)
    session_id = client.cookies.get(COOKIE_NAME)
    page = client.get("/ui/")
    response = client.post("/ui/logout", data={"csrf_token": csrf_of(page.text)},
                           follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/ui/login"
    client.cookies.set(COOKIE_NAME, session_id, path="/")  # a copy kept elsewhere
    assert client.get("/ui/", follow_redirects=False).headers["location"] == "/ui/login"


def test_a_revoked_token_ends_its_session(client, api):
    issued = api.post("/api/v1/tokens", json={"name": "web", "role": "viewer"}).json()
    sign_in(client, issued["token"])
    assert client.get("/ui/", follow_redirects=False).status_code == 200
    revoked = api.post(f"/api/v1/tokens/{issued['id']}/revoke", json={})
    assert revoked.status_code == 200, revoked.text
    assert client.get("/ui/", follow_redirects=False).headers["location"] == "/ui/login"


def test_the_login_csrf_cookie_is_strict_and_httponly(client):
    cookie = set_cookie_header(client.get("/ui/login"), LOGIN_COOKIE_NAME).lower()
    assert "httponly" in cookie and "samesite=strict" in cookie


def test_signing_in_returns_to_the_page_asked_for(client, admin_token):
    asked = client.get("/ui/?window=2h", follow_redirects=False)
    assert asked.headers["location"] == "/ui/login?next=%2Fui%2F%3Fwindow%3D2h"
    form = client.get(asked.headers["location"])
    assert 'name="next" value="/ui/?window=2h"' in form.text
    assert sign_in(client, admin_token, "/ui/?window=2h").headers["location"] == "/ui/?window=2h"


@pytest.mark.parametrize("elsewhere", ["https://evil.example/", "//evil.example/ui/",
                                       "/ui/\\evil.example", "/api/v1/tokens"])
def test_signing_in_never_sends_the_browser_elsewhere(client, admin_token, elsewhere):
    assert sign_in(client, admin_token, elsewhere).headers["location"] == "/ui/"


def test_a_session_may_read_the_api_behind_a_page_but_never_write(client, admin_token):
    """The "API call behind it" links open in the browser; a write needs the header."""
    assert client.get("/api/v1/fleet/summary").status_code == 401
    sign_in(client, admin_token)
    assert client.get("/api/v1/fleet/summary").status_code == 200
    refused = client.post("/api/v1/users", json={"name": "csrf", "role": "admin"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "missing_token"


def test_a_members_session_reads_the_api_as_that_member(client, api):
    assert api.post("/api/v1/users", json={"name": "mo", "role": "member"}).status_code == 201
    issued = api.post("/api/v1/tokens", json={"name": "mo-web", "user": "mo"}).json()
    sign_in(client, issued["token"])
    assert client.get("/api/v1/tokens").status_code == 403
    assert client.get("/api/v1/fleet/summary").status_code == 200


def test_a_cookie_that_names_no_session_reads_nothing(client):
    client.cookies.set(COOKIE_NAME, "made-up", path="/")
    assert client.get("/api/v1/fleet/summary").status_code == 401
