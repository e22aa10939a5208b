"""The Fleet page through real HTTP: its figures equal the API's JSON for the same window,
and the API's role model scopes it (docs/dashboard.md, "Fleet")."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from tests.services.telemetry.test_queries import fleet  # noqa: F401 (a fixture)
from tests.web.test_sessions import sign_in

FUNNEL_KEYS = ("total_gpu_hours", "allocated_gpu_hours", "active_gpu_hours",
               "effective_gpu_hours", "efficiency_percent")


class _Figures(HTMLParser):
    """`<data id value>` figures, the matrix's project columns and every link."""

    def __init__(self):
        super().__init__()
        self.data: dict[str, float] = {}
        self.projects: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "data":
            self.data[a["id"]] = float(a["value"])
        if tag == "th" and "data-project" in a:
            self.projects.append(a["data-project"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])


def figures(client, path: str = "/ui/") -> _Figures:
    page = client.get(path)
    assert page.status_code == 200, page.text
    parsed = _Figures()
    parsed.feed(page.text)
    return parsed


@pytest.mark.parametrize("window", ["24h", "1h"])
def test_the_funnel_equals_the_api_for_the_same_window(client, api, admin_token, fleet,  # noqa: F811
                                                       window):
    sign_in(client, admin_token)
    page = figures(client, f"/ui/?window={window}")
    api_fleet = api.get("/api/v1/telemetry/funnel", params={"window": window}).json()["fleet"]
    assert api_fleet["allocated_gpu_hours"] > 0
    for key in FUNNEL_KEYS:
        assert page.data[f"funnel-{key}"] == pytest.approx(api_fleet[key]), key
    assert f"/api/v1/telemetry/funnel?window={window}" in page.links


def test_an_admin_sees_every_project_and_a_member_only_theirs(client, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    assert figures(client).projects == ["speech", "vision"]
    client.cookies.clear()
    sign_in(client, fleet["member"].token)
    member = figures(client)
    assert member.projects == ["vision"]
    assert "funnel-total_gpu_hours" not in member.data  # the API's null for members


def test_each_section_links_the_api_call_behind_it(client, api, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    api_links = [link for link in figures(client).links if link.startswith("/api/v1/")]
    assert len(api_links) >= 6
    for link in api_links:
        assert api.get(link).status_code == 200, link


def test_an_empty_fleet_says_what_to_do(client, admin_token):
    sign_in(client, admin_token)
    text = client.get("/ui/").text
    assert "No GPUs yet" in text and "No alert is firing" in text
    assert "No project held a GPU" in text


def test_a_bad_window_is_a_400_that_names_it(client, admin_token):
    sign_in(client, admin_token)
    page = client.get("/ui/?window=banana")
    assert page.status_code == 400
    assert re.search(r'role="alert">[^<]*window', page.text)
