"""The Environments and Projects pages, one environment's and one project's, and the Fleet
page's trend and live refresh, through real HTTP: figures equal the API's JSON behind the
links, a member sees only their projects, bad input is a 4xx naming it, empty states say
what to do (docs/dashboard.md, "Environment", "Project", "Live refresh")."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from tests.services.telemetry.test_queries import HOURS, fleet  # noqa: F401 (a fixture)
from tests.web.test_sessions import sign_in

ENV = "onprem-hpc"
WINDOW = f"{HOURS}h"


class _Page(HTMLParser):
    """`<data id value>` figures, rows' data-* names, links, forms and live sections."""

    def __init__(self):
        super().__init__()
        self.data: dict[str, float] = {}
        self.rows: dict[str, list[str]] = {}
        self.links: list[str] = []
        self.forms: list[tuple[str, str]] = []
        self.live: list[str] = []
        self.main: dict = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "data" and "id" in a:
            self.data[a["id"]] = float(a["value"])
        for key in ("data-project", "data-environment", "data-allocation", "data-request",
                    "data-flavour"):
            if tag == "tr" and key in a:
                self.rows.setdefault(key[5:], []).append(a[key])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "form":
            self.forms.append((a.get("method", "get"), a.get("action", "")))
        if "data-live" in a:
            self.live.append(a.get("id"))
        if tag == "main":
            self.main = a


def page(client, path: str, status: int = 200) -> tuple[_Page, str]:
    response = client.get(path)
    assert response.status_code == status, response.text
    parsed = _Page()
    parsed.feed(response.text)
    return parsed, response.text


def funnel_link(parsed: _Page, by: str) -> str:
    return next(link for link in parsed.links
                if link.startswith(f"/api/v1/telemetry/funnel?by={by}&") and "step=" in link)


def assert_usage_equals(parsed: _Page, row: dict) -> None:
    assert row["allocated_gpu_hours"] > 0
    assert parsed.data["usage-allocated_gpu_hours"] == pytest.approx(row["allocated_gpu_hours"])
    assert parsed.data["usage-gpus_held"] == pytest.approx(row["allocated_gpu_hours"] / HOURS)
    assert parsed.data["usage-active_percent"] == pytest.approx(
        100 * row["active_gpu_hours"] / row["allocated_gpu_hours"])
    assert parsed.data["usage-efficiency_percent"] == pytest.approx(row["efficiency_percent"])
    assert parsed.data["usage-allocations"] == row["allocations"]
    assert parsed.data["usage-mean_held_hours"] == pytest.approx(
        row["allocation_held_hours"] / row["allocations"])


def test_an_environments_figures_equal_the_api(client, api, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    parsed, html = page(client, f"/ui/environments/{ENV}?window={WINDOW}")
    view = api.get(funnel_link(parsed, "environment")).json()
    row = next(r for r in view["rows"] if r["group"] == {"environment": ENV})
    assert_usage_equals(parsed, row)
    assert row["allocations"] == 2 and len(row["trend"]) == HOURS * 6  # 10-minute steps
    assert html.count('<polyline class="series') == 3  # held, active, effective
    assert parsed.data["environment-gpus"] == 4
    assert parsed.rows["project"] == ["speech", "vision"]
    assert parsed.rows["allocation"] == [fleet["speech"]]  # idle, holding memory
    assert "/ui/projects/vision?window=" + WINDOW in parsed.links


def test_a_projects_figures_equal_the_api(client, api, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    parsed, _ = page(client, f"/ui/projects/vision?window={WINDOW}")
    view = api.get(funnel_link(parsed, "project")).json()
    assert_usage_equals(parsed, next(r for r in view["rows"]
                                     if r["group"] == {"project": "vision"}))
    requests = api.get("/api/v1/requests", params={"project": "vision"}).json()["items"]
    assert parsed.rows["request"] == [r["code"] for r in requests] == [fleet["vision"]]
    assert parsed.rows["environment"] == [ENV]
    assert "allocation" not in parsed.rows  # vision's GPU is busy
    assert f"/ui/environments/{ENV}?window={WINDOW}" in parsed.links


@pytest.mark.parametrize("path", [f"/ui/environments/{ENV}", "/ui/projects/speech",
                                  "/ui/environments", "/ui/projects"])
def test_every_api_link_answers(client, api, admin_token, fleet, path):  # noqa: F811
    sign_in(client, admin_token)
    parsed, _ = page(client, path)
    links = [link for link in parsed.links if link.startswith("/api/v1/")]
    assert len(links) >= 2
    for link in links:
        assert api.get(link).status_code == 200, link


def test_a_member_sees_only_their_projects(client, api, fleet):  # noqa: F811
    sign_in(client, fleet["member"].token)
    assert fleet["member"].get("/api/v1/projects/speech").status_code == 404
    _, html = page(client, "/ui/projects/speech", 404)
    assert "speech" in html and "role=\"alert\"" in html
    env, _ = page(client, f"/ui/environments/{ENV}?window={WINDOW}")
    assert env.rows["project"] == ["vision"]
    assert "allocation" not in env.rows  # speech's idle allocation is not theirs
    assert env.data["usage-allocations"] == 1
    listed, _ = page(client, "/ui/projects")
    assert listed.rows["project"] == ["vision"]
    mine, _ = page(client, f"/ui/projects/vision?window={WINDOW}")
    view = fleet["member"].get(funnel_link(mine, "project")).json()
    assert_usage_equals(mine, view["rows"][0])


def test_the_lists_link_each_page_with_what_it_held(client, api, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    envs, _ = page(client, f"/ui/environments?window={WINDOW}")
    assert envs.rows["environment"] == [ENV]
    assert f"/ui/environments/{ENV}?window={WINDOW}" in envs.links
    projects, html = page(client, f"/ui/projects?window={WINDOW}")
    assert projects.rows["project"] == ["speech", "vision"]
    held = re.search(r'data-project="vision".*?<data value="([^"]+)"', html, re.S).group(1)
    assert float(held) == pytest.approx(1.0)  # one GPU all window


def test_these_pages_have_no_form_but_the_window_and_sign_out(client, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    for path in (f"/ui/environments/{ENV}", "/ui/projects/vision", "/ui/projects",
                 "/ui/environments"):
        parsed, _ = page(client, path)
        assert [f for f in parsed.forms if f[0] == "post"] == [("post", "/ui/logout")], path


@pytest.mark.parametrize(("path", "status", "named"), [
    ("/ui/environments/nowhere", 404, "nowhere"),
    ("/ui/projects/nobody", 404, "nobody"),
    (f"/ui/environments/{ENV}?window=banana", 400, "window"),
    ("/ui/projects/vision?window=0h", 400, "window"),
    ("/ui/environments?cursor=garbage", 400, "cursor"),
    ("/ui/projects?window=-1h", 400, "window"),
])
def test_bad_input_is_a_4xx_naming_it(client, admin_token, fleet, path, status, named):  # noqa: F811
    sign_in(client, admin_token)
    response = client.get(path)
    assert response.status_code == status, response.text
    assert re.search(rf'role="alert">[^<]*{named}', response.text, re.I), response.text


def test_empty_states_say_what_to_do(client, api, admin_token):
    sign_in(client, admin_token)
    assert "gpufleet environment create" in client.get("/ui/environments").text
    assert "gpufleet project create" in client.get("/ui/projects").text
    api.post("/api/v1/environments", json={"name": "empty-env", "kind": "onprem"})
    api.post("/api/v1/projects", json={"name": "quiet", "organisation": "research"})
    env = client.get("/ui/environments/empty-env").text
    assert "No GPUs here yet" in env and "gpufleet token join --environment empty-env" in env
    assert "No project held a GPU" in env and "No allocation here is idle" in env
    project = client.get("/ui/projects/quiet").text
    for said in ("held no GPU in this window", "No quota is set", "No pool",
                 "No request yet", "No allocation of this project is idle"):
        assert said in project, said


def test_the_fleet_page_charts_its_funnel_and_refreshes_live(
        client, api, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    parsed, html = page(client, f"/ui/?window={WINDOW}")
    assert parsed.main.get("data-refresh-s") == "60"
    assert 'id="live-status"' in html
    assert {"funnel", "trend", "capacity", "health", "alerts"} <= set(parsed.live)
    assert len(parsed.live) == len(set(parsed.live)) and None not in parsed.live
    view = api.get(next(link for link in parsed.links if "step=" in link)).json()
    trend = view["fleet"]["trend"]
    assert len(trend) == HOURS * 6  # 10-minute steps
    held = re.search(r'<desc id="chart-\d+-d">Held \(allocated\): last ([\d.]+) GPUs', html)
    last_gpus = trend[-1]["allocated_gpu_hours"] / (view["step_s"] / 3600)
    assert float(held.group(1)) == pytest.approx(last_gpus) == 2  # vision's and speech's
    assert f"/ui/environments/{ENV}?window={WINDOW}" in parsed.links
    assert f"/ui/projects/speech?window={WINDOW}" in parsed.links
