"""The GPU page through real HTTP: its readings equal the API's JSON for the same window,
its allocation history equals the bindings listing, the API's role model scopes both, and
bad input is a 4xx naming it (docs/dashboard.md, "GPU")."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from html.parser import HTMLParser

import pytest

from gpufleet.api.web.pages.gpu_charts import GROUPS, MAX_POINTS
from gpufleet.services.access.principal import SYSTEM
from gpufleet.tsdb import Sample, series
from gpufleet.wire.requests import RequestCreate
from tests.helpers import gpu, gpu_uuid, join_token, registration
from tests.services.telemetry.test_queries import fleet  # noqa: F401 (a fixture)
from tests.web.test_sessions import sign_in


class _Page(HTMLParser):
    """`<data id value>` readings, each chart's links, binding rows, forms and links."""

    def __init__(self):
        super().__init__()
        self.data: dict[str, float] = {}
        self.chart_links: dict[str, list[str]] = {}
        self.bindings: list[str] = []
        self.links: list[str] = []
        self.form_methods: list[str] = []
        self._chart: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div" and a.get("class") == "gpu-chart":
            self._chart = a["id"].removeprefix("chart-")
            self.chart_links[self._chart] = []
        if tag == "data":
            self.data[a["id"]] = float(a["value"])
        if tag == "tr" and "data-allocation" in a:
            self.bindings.append(a["data-allocation"])
        if tag == "form":
            self.form_methods.append(a.get("method", "get"))
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
            if self._chart and a["href"].startswith("/api/v1/telemetry/query"):
                self.chart_links[self._chart].append(a["href"])


def page_of(client, path: str, status: int = 200):
    response = client.get(path)
    assert response.status_code == status, response.text
    parsed = _Page()
    parsed.feed(response.text)
    return response, parsed


def own_points(api, link: str) -> list:
    answer = api.get(link)
    assert answer.status_code == 200, link
    return next((s["points"] for s in answer.json()["series"]
                 if s["labels"]["mig_uuid"] is None), [])


@pytest.mark.parametrize("range_", ["1h", "6h", "7d"])
def test_each_reading_equals_the_api_for_the_same_range(client, api, admin_token,
                                                        fleet, range_):  # noqa: F811
    sign_in(client, admin_token)
    _, page = page_of(client, f"/ui/gpus/{fleet['busy']}?range={range_}")
    compared = 0
    for group in GROUPS:
        links = page.chart_links[group.key]
        assert len(links) == len(group.lines)
        for index, (line, link) in enumerate(zip(group.lines, links, strict=True)):
            assert f"metric={line.metric}" in link and f"since={range_}" in link
            points = own_points(api, link)
            assert len(points) <= MAX_POINTS
            reading = page.data.get(f"latest-{group.key}-{index}")
            if not points:
                assert reading is None, line.metric
                continue
            assert reading == pytest.approx(points[-1][1] / group.scale), line.metric
            compared += 1
    assert compared == 3  # gr_engine_active, sm_active, memory used (GiB) in the fixture
    assert page.data["latest-memory-0"] == pytest.approx(40.0)


@pytest.mark.parametrize(("range_", "step_s"), [("1h", 60), ("6h", 120), ("24h", 300),
                                               ("7d", 2400), ("30d", 10800)])
def test_each_range_asks_for_at_most_300_points(client, api, admin_token, fleet,  # noqa: F811
                                                range_, step_s):
    sign_in(client, admin_token)
    _, page = page_of(client, f"/ui/gpus/{fleet['busy']}?range={range_}")
    link = page.chart_links["sm"][0]
    assert f"step={step_s}s" in link
    answer = api.get(link).json()
    assert answer["step_s"] == step_s
    span = (datetime.fromisoformat(answer["end"]) - datetime.fromisoformat(answer["start"]))
    assert span.total_seconds() / step_s <= MAX_POINTS


def test_the_allocation_history_equals_the_bindings_listing(client, api, admin_token, gf,
                                                            fleet):  # noqa: F811
    gf.lifecycle.release(SYSTEM, fleet["vision"], "done")
    again = gf.lifecycle.approve(SYSTEM, gf.lifecycle.create_request(SYSTEM, RequestCreate(
        project="speech", count=1, models=["H100-80GB"])).code, None)
    sign_in(client, admin_token)
    held = again.units[0].gpu_uuid
    _, page = page_of(client, f"/ui/gpus/{held}")
    listing = api.get(f"/api/v1/gpus/{held}/bindings").json()["items"]
    assert page.bindings == [b["allocation"] for b in listing]
    assert len(listing) >= 1 and listing[0]["ended_at"] is None
    assert f"/api/v1/gpus/{held}/bindings?limit=50" in page.links
    pages, cursor = [], None  # the listing pages through each binding once
    while True:
        one = api.get(f"/api/v1/gpus/{held}/bindings",
                      params={"limit": 1, **({"cursor": cursor} if cursor else {})}).json()
        pages += [b["allocation"] for b in one["items"]]
        if (cursor := one["next_cursor"]) is None:
            break
    assert pages == page.bindings and len(pages) >= 2, pages
    _, busy = page_of(client, f"/ui/gpus/{fleet['busy']}")
    ended = api.get(f"/api/v1/gpus/{fleet['busy']}/bindings").json()["items"]
    assert fleet["vision"] in busy.bindings
    assert next(b for b in ended if b["allocation"] == fleet["vision"])["ended_at"]


def test_a_member_sees_their_projects_only(client, api, admin_token, fleet):  # noqa: F811
    sign_in(client, fleet["member"].token)
    response, own = page_of(client, f"/ui/gpus/{fleet['busy']}?range=6h")
    assert own.bindings == [fleet["vision"]]
    assert own.data["latest-sm-0"] == pytest.approx(60.0)
    assert "only for the time your projects held it" in response.text
    response, other = page_of(client, f"/ui/gpus/{fleet['idle']}?range=6h")
    assert other.bindings == [] and fleet["speech"] not in response.text
    assert "None of your projects has held this GPU" in response.text
    assert "speech" not in response.text
    assert not any(key.startswith("latest-") for key in other.data)  # speech's time
    for link in other.chart_links["memory"]:  # the API agrees: nothing of speech's
        assert own_points(fleet["member"], link) == []
    assert fleet["member"].get(f"/api/v1/gpus/{fleet['idle']}/bindings").json()["items"] == []
    assert own_points(api, other.chart_links["memory"][0])  # an admin sees speech's


@pytest.mark.parametrize("role", ["admin", "member"])
def test_the_page_has_no_action_for_anyone(client, admin_token, fleet, role):  # noqa: F811
    """Nothing on the GPU page changes anything: its only form is the range (a GET)."""
    sign_in(client, admin_token if role == "admin" else fleet["member"].token)
    _, page = page_of(client, f"/ui/gpus/{fleet['busy']}")
    assert page.form_methods == ["post", "get"]  # sign out, then the range form


@pytest.mark.parametrize(("query", "status", "named"), [
    ("range=banana", 400, "range"),
    ("range=0h", 400, "range"),
    ("start=yesterday", 400, "start"),
    ("start=2026-11-02T12:00Z&end=2026-11-02T10:00Z", 400, "start must be before end"),
    ("end=2026-11-02T10:00Z", 400, "end needs a start"),
])
def test_bad_input_is_a_4xx_that_names_it(client, admin_token, fleet,  # noqa: F811
                                          query, status, named):
    sign_in(client, admin_token)
    response = client.get(f"/ui/gpus/{fleet['busy']}?{query}")
    assert response.status_code == status
    assert re.search(rf'role="alert">[^<]*{re.escape(named)}', response.text)


def test_an_unknown_gpu_is_a_404_naming_it(client, admin_token):
    sign_in(client, admin_token)
    response = client.get("/ui/gpus/GPU-nope")
    assert response.status_code == 404
    assert 'role="alert">GPU &#39;GPU-nope&#39; does not exist' in response.text


def test_a_range_longer_than_a_chart_spans_shows_what_it_can(client, api, admin_token,
                                                             fleet):  # noqa: F811
    sign_in(client, admin_token)
    response, page = page_of(client, f"/ui/gpus/{fleet['busy']}?range=90d")
    assert "A chart spans at most 30 days" in response.text
    assert "one point every 3 h." in response.text
    assert "data-refresh-s" in response.text
    link = page.chart_links["sm"][0]
    assert "start=" in link and api.get(link).status_code == 200
    response, _ = page_of(client, f"/ui/gpus/{fleet['busy']}?start=2025-01-01T00:00Z"
                                  "&end=2025-01-02T00:00Z")
    assert "keeps 400 days of hourly data" in response.text
    assert "No telemetry for this GPU in this window" in response.text


def test_live_refresh_only_for_a_range_back_from_now(client, admin_token,
                                                     fleet):  # noqa: F811
    sign_in(client, admin_token)
    text = client.get(f"/ui/gpus/{fleet['busy']}?range=1h").text
    assert '<main id="main" data-refresh-s="30">' in text
    for live in ("gpu-identity", "gpu-charts", "gpu-bindings"):
        assert f'id="{live}" data-live' in text
    assert 'id="live-status"' in text
    fixed = client.get(f"/ui/gpus/{fleet['busy']}?start=2026-11-02T09:00Z"
                       "&end=2026-11-02T10:00Z").text
    assert "data-refresh-s" not in fixed
    # the form's datetime-local fields carry no zone: read as UTC, as their labels say
    naive = client.get(f"/ui/gpus/{fleet['busy']}?start=2026-11-02T09:00&end=2026-11-02T10:00")
    assert naive.status_code == 200 and 'datetime="2026-11-02T09:00:00+00:00"' in naive.text


def test_a_silent_unbound_gpu_says_what_to_do(client, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    text = client.get(f"/ui/gpus/{fleet['silent']}").text
    assert "No telemetry for this GPU in this window" in text and "gpufleet agent" in text
    assert "No allocation has held this GPU yet" in text
    assert '<a href="/ui/nodes/node-1">node-1</a>' in text


@pytest.fixture
def mig_gpu(api, gf, clock):
    """An H100 in MIG mode with two 1g.10gb instances, one bound, each reporting activity
    beside the GPU's own for an hour (and one instance of an earlier layout, once)."""
    api.post("/api/v1/environments", json={"name": "onprem-slicing", "kind": "onprem"})
    body = registration(7, gpus=0)
    body["gpus"] = [gpu(7, 0, mig_enabled=True, mig_instances=[
        {"profile_id": 19, "placement_start": 0, "mig_uuid": "MIG-a"},
        {"profile_id": 19, "placement_start": 1, "mig_uuid": "MIG-b"}])]
    response = api.as_(join_token(api, "onprem-slicing")).post("/api/v1/agent/register",
                                                                json=body)
    assert response.status_code == 200, response.text
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    view = gf.lifecycle.approve(SYSTEM, gf.lifecycle.create_request(SYSTEM, RequestCreate(
        project="vision", count=1, models=["H100-80GB"], mig_profile="1g.10gb")).code, None)
    uuid, start = gpu_uuid(7, 0), clock.now()
    attrs = {"node": "node-7", "environment": "onprem-slicing", "model": "H100-80GB"}
    gf.telemetry.write([
        Sample(series("gpu.gr_engine_active", uuid, mig, **attrs),
               start + timedelta(minutes=m, seconds=30), value)
        for m in range(60) for mig, value in ((None, 40.0), ("MIG-a", 70.0), ("MIG-b", 10.0))]
        + [Sample(series("gpu.gr_engine_active", uuid, "MIG-old", **attrs),
                  start + timedelta(seconds=30), 5.0)])  # an instance destroyed since
    clock.advance(3600)
    return {"uuid": uuid, "allocation": view.code}


def test_a_mig_gpu_shows_its_instances_and_their_activity(client, api, admin_token,
                                                          mig_gpu):
    sign_in(client, admin_token)
    response, page = page_of(client, f"/ui/gpus/{mig_gpu['uuid']}?range=1h")
    assert 'id="gpu-mig-mode">on: 2 instances' in response.text
    assert page.data["latest-activity-1"] == pytest.approx(40.0)  # the GPU's own series
    assert page.data["latest-mig_activity-0"] == pytest.approx(70.0)  # 1g.10gb @ 0
    assert page.data["latest-mig_activity-1"] == pytest.approx(10.0)
    assert "1g.10gb @ 0" in response.text and "MIG 1g.10gb @ slice" in response.text
    link = page.chart_links["mig_activity"][0]
    by_instance = {s["labels"]["mig_uuid"]: s["points"][-1][1]
                   for s in api.get(link).json()["series"]}
    assert by_instance == {None: 40.0, "MIG-a": 70.0, "MIG-b": 10.0, "MIG-old": 5.0}
    assert page.data["latest-mig_activity-2"] == 5.0 and "earlier instance MIG-old" in \
        response.text
    assert page.bindings == [mig_gpu["allocation"]]
