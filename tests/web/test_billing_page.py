"""The Billing page through real HTTP (docs/dashboard.md, "Billing"): every figure of the
statement equals the JSON of the API link the section shows, for a month and a window,
rolled up and grouped; the CSV link answers the same rows; a member sees only their
projects; no rate card says so and still shows GPU-hours; bad input is a 400 page naming
it — on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.billing_world import grant, statement_world
from tests.helpers import create_environment, register
from tests.web.test_environment_project_pages import _Page
from tests.web.test_sessions import sign_in

HOURS = ("allocated_gpu_hours", "charged_gpu_hours", "active_gpu_hours", "idle_gpu_hours",
         "unknown_gpu_hours", "efficiency_percent")
MONEY = ("cost", "idle_cost", "total_cost")


class _BillingPage(_Page):
    """The shared page parser (`<data id value>` figures, links), plus the statement's
    rows in the page's order (`data-key`)."""

    def handle_starttag(self, tag, attrs):
        super().handle_starttag(tag, attrs)
        a = dict(attrs)
        if tag == "tr" and "data-key" in a:
            self.rows.setdefault("key", []).append(a["data-key"])


def page(client, path: str, status: int = 200) -> tuple[_BillingPage, str]:
    response = client.get(path)
    assert response.status_code == status, response.text
    parsed = _BillingPage()
    parsed.feed(response.text)
    return parsed, response.text


@pytest.fixture
def world(api, gf, clock):
    return statement_world(api, gf, clock)


def statement_link(parsed) -> str:
    links = [link for link in parsed.links if link.startswith("/api/v1/billing/statements")
             and "format=csv" not in link]
    assert len(links) == 1, parsed.links
    return links[0]


def assert_figures_equal(parsed, prefix: str, totals: dict) -> None:
    """Each figure the page shows for a row equals the JSON's; a null is shown as "—"
    (no `<data>` for it)."""
    for name in HOURS + MONEY:
        value = totals[name]
        if value is None:
            assert f"{prefix}/{name}" not in parsed.data, name
        else:
            assert parsed.data[f"{prefix}/{name}"] == pytest.approx(float(value)), name


def assert_page_equals_api(parsed, view: dict) -> None:
    assert parsed.rows.get("key", []) == [r["key"] or "" for r in sorted(
        view["rows"], key=lambda r: (-float(r["totals"]["total_cost"] or -1),
                                     -r["totals"]["charged_gpu_hours"],
                                     -r["totals"]["allocated_gpu_hours"], r["key"] or ""))]
    for row in view["rows"]:
        assert_figures_equal(parsed, f"bill/{row['key'] or ''}", row["totals"])
        for group in row["groups"] or []:
            assert_figures_equal(parsed, f"bill/{row['key'] or ''}/{group['group'] or ''}",
                                 group["totals"])
    assert_figures_equal(parsed, "bill-total", view["total"])


def test_this_months_statement_equals_the_api(client, api, admin_token, world, clock):
    sign_in(client, admin_token)
    parsed, html = page(client, "/ui/billing")
    link = statement_link(parsed)
    month = world["t0"].strftime("%Y-%m")
    assert parse_qs(urlsplit(link).query) == {"month": [month]}
    view = api.get(link).json()
    assert view["total"]["cost"] == "20.00"  # the hand-worked world: 16 + 4 EUR
    assert_page_equals_api(parsed, view)
    assert parsed.rows["key"] == ["vision", "speech", "ledger"]  # costliest first
    assert "16.00 EUR" in html and "4.00 EUR" in html  # speech's idle cost too
    assert parsed.data["bill/speech/idle_cost"] == 4.0
    for name in ("vision", "speech", "ledger"):
        assert f"/ui/projects/{name}" in parsed.links
    assert 'class="bars"' in html and "Cost by project" in html


@pytest.mark.parametrize("query", ["by=department&group=model", "by=organisation",
                                   "group=flavour", "project=speech"])
def test_roll_ups_groups_and_one_project_equal_the_api(client, api, admin_token, world,
                                                       query):
    sign_in(client, admin_token)
    parsed, _ = page(client, f"/ui/billing?{query}")
    link = statement_link(parsed)
    for pair in query.split("&"):
        assert pair in link
    assert_page_equals_api(parsed, api.get(link).json())


def test_a_window_equals_the_api(client, api, admin_token, world):
    sign_in(client, admin_token)
    start, end = world["t0"], world["t0"] + timedelta(hours=2)
    parsed, _ = page(client, f"/ui/billing?start={start.strftime('%Y-%m-%dT%H:%M')}"
                             f"&end={end.strftime('%Y-%m-%dT%H:%M')}")
    view = api.get(statement_link(parsed)).json()
    assert view["total"]["allocated_gpu_hours"] == pytest.approx(4)  # two GPUs, two hours
    assert_page_equals_api(parsed, view)


def test_the_csv_and_api_links_answer(client, admin_token, world):
    sign_in(client, admin_token)  # the session's cookie: the links open in the browser
    parsed, _ = page(client, "/ui/billing?group=model")
    csv_link = next(link for link in parsed.links if "format=csv" in link)
    response = client.get(csv_link)
    assert response.status_code == 200 and response.headers["content-type"].startswith(
        "text/csv")
    lines = list(csv.DictReader(io.StringIO(response.text)))
    by_key = {(line["key"], line["group"]): line["cost"] for line in lines}
    assert by_key[("vision", "H100-80GB")] == "16.00"
    for link in [link for link in parsed.links if link.startswith("/api/v1/")]:
        assert client.get(link).status_code == 200, link


def test_the_rate_card_in_force_and_its_history(client, api, admin_token, world, clock):
    set_from = clock.now() - timedelta(hours=1)
    response = api.post("/api/v1/billing/rates", json={
        "flavour": "H100-80GB", "price_per_unit_hour": "2.50", "currency": "EUR",
        "effective_from": set_from.isoformat()})
    assert response.status_code == 201, response.text
    sign_in(client, admin_token)
    _, html = page(client, "/ui/billing")
    in_force, _, history = html.partition('id="rates-history"')
    assert "2.50 EUR" in in_force and "2.00 EUR" not in in_force.split('id="rates"')[1]
    assert "<summary>History: 1 ended rate</summary>" in html and "2.00 EUR" in history


def test_a_member_sees_only_their_projects(client, world):
    member = world["member"]
    sign_in(client, member.token)
    parsed, html = page(client, "/ui/billing")
    view = member.get(statement_link(parsed)).json()
    assert [r["key"] for r in view["rows"]] == ["vision"]
    assert parsed.rows["key"] == ["vision"]
    assert_page_equals_api(parsed, view)
    assert "speech" not in html and parsed.data["bill-total/cost"] == 16.0
    _, refused = page(client, "/ui/billing?project=speech", 404)
    assert "speech" in refused and 'role="alert"' in refused


def test_no_rate_card_says_so_and_shows_gpu_hours(client, api, admin_token, gf, clock):
    create_environment(api)
    register(api, 1, gpus=2)
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    grant(gf, "vision")
    clock.advance(3 * 3600)
    sign_in(client, admin_token)
    parsed, html = page(client, "/ui/billing")
    view = api.get(statement_link(parsed)).json()
    assert view["currency"] is None
    assert_page_equals_api(parsed, view)
    assert parsed.data["bill/vision/allocated_gpu_hours"] == pytest.approx(3)
    assert 'id="no-rate-card"' in html and 'id="no-rates"' in html
    assert "gpufleet billing rates set" in html
    assert "bill/vision/cost" not in parsed.data and 'class="bars"' not in html


@pytest.mark.parametrize(("query", "named"), [
    ("month=2026-13", "month '2026-13'"), ("month=banana", "month 'banana'"),
    ("by=team", "'team'"), ("group=colour", "'colour'"), ("start=yesterday", "'yesterday'"),
    ("start=2026-11-02T10:00&end=2026-11-02T09:00", "before it starts")])
def test_bad_input_is_a_400_page_naming_it(client, admin_token, world, query, named):
    sign_in(client, admin_token)
    _, html = page(client, f"/ui/billing?{query}", 400)
    assert named in html.replace("&#39;", "'") and 'role="alert"' in html


def test_the_navigation_names_the_page_and_signed_out_goes_to_sign_in(client, admin_token):
    response = client.get("/ui/billing?month=2026-11", follow_redirects=False)
    assert response.status_code == 303 and "next=%2Fui%2Fbilling" in response.headers[
        "location"]
    sign_in(client, admin_token)
    parsed, _ = page(client, "/ui/")
    assert "/ui/billing" in parsed.links


def test_month_links_step_back_and_not_into_the_future(client, admin_token, world):
    sign_in(client, admin_token)
    parsed, _ = page(client, "/ui/billing?by=organisation")
    assert "/ui/billing?month=2026-10&by=organisation" in parsed.links
    assert not any("month=2026-12" in link for link in parsed.links)  # not begun yet
    earlier, _ = page(client, "/ui/billing?month=2026-01")
    assert {"/ui/billing?month=2025-12", "/ui/billing?month=2026-02"} <= set(earlier.links)
    for link in ("/ui/billing?month=2025-12", "/ui/billing?month=2026-10"):
        page(client, link)  # each answers 200


def test_the_project_page_says_this_months_cost(client, api, admin_token, gf, world):
    sign_in(client, admin_token)
    # Not counted yet: the page does not wait for a month's statement, it says so ...
    parsed, html = page(client, "/ui/projects/speech")
    assert "being counted" in html and "cost-total_cost" not in parsed.data
    assert "/ui/billing?project=speech" in parsed.links
    gf.billing.warm_asked_windows()  # ... and the upkeep loop's round counts it
    parsed, html = page(client, "/ui/projects/speech")
    link = next(link for link in parsed.links if link.startswith("/api/v1/billing/"))
    month = world["t0"].strftime("%Y-%m")
    assert parse_qs(urlsplit(link).query) == {"month": [month], "project": ["speech"]}
    total = api.get(link).json()["total"]
    assert parsed.data["cost-total_cost"] == float(total["total_cost"]) == 4.0
    assert parsed.data["cost-idle_cost"] == float(total["idle_cost"]) == 4.0
    assert "/ui/billing?project=speech" in parsed.links and "4.00 EUR" in html
    billing, _ = page(client, "/ui/billing?project=speech")
    assert billing.rows["key"] == ["speech"]


def test_the_project_page_without_a_rate_card_says_hours(client, api, admin_token, gf,
                                                         clock):
    create_environment(api)
    register(api, 1, gpus=1)
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    grant(gf, "vision")
    clock.advance(2 * 3600)
    sign_in(client, admin_token)
    page(client, "/ui/billing")  # the Billing page counts the month; the line reuses it
    parsed, html = page(client, "/ui/projects/vision")
    assert parsed.data["cost-charged_gpu_hours"] == pytest.approx(2)
    assert "no rate card" in html and "cost-total_cost" not in parsed.data


def test_a_window_with_a_zone_is_asked_in_utc(client, admin_token, world):
    sign_in(client, admin_token)
    parsed, html = page(client, "/ui/billing?start=2026-11-02T11:00%2B02:00"
                                "&end=2026-11-02T12:00Z")
    asked = parse_qs(urlsplit(statement_link(parsed)).query)
    assert asked == {"start": ["2026-11-02T09:00:00Z"], "end": ["2026-11-02T12:00:00Z"]}
    assert 'value="2026-11-02T09:00"' in html  # the form's field, in UTC as labelled


def test_the_project_page_counts_nothing_itself(client, admin_token, gf, world, clock):
    """A stale month is not recounted by the Project page (seconds at 100,000 bindings):
    it says so until the upkeep has counted it again."""
    sign_in(client, admin_token)
    gf.billing.warm_asked_windows()
    page(client, "/ui/projects/vision")
    kept = dict(gf.billing._open)
    clock.advance(3600)  # past the open month's reuse (RECENT_S)
    _, html = page(client, "/ui/projects/vision")
    assert "being counted" in html and gf.billing._open == kept  # nothing computed
    gf.billing.warm_asked_windows()
    parsed, _ = page(client, "/ui/projects/vision")
    assert parsed.data["cost-total_cost"] == pytest.approx(16 + 2 + 2)  # 2 GPUs, one more hour


def test_a_members_project_page_shows_their_cost(client, gf, world):
    member = world["member"]
    sign_in(client, member.token)
    page(client, "/ui/projects/vision")
    gf.billing.warm_asked_windows()  # the member's own view of the month, counted
    parsed, _ = page(client, "/ui/projects/vision")
    link = next(link for link in parsed.links if link.startswith("/api/v1/billing/"))
    total = member.get(link).json()["total"]
    assert parsed.data["cost-total_cost"] == float(total["total_cost"]) == 16.0
