"""The dashboard works air-gapped: no page, stylesheet or script it serves names another host,
signed out or signed in on a populated fleet (docs/design.md, "Interfaces")."""

from __future__ import annotations

import re
from urllib.parse import urljoin

from tests.api.test_offline_pages import ABSOLUTE_URL, SERVER, _foreign, _References
from tests.services.telemetry.test_queries import fleet  # noqa: F401 (a fixture)
from tests.web.test_sessions import sign_in

PROTOCOL_RELATIVE = re.compile(r"""(?:src|href)\s*=\s*["']?//""", re.IGNORECASE)
SIGNED_OUT_PAGES = ("/", "/ui/login")
SIGNED_IN_PAGES = ("/ui/", "/ui/?window=1h", "/ui/nodes", "/ui/nodes/node-1", "/ui/requests",
                   "/ui/requests/new", "/ui/pools", "/ui/requests/GR-1001", "/ui/audit",
                   "/ui/environments", "/ui/environments/onprem-hpc", "/ui/projects",
                   "/ui/projects/vision",
                   "/ui/gpus/GPU-00000001-0000-4000-8000-000000000000?range=24h")
SIGNED_IN_PAGES += ("/ui/billing", "/ui/billing?group=model")  # no rate card in this fleet


def _check(client, path: str, fetched: set[str]) -> None:
    page = client.get(path)
    assert page.status_code == 200, path
    assert "text/html" in page.headers["content-type"]
    _no_other_host(path, page.text)
    parser = _References()
    parser.feed(page.text)
    for reference in parser.found:
        url = urljoin(SERVER + path, reference)
        if url in fetched or "/api/v1/" in url:
            continue  # the API links answer JSON, checked by tests/web/test_fleet_page.py
        fetched.add(url)
        asset = client.get(url)
        assert asset.status_code == 200, f"{path} -> {reference}"
        if reference.endswith((".css", ".js")):
            _no_other_host(reference, asset.text)


def _no_other_host(where: str, text: str) -> None:
    outside = [u for u in ABSOLUTE_URL.findall(text) if _foreign(u)]
    assert outside == [], f"{where} references other hosts: {outside}"
    assert not PROTOCOL_RELATIVE.search(text), f"{where} has a protocol-relative src/href"


def test_every_dashboard_page_and_asset_stays_on_the_server(client, admin_token,
                                                            fleet):  # noqa: F811
    fetched: set[str] = set()
    for path in SIGNED_OUT_PAGES:
        _check(client, path, fetched)
    sign_in(client, admin_token)
    for path in SIGNED_IN_PAGES:
        _check(client, path, fetched)
    assert any(u.endswith("dashboard.css") for u in fetched)
    assert any(u.endswith("local-time.js") for u in fetched)


def test_pages_allow_only_this_server_and_are_not_cached(client, admin_token):
    for path in ("/ui/login", "/ui/"):
        if path == "/ui/":
            sign_in(client, admin_token)
        headers = client.get(path).headers
        assert "default-src 'self'" in headers["content-security-policy"], path
        assert "frame-ancestors 'none'" in headers["content-security-policy"], path
        assert headers["cache-control"] == "no-store", path
