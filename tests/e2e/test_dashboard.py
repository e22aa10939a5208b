"""The dashboard's pages on main, in Chromium against `gpufleet serve` (docs/dashboard.md):
sign-in through the form, the Fleet page's figures equal the API's, a member's view, the
keyboard, dark mode, a node's MIG layout, and no request to another host on any page."""

from __future__ import annotations

import re
from collections import deque
from urllib.parse import urljoin, urlsplit

import pytest

from tests.e2e.conftest import screenshot, sign_in

FUNNEL_KEYS = ("total_gpu_hours", "allocated_gpu_hours", "active_gpu_hours",
               "effective_gpu_hours", "efficiency_percent")
CRAWL_LIMIT = 60  # pages; the seeded fleet has far fewer


def funnel_figures(page) -> dict[str, float]:
    return page.locator("data[id^='funnel-']").evaluate_all(
        "els => Object.fromEntries(els.map(e => [e.id.slice(7), Number(e.value)]))")


def test_signing_in_through_the_form_lands_on_the_page_asked_for(new_page, server):
    page = new_page()
    page.goto("/ui/?window=1h")
    assert urlsplit(page.url).path == "/ui/login"
    page.get_by_label("API token").wait_for()
    screenshot(page, "login")
    page.get_by_label("API token").fill("gfa_not-a-token")
    page.get_by_label("API token").press("Enter")
    page.get_by_role("alert").wait_for()
    page.get_by_label("API token").fill(server.world.admin)
    page.get_by_label("API token").press("Enter")
    page.wait_for_url("**/ui/?window=1h")
    assert page.get_by_role("heading", level=1).count() == 1
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/ui/login**")


@pytest.mark.parametrize("window", ["24h", "1h"])
def test_the_fleet_funnel_equals_the_api(new_page, server, window):
    page = sign_in(new_page(), server.world.admin, f"/ui/?window={window}")
    # The page shows a funnel counted at most 90 s ago, up to the end its "to" time names
    # (docs/dashboard.md, "Fleet"): the API asked for that same end gives the same figures.
    end = page.locator("#funnel time").nth(1).get_attribute("datetime")
    shown = funnel_figures(page)
    api = server.api(server.world.admin, "/api/v1/telemetry/funnel", window=window,
                     end=end)["fleet"]
    assert api["allocated_gpu_hours"] > 0 and api["effective_gpu_hours"] > 0
    for key in FUNNEL_KEYS:
        assert shown[key] == pytest.approx(api[key], rel=1e-9, abs=1e-6), (key, end)
    api_link = page.get_by_role("link", name=f"/api/v1/telemetry/funnel?window={window}")
    assert api_link.count() >= 1 or page.locator(
        f"a[href='/api/v1/telemetry/funnel?window={window}']").count() >= 1
    if window == "24h":
        screenshot(page, "fleet")


def test_a_member_sees_only_their_projects(new_page, server):
    world = server.world
    admin = sign_in(new_page(), world.admin)
    columns = admin.locator("th[data-project]").evaluate_all(
        "els => els.map(e => e.dataset.project)")
    assert {world.member_project, world.other_project} <= set(columns)
    member = sign_in(new_page(), world.member)
    columns = member.locator("th[data-project]").evaluate_all(
        "els => els.map(e => e.dataset.project)")
    assert columns == [world.member_project]
    assert world.other_project not in member.locator("main").inner_text()
    assert member.locator("data#funnel-total_gpu_hours").count() == 0  # the API's null
    screenshot(member, "fleet-member")


def _focused(page) -> str:
    return page.evaluate(
        "() => { const e = document.activeElement;"
        " return `${e.tagName} ${(e.innerText || e.value || '').trim()}`; }")


def test_the_keyboard_reaches_the_skip_link_and_sign_out(new_page, server):
    page = sign_in(new_page(), server.world.operator)
    page.locator("body").focus()
    page.keyboard.press("Tab")
    assert _focused(page) == "A Skip to content"
    page.keyboard.press("Enter")
    # The fragment navigation lands after the key press returns: wait for it, do not race it.
    page.wait_for_function("() => location.hash === '#main'", timeout=5000)
    assert urlsplit(page.url).fragment == "main"
    page.locator("body").focus()
    for _ in range(30):
        page.keyboard.press("Tab")
        if _focused(page) == "BUTTON Sign out":
            break
    else:
        pytest.fail("Tab never reached the Sign out button")
    outline = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none", "no visible focus ring"


def _luminance(css_colour: str) -> float:
    r, g, b = (float(v) for v in re.findall(r"[\d.]+", css_colour)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_dark_mode_renders_dark(new_page, server):
    light = sign_in(new_page("light"), server.world.admin)
    dark = sign_in(new_page("dark"), server.world.admin)
    background = "() => getComputedStyle(document.body).backgroundColor"
    text = "() => getComputedStyle(document.body).color"
    assert _luminance(light.evaluate(background)) > 0.5
    assert _luminance(dark.evaluate(background)) < 0.5 < _luminance(dark.evaluate(text))
    screenshot(dark, "fleet-dark")
    # The keyboard's focus ring shows on the dark background too.
    dark.locator("body").focus()
    dark.keyboard.press("Tab")
    dark.keyboard.press("Tab")
    ring = dark.evaluate("() => { const s = getComputedStyle(document.activeElement);"
                         " return [s.outlineStyle, s.outlineColor, s.outlineWidth]; }")
    assert ring[0] != "none" and float(ring[2].removesuffix("px")) >= 2, ring
    assert _luminance(ring[1]) - _luminance(dark.evaluate(background)) > 0.4, ring
    screenshot(dark, "focus-dark", full_page=False)


def test_no_page_the_links_reach_asks_another_host(new_page, server):
    """Sign in, then follow every link on this server from the Fleet page (the API links
    open their JSON; sign-out is a form, not followed): each page and everything it loads
    comes from this server, and no page logs an error (a CSP refusal is one)."""
    page = sign_in(new_page(), server.world.admin)
    seen, queue = {"/ui/"}, deque(["/ui/"])
    while queue and len(seen) <= CRAWL_LIMIT:
        path = queue.popleft()
        if "format=csv" in path:  # a download (the Billing page's CSV): the browser
            # saves it rather than opening it, so fetch it with the page's session instead
            assert page.request.get(path).status == 200, path
            continue
        response = page.goto(path)
        html = "text/html" in response.headers.get("content-type", "")
        assert response.status == 200, f"{path}: {response.status}"
        if not html:
            continue
        for href in page.locator("a[href]").evaluate_all("els => els.map(e => e.href)"):
            parts = urlsplit(urljoin(page.url, href))
            if f"{parts.scheme}://{parts.netloc}" != server.url:
                pytest.fail(f"{path} links another host: {href}")
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            if target not in seen and (parts.path.startswith(("/ui/", "/api/v1/"))):
                seen.add(target)
                queue.append(target)
    assert any(p.startswith("/api/v1/") for p in seen)
    assert any(u.endswith("/ui/static/dashboard.css") for u in page.watch.requested)
    assert any(u.endswith("/ui/static/local-time.js") for u in page.watch.requested)


def test_the_node_page_draws_its_mig_layout(new_page, server):
    page = sign_in(new_page(), server.world.admin)
    response = page.goto(f"/ui/nodes/{server.world.mig_node}")
    assert response.status == 200
    assert server.world.mig_node in page.get_by_role("heading", level=1).inner_text()
    drawing = page.locator("svg[role=img]").first
    drawing.wait_for()
    assert drawing.bounding_box()["width"] > 100
    assert "MIG" in drawing.locator("title").first.text_content()
    screenshot(page, "node")


def test_a_member_does_not_see_another_projects_allocation_on_a_node(new_page, server):
    world = server.world
    admin = sign_in(new_page(), world.admin)
    admin.goto(f"/ui/nodes/{world.other_node}")
    assert world.other_allocation in admin.locator("main").inner_text()
    member = sign_in(new_page(), world.member)
    assert member.goto(f"/ui/nodes/{world.other_node}").status == 200
    text = member.locator("main").inner_text()
    assert world.other_allocation not in text and world.other_project not in text
    screenshot(member, "node-member")


def test_the_node_list_links_each_node(new_page, server):
    page = sign_in(new_page(), server.world.admin)
    assert page.goto("/ui/nodes").status == 200
    page.get_by_role("link", name=server.world.mig_node, exact=True).first.click()
    page.wait_for_url(f"**/ui/nodes/{server.world.mig_node}")
    page.go_back()
    screenshot(page, "nodes")


def test_the_watch_sees_a_page_reach_for_another_host(new_page, server):
    """The check above can fail: a stylesheet from another host, added by a script, is
    refused by the page's Content-Security-Policy, and the refusal reaches the watch."""
    page = new_page()
    page.goto("/ui/login")
    with page.expect_console_message(lambda m: "example.invalid" in m.text):
        page.evaluate("""() => { const l = document.createElement('link');
                                 l.rel = 'stylesheet';
                                 l.href = 'https://cdn.example.invalid/x.css';
                                 document.head.appendChild(l); }""")
    assert any("Content Security Policy" in e for e in page.watch.errors), page.watch.errors
    page.watch.errors.clear()  # seen: the test's own doing
    page.watch.foreign.clear()
