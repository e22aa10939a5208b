"""The pages beyond Fleet and Node, in Chromium: GPU (charts), Requests (preview and create
as a member, approve as an operator), Pools, Environment and Project, Audit — and what a
person would see wrong on them: a chart drawn empty, stretched axis text, a date wrapped.

Selectors are the generic ones a person uses — headings, labels,
buttons by name, `svg[role=img]` — so markup choices do not break them.
"""

from __future__ import annotations

import re

import httpx

from tests.e2e.conftest import open_page, screenshot, sign_in

CODE = re.compile(r"/ui/requests/(?!new\b)([^/?#]+)(?:[?#]|$)")


def _heading(page) -> str:
    return page.get_by_role("heading", level=1).inner_text()


def _api_status(server, token: str, path: str) -> int:
    return httpx.get(f"{server.url}{path}", timeout=30,
                     headers={"Authorization": f"Bearer {token}"}).status_code


def test_the_gpu_page_draws_its_charts(new_page, server):
    page = sign_in(new_page(), server.world.admin)
    response = open_page(page, f"/ui/gpus/{server.world.busy_gpu}?range=6h")
    assert response.status == 200
    charts = page.locator("svg[role=img]")
    charts.first.wait_for()
    drawn = page.locator("svg[role=img] :is(path, polyline)")
    assert drawn.count() >= 1, "no chart has a line"
    # A metric without samples is a line of text, never an empty frame.
    frames = charts.evaluate_all("els => els.map(e => e.querySelectorAll('polyline').length)")
    assert 0 not in frames, frames
    assert page.get_by_text("no samples in this window").count() >= 1
    _assert_axes_in_page_font(page)
    history = page.locator("#bindings a[href^='/ui/requests/']")
    assert history.count() >= 1, "allocation codes in the history are not links"
    screenshot(page, "gpu")
    dark = sign_in(new_page("dark"), server.world.admin)
    open_page(dark, f"/ui/gpus/{server.world.busy_gpu}?range=6h")
    dark.locator("svg[role=img]").first.wait_for()
    screenshot(dark, "gpu-dark")


def _assert_axes_in_page_font(page) -> None:
    """The axis labels are the page's text, not text inside the stretched plot."""
    assert page.locator("svg.chart text").count() == 0
    fonts = page.locator("figure.chart .x-axis time").evaluate_all(
        "els => els.map(e => getComputedStyle(e).fontFamily)")
    body = page.evaluate("() => getComputedStyle(document.body).fontFamily")
    assert fonts and set(fonts) == {body}, (fonts, body)


def test_a_member_opens_another_projects_gpu_as_the_api_answers(new_page, server):
    world = server.world
    page = sign_in(new_page(), world.member)
    response = open_page(page, f"/ui/gpus/{world.idle_gpu}")
    assert response.status == _api_status(server, world.member, f"/api/v1/gpus/{world.idle_gpu}")
    assert world.other_project not in page.locator("main").inner_text()


def test_a_member_requests_and_an_operator_approves(new_page, server):
    world = server.world
    member = sign_in(new_page(), world.member)
    open_page(member, "/ui/requests/new")
    member.get_by_label("Project").fill(world.member_project)
    member.get_by_label("Count").fill("1")
    member.get_by_label("Models").fill("H100-80GB")
    member.get_by_role("button", name="Preview").click()
    member.locator("#preview").wait_for()
    assert "Preview" in member.get_by_role("heading", level=2).first.inner_text()
    screenshot(member, "request-new")
    member.get_by_role("button", name="Submit").click()
    member.wait_for_url(CODE)
    code = CODE.search(member.url).group(1)
    assert member.get_by_role("button", name="Approve").count() == 0
    screenshot(member, "request-pending")
    csrf = member.locator("input[name=csrf_token]").first.get_attribute("value")
    forged = member.request.post(f"/ui/requests/{code}/approve", max_redirects=0,
                                 form={"csrf_token": csrf, "do": "approve"})
    assert forged.status == 403, forged.status
    assert server.api(world.admin, f"/api/v1/requests/{code}")["state"] == "pending"

    operator = sign_in(new_page(), world.operator, f"/ui/requests/{code}")
    operator.get_by_role("button", name="Approve").click()
    operator.wait_for_url(re.compile(rf"/ui/requests/{code}\?"))
    operator.get_by_text("active").first.wait_for()
    assert server.api(world.admin, f"/api/v1/requests/{code}")["state"] == "active"
    screenshot(operator, "request-approved")


def test_a_members_request_list_holds_only_their_projects(new_page, server):
    world = server.world
    page = sign_in(new_page(), world.member)
    open_page(page, "/ui/requests")
    page.get_by_role("table").first.wait_for()
    text = page.locator("main").inner_text()
    assert world.member_project in text and world.other_project not in text
    screenshot(page, "requests")


def test_the_environment_page(new_page, server):
    page = sign_in(new_page(), server.world.admin)
    response = open_page(page, "/ui/environments/onprem-hpc")
    assert response.status == 200 and "onprem-hpc" in _heading(page)
    assert page.locator(".breadcrumb").inner_text().endswith("onprem-hpc")
    _assert_axes_in_page_font(page)
    screenshot(page, "environment")
    open_page(page, "/ui/environments")
    screenshot(page, "environments")


def test_a_member_sees_their_project_page_and_not_anothers(new_page, server):
    world = server.world
    page = sign_in(new_page(), world.member)
    response = open_page(page, f"/ui/projects/{world.member_project}")
    assert response.status == 200 and world.member_project in _heading(page)
    assert page.locator(".breadcrumb").inner_text().endswith(world.member_project)
    screenshot(page, "project")
    response = page.goto(f"/ui/projects/{world.other_project}")
    assert response.status in (403, 404), response.status
    assert world.idle_gpu not in page.content()
    open_page(page, "/ui/projects")
    assert world.other_project not in page.locator("main").inner_text()
    screenshot(page, "projects")


def test_the_audit_page_as_the_api_allows(new_page, server):
    world = server.world
    admin = sign_in(new_page(), world.admin)
    response = open_page(admin, "/ui/audit")
    assert response.status == 200
    admin.get_by_role("table").first.wait_for()
    # Each time on one line: a wrapped inline element has more than one box.
    lines = admin.locator("td time").evaluate_all("els => els.map(e => e.getClientRects().length)")
    assert lines and set(lines) == {1}, lines
    shown = admin.locator("td time").first.inner_text()  # localised, still to the second
    assert re.search(r"\d:\d\d:\d\d", shown), shown
    screenshot(admin, "audit", full_page=False)
    member = sign_in(new_page(), world.member)
    response = member.goto("/ui/audit")
    assert response.status == _api_status(server, world.member, "/api/v1/audit-events")


def test_pools_an_operator_decides_and_a_member_only_sees(new_page, server):
    world = server.world
    operator = sign_in(new_page(), world.operator)
    assert open_page(operator, f"/ui/pools?project={world.member_project}").status == 200
    assert operator.get_by_role("button", name="Approve").count() >= 1
    screenshot(operator, "pools")
    member = sign_in(new_page(), world.member)
    assert open_page(member, f"/ui/pools?project={world.member_project}").status == 200
    assert member.locator("#pools tr[data-code]").count() == 1  # vision's pending pool
    assert member.get_by_role("button", name="Approve").count() == 0


def test_the_billing_page_as_an_admin_and_a_member(new_page, server):
    world = server.world
    admin = sign_in(new_page(), world.admin)
    response = open_page(admin, "/ui/billing")
    assert response.status == 200 and _heading(admin) == "Billing"
    table = admin.locator("#statement-table").inner_text()
    assert world.member_project in table and world.other_project in table
    assert "EUR" in table
    assert admin.locator("svg[role=img].bars").count() == 1  # cost by project
    screenshot(admin, "billing")
    member = sign_in(new_page(), world.member)
    open_page(member, "/ui/billing")
    text = member.locator("#statement-table").inner_text()
    assert world.member_project in text and world.other_project not in text
