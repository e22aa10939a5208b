"""Every HTML page the server serves works air-gapped: nothing it references, and nothing the
stylesheets it loads reference, lives on another host (docs/design.md, "Interfaces")."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

from fastapi.routing import APIRoute
from starlette.routing import Mount

SERVER = "http://testserver"
ABSOLUTE_URL = re.compile(r"""(?:https?:)?//[^\s"'<>()]+""")
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]+)""")


class _References(HTMLParser):
    """The src and href attributes of a page: what a browser would load or follow."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.found += [value for name, value in attrs if name in ("src", "href") and value]


def _html_pages(app) -> list[str]:
    """Every parameterless GET route that is not under /api/v1 (those answer JSON)."""
    return sorted(route.path for route in app.routes
                  if getattr(route, "methods", None) and "GET" in route.methods
                  and "{" not in route.path and not route.path.startswith("/api/"))


def _foreign(url: str) -> bool:
    """An absolute or protocol-relative URL naming another host (`data:` and relative
    references stay on the page or the server)."""
    if not url.startswith(("http://", "https://", "//")):
        return False
    return urlsplit(url).netloc not in ("", "testserver")


def test_every_html_page_and_its_assets_stay_on_the_server(client):
    pages = _html_pages(client.app)
    assert "/docs" in pages and "/redoc" in pages
    html_seen = []
    for path in pages:
        response = client.get(path)
        if "text/html" not in response.headers.get("content-type", ""):
            continue
        html_seen.append(path)
        assert response.status_code == 200, path
        text = response.text
        outside = [u for u in ABSOLUTE_URL.findall(text) if _foreign(u)]
        assert outside == [], f"{path} references other hosts: {outside}"
        parser = _References()
        parser.feed(text)
        for reference in parser.found:
            asset = client.get(urljoin(SERVER + path, reference))
            assert asset.status_code == 200, f"{path} -> {reference}: {asset.status_code}"
            if reference.endswith(".css"):
                remote = [u for u in CSS_URL.findall(asset.text) if _foreign(u)]
                assert remote == [], f"{reference} loads from other hosts: {remote}"
    assert {"/docs", "/redoc"} <= set(html_seen)


def test_the_docs_assets_are_served_without_a_token(client):
    mounts = [r.path for r in client.app.routes if isinstance(r, Mount)]
    assert mounts, "the docs' assets are mounted on the server"
    assert not any(isinstance(r, APIRoute) and r.path.startswith(mounts[0])
                   for r in client.app.routes)
    page = client.get("/docs").text
    assert f"{mounts[0]}/swagger-ui-bundle.js" in page
    assert client.get(f"{mounts[0]}/swagger-ui-bundle.js").status_code == 200
