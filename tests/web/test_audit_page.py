"""The Audit page through real HTTP: the events equal GET /api/v1/audit-events for the same
filters and cursor, its links page as the API does, and only the roles the API lets read
the audit log see it (docs/dashboard.md, "Audit")."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from itertools import pairwise

import pytest
from sqlalchemy import delete

from gpufleet.settings import Settings
from gpufleet.store.tables import AuditEvent
from tests.web.test_sessions import sign_in

PAGE_SIZE = 3


@pytest.fixture
def settings(tmp_path) -> Settings:
    """Pages of three events, so a handful of changes spans several pages."""
    return Settings(data_dir=tmp_path / "data", page_size_default=PAGE_SIZE)


class _Events(HTMLParser):
    """Each row's event id, the pager's links by `rel`, the navigation's labels."""

    def __init__(self):
        super().__init__()
        self.ids: list[int] = []
        self.rel: dict[str, str] = {}
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-event-id" in a:
            self.ids.append(int(a["data-event-id"]))
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
            if a.get("rel"):
                self.rel[a["rel"]] = a["href"]


def events(client, path: str) -> _Events:
    page = client.get(path)
    assert page.status_code == 200, page.text
    parsed = _Events()
    parsed.feed(page.text)
    return parsed


def api_ids(api, **params) -> tuple[list[int], str | None]:
    reply = api.get("/api/v1/audit-events", params=params)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    return [e["id"] for e in body["items"]], body["next_cursor"]


@pytest.fixture
def changes(api):
    """Seven projects and a user: eight changes in the audit log (and the bootstrap's)."""
    for i in range(7):
        assert api.post("/api/v1/projects",
                        json={"name": f"p{i}", "organisation": "research"}).status_code == 201
    assert api.post("/api/v1/users", json={"name": "mia", "role": "member"}).status_code == 201


def token(api, role: str) -> str:
    """A token of `role` (a member's belongs to the user mia, as the API requires)."""
    owner = {"user": "mia"} if role == "member" else {"role": role}
    reply = api.post("/api/v1/tokens", json={"name": f"a-{role}"} | owner)
    assert reply.status_code == 201, reply.text
    return reply.json()["token"]


def test_each_page_equals_the_api_and_the_links_page_back_and_forth(client, api, admin_token,
                                                                   changes):
    sign_in(client, admin_token)
    pages, cursor = [], None
    while True:  # follow "Older events" to the end, checking each page against the API
        path = pages[-1].rel["next"] if pages else "/ui/audit?subject_kind=project"
        page = events(client, html.unescape(path))
        ids, cursor = api_ids(api, subject_kind="project",
                              **({"cursor": cursor} if cursor else {}))
        assert page.ids == ids and len(ids) <= PAGE_SIZE
        pages.append(page)
        if cursor is None:
            assert "next" not in page.rel
            break
        assert "subject_kind=project" in page.rel["next"]  # the filters are kept
    assert len(pages) == 3 and sum(len(p.ids) for p in pages) == 7
    assert "prev" not in pages[0].rel
    for newer, older in pairwise(pages):
        assert events(client, html.unescape(older.rel["prev"])).ids == newer.ids


def test_the_events_equal_the_api_for_a_subject_and_an_action(client, api, admin_token,
                                                              changes):
    sign_in(client, admin_token)
    for params in ({"subject_kind": "project", "subject": "p3"}, {"action": "user.created"}):
        query = "&".join(f"{k}={v}" for k, v in params.items())
        page = events(client, f"/ui/audit?{query}")
        ids, _ = api_ids(api, **params)
        assert page.ids == ids and len(ids) == 1
        assert f"/api/v1/audit-events?{query}" in page.links


def test_each_event_shows_when_who_and_its_details(client, api, admin_token, changes):
    sign_in(client, admin_token)
    event = api.get("/api/v1/audit-events", params={"action": "user.created"}).json()["items"][0]
    text = client.get("/ui/audit?action=user.created").text
    assert f'<time datetime="{event["at"].replace("Z", "+00:00")}"' in text
    assert event["actor"] in text
    for key in event["details"]:
        assert f"<dt>{key}</dt>" in text
    assert "/ui/audit?subject_kind=user&amp;subject=mia" in text  # the subject's history


@pytest.mark.parametrize("role", ["admin", "operator"])
def test_roles_that_may_read_the_audit_log_see_it_in_the_navigation(client, api, role,
                                                                   changes):
    sign_in(client, token(api, role))
    page = client.get("/ui/audit")
    assert page.status_code == 200
    assert re.search(r'<nav aria-label="Pages">.*href="/ui/audit"', page.text, re.DOTALL)


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_other_roles_get_the_apis_403_and_no_navigation_entry(client, api, role, changes):
    raw = token(api, role)
    assert api.as_(raw).get("/api/v1/audit-events").status_code == 403
    sign_in(client, raw)
    page = client.get("/ui/audit")
    assert page.status_code == 403
    assert re.search(r'role="alert">[^<]*may not read the audit log', page.text)
    assert 'data-event-id' not in page.text
    assert 'href="/ui/audit"' not in client.get("/ui/").text


@pytest.mark.parametrize(("query", "named"), [("subject_kind=banana", "subject kind"),
                                              ("cursor=not-a-cursor", "cursor"),
                                              ("cursor=WzFd&subject_kind=gpu&back=x", None)])
def test_bad_input_is_a_400_that_names_it(client, admin_token, query, named):
    sign_in(client, admin_token)
    page = client.get(f"/ui/audit?{query}")
    if named is None:  # a well-formed cursor: a page (empty here), not an error
        assert page.status_code == 200
        return
    assert page.status_code == 400
    assert re.search(rf'role="alert">[^<]*{named}', page.text)


def test_empty_results_say_what_to_do(client, admin_token, changes):
    sign_in(client, admin_token)
    text = client.get("/ui/audit?subject=nobody").text
    assert "No event matches these filters" in text and "gpufleet audit ls" in text


def test_signed_out_it_asks_to_sign_in_and_comes_back(client):
    reply = client.get("/ui/audit?action=user.created", follow_redirects=False)
    assert reply.status_code == 303
    assert reply.headers["location"].startswith("/ui/login?next=%2Fui%2Faudit")


def test_an_empty_log_says_which_commands_make_changes(client, gf, admin_token):
    sign_in(client, admin_token)
    with gf.store.write() as session:  # the bootstrap's token is the log's one event
        session.execute(delete(AuditEvent))
    text = client.get("/ui/audit").text
    assert "The audit log is empty" in text and "gpufleet audit ls" in text
    assert "data-event-id" not in text
