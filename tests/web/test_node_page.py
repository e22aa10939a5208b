"""The Nodes and Node pages through real HTTP: the list is the API's page by page, the Node
page's GPUs, processes, MIG layouts and XIDs equal the API's JSON, a member sees only what
the API shows them, and only operators get (and may use) the node's buttons
(docs/dashboard.md, "Nodes", "Node")."""

from __future__ import annotations

import re
from datetime import timedelta
from html.parser import HTMLParser

import pytest

from gpufleet.api.web.mig_layout import SLICE_W
from gpufleet.api.web.pages import nodes as nodes_page
from gpufleet.tsdb import Sample, series
from tests.helpers import gpu_uuid, register
from tests.services.telemetry.test_queries import ATTRS, fleet, migs  # noqa: F401 (fixtures)
from tests.web.test_sessions import csrf_of, sign_in


class _Page(HTMLParser):
    """Links, the rows of each table by id (cell texts), and the MIG drawings' shapes."""

    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.rows: dict[str, list[list[str]]] = {}
        self.rects: list[dict[str, str]] = []
        self.svg_titles: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._in_title = False
        self._stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.rows[self._table] = []
        if tag == "tr" and self._table:
            self.rows[self._table].append([])
        if tag == "td" and self._table:
            self._cell = []
        if tag == "rect":
            self.rects.append(a)
        if tag == "title" and "svg" in self._stack:
            self._in_title = True
            self.svg_titles.append("")
        self._stack.append(tag)

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        if tag == "td" and self._cell is not None and self._table:
            self.rows[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        if tag == "title":
            self._in_title = False
        if self._stack and self._stack[-1] == tag:
            self._stack.pop()

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_title:
            self.svg_titles[-1] += data

    def body(self, table: str) -> list[list[str]]:
        return [row for row in self.rows.get(table, []) if row]


def page(client, path: str, status: int = 200) -> tuple[_Page, str]:
    response = client.get(path)
    assert response.status_code == status, response.text
    parsed = _Page()
    parsed.feed(response.text)
    return parsed, response.text


# --- the node list -------------------------------------------------------------------------

def test_the_node_list_is_the_apis_pages_in_order(client, api, admin_token, monkeypatch):
    from tests.helpers import create_environment
    create_environment(api)
    for n in (1, 2, 3):
        register(api, n, gpus=n)
    monkeypatch.setattr(nodes_page, "NODES_PER_PAGE", 2)
    sign_in(client, admin_token)
    first, _ = page(client, "/ui/nodes")
    expected = api.get("/api/v1/nodes", params={"limit": 2}).json()
    assert [r[0] for r in first.body("node-list")] == [n["name"] for n in expected["items"]]
    assert [r[3] for r in first.body("node-list")] == [f"{n['gpus']} GPUs"
                                                        for n in expected["items"]]
    assert "/api/v1/nodes?limit=2" in first.links
    following = next(link for link in first.links if "cursor=" in link)
    second, _ = page(client, following)
    rest = api.get("/api/v1/nodes", params={"limit": 2,
                                            "cursor": expected["next_cursor"]}).json()
    assert [r[0] for r in second.body("node-list")] == [n["name"] for n in rest["items"]]
    assert "/ui/nodes/node-1" in first.links


def test_the_node_list_filters_as_the_api_does(client, api, admin_token, fleet):  # noqa: F811
    api.post("/api/v1/nodes/node-1/cordon", json={"reason": "maintenance"})
    sign_in(client, admin_token)
    cordoned, _ = page(client, "/ui/nodes?status=cordoned&environment=onprem-hpc")
    assert [r[0] for r in cordoned.body("node-list")] == ["node-1"]
    assert "/api/v1/nodes?environment=onprem-hpc&status=cordoned&limit=50" in cordoned.links
    _, text = page(client, "/ui/nodes?status=ready")
    assert "No node matches these filters" in text
    assert api.get("/api/v1/nodes", params={"status": "ready"}).json()["items"] == []


@pytest.mark.parametrize("query, named", [("status=sleeping", "sleeping"),
                                          ("cursor=not-a-cursor", "cursor")])
def test_bad_filters_are_a_400_naming_them(client, admin_token, query, named):
    sign_in(client, admin_token)
    _, text = page(client, f"/ui/nodes?{query}", 400)
    assert named in text and "Traceback" not in text


def test_an_empty_fleet_says_how_to_add_nodes(client, admin_token):
    sign_in(client, admin_token)
    _, text = page(client, "/ui/nodes")
    assert "No nodes yet" in text and "gpufleet token join" in text


# --- the node page --------------------------------------------------------------------------

def test_gpus_and_processes_equal_the_api(client, api, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    parsed, _ = page(client, "/ui/nodes/node-1")
    detail = api.get("/api/v1/nodes/node-1").json()
    assert [r[1] for r in parsed.body("gpus")] == [g["uuid"] for g in detail["gpu_list"]]
    for g in detail["gpu_list"]:
        assert f"/ui/gpus/{g['uuid']}" in parsed.links
    latest = api.get("/api/v1/telemetry/latest", params={"node": "node-1"}).json()["items"]
    expected = sorted((p["pid"], p["claim"]) for u in latest for p in u["processes"])
    assert expected == [(101, "matches"), (202, "mismatch"), (303, "unbound")]
    shown = sorted((int(r[1]), r[7].split(":")[0]) for r in parsed.body("processes"))
    assert shown == [(pid, claim if claim != "matches" else "matches")
                     for pid, claim in expected]
    rows = {int(r[1]): r for r in parsed.body("processes")}
    assert rows[101][3] == "30.0 GiB" and rows[101][5] == fleet["vision"]
    assert rows[202][5] == fleet["vision"] and rows[202][6] == fleet["speech"]
    assert f"/ui/requests/{fleet['vision']}" in parsed.links
    assert "/api/v1/telemetry/latest?node=node-1&limit=1000" in parsed.links


def test_a_member_sees_only_what_the_api_shows_them(client, api, fleet):  # noqa: F811
    member = fleet["member"]
    sign_in(client, member.token)
    parsed, text = page(client, "/ui/nodes/node-1")
    latest = member.get("/api/v1/telemetry/latest", params={"node": "node-1"}).json()["items"]
    assert sorted(int(r[1]) for r in parsed.body("processes")) == sorted(
        p["pid"] for u in latest for p in u["processes"]) == [101]
    assert fleet["speech"] not in text  # another project's allocation
    assert fleet["vision"] in text
    assert 'action="/ui/nodes/node-1/cordon"' not in text  # no buttons for a member


def test_mig_layouts_are_drawn_to_scale_and_labelled(client, api, admin_token, migs):  # noqa: F811
    sign_in(client, admin_token)
    parsed, text = page(client, "/ui/nodes/node-7")
    latest = api.get("/api/v1/telemetry/latest", params={"node": "node-7"}).json()["items"]
    holder = {u["mig_uuid"]: [c["allocation"] for c in u["charged_to"]] for u in latest}
    detail = api.get("/api/v1/nodes/node-7").json()
    assert text.count('<svg class="mig"') == 2 and 'role="img"' in text
    slices = [r for r in parsed.rects if r.get("class") == "mig-slice"]
    assert len(slices) == 16  # two GPUs of 8 memory slices each
    instances = [r for r in parsed.rects if "class" not in r]
    for gpu, rect in zip(detail["gpu_list"], instances, strict=True):
        (m,) = gpu["mig_instances"]
        assert int(rect["x"]) == m["placement_start"] * SLICE_W + 2
        assert int(rect["width"]) == m["placement_size"] * SLICE_W - 4
        (code,) = holder[m["mig_uuid"]]
        assert any(m["mig_uuid"] in t and code in t for t in parsed.svg_titles)
        assert f"/ui/requests/{code}" in parsed.links
    assert "No GPU on this node is in MIG mode" not in text
    units = {r[0] for r in parsed.body("processes")}
    assert units == {"GPU 0 · 1g.10gb slices 0–0", "GPU 1 · 1g.10gb slices 0–0"}


def test_a_member_never_sees_another_projects_instance_as_free(client, api, migs):  # noqa: F811
    api.post("/api/v1/users", json={"name": "bob", "role": "member"})
    token = api.post("/api/v1/tokens", json={"name": "bob", "user": "bob"}).json()["token"]
    sign_in(client, token)
    parsed, text = page(client, "/ui/nodes/node-7")
    held = [u["charged_to"] for u in api.get("/api/v1/telemetry/latest",
                                               params={"node": "node-7"}).json()["items"]]
    codes = {c["allocation"] for charges in held for c in charges}
    assert codes and not any(code in text for code in codes)
    assert parsed.svg_titles and all(t.endswith("· —") for t in parsed.svg_titles
                                     if "MIG-" in t)
    assert "free" not in " ".join(parsed.svg_titles)


def test_a_node_without_mig_or_processes_says_so(client, api, admin_token):
    from tests.helpers import create_environment
    create_environment(api)
    register(api, 5, gpus=1)
    sign_in(client, admin_token)
    _, text = page(client, "/ui/nodes/node-5")
    assert "No GPU on this node is in MIG mode" in text
    assert "No process is using a GPU of this node now" in text
    assert "Every GPU on this node is healthy" in text
    assert "No XID counter rose in the last 24 hours" in text


def test_recent_xids_equal_the_apis_query(client, api, admin_token, gf, clock,
                                          fleet):  # noqa: F811
    at = clock.now() + timedelta(seconds=10)
    gf.telemetry.write([Sample(series("gpu.xid_errors_total", gpu_uuid(1, 0), None,
                                      labels={"xid": "79"}, **ATTRS),
                               at + timedelta(minutes=m), float(m)) for m in range(4)])
    clock.advance(600)
    gf.telemetry.rollup(clock.now())
    sign_in(client, admin_token)
    parsed, _ = page(client, "/ui/nodes/node-1")
    link = next(link for link in parsed.links if "gpu.xid_errors_total" in link)
    result = api.get(link).json()
    total = sum(v for s in result["series"] if s["labels"]["xid"] == "79"
                for _, v in s["points"] if v)
    assert total > 0
    (row,) = parsed.body("xids")
    assert row[1] == "79" and row[2] == f"{total:g} errors"


def test_a_codes_first_xid_shows_on_the_page_and_the_api(client, api, admin_token, gf, clock,
                                                         fleet):  # noqa: F811
    """A GPU's first XID 79 (its counter is born at 1) arrives mid-window: 1 error, on
    the API and the page (the page said nothing before: the increase alone misses it)."""
    at = clock.now() + timedelta(minutes=20, seconds=10)
    gf.telemetry.write([Sample(series("gpu.xid_errors_total", gpu_uuid(1, 2), None,
                                      labels={"xid": "79"}, **ATTRS),
                               at + timedelta(minutes=m), 1.0) for m in range(30)])
    clock.advance(3600)
    gf.telemetry.rollup(clock.now())
    result = api.get("/api/v1/telemetry/query", params={
        "metric": "gpu.xid_errors_total", "since": "24h", "step": "1h",
        "by": "gpu_uuid,xid", "filter": "node=node-1"}).json()
    assert [(s["labels"]["gpu_uuid"], s["labels"]["xid"], [v for _, v in s["points"] if v])
            for s in result["series"]] == [(gpu_uuid(1, 2), "79", [1.0])]
    sign_in(client, admin_token)
    parsed, text = page(client, "/ui/nodes/node-1")
    (row,) = parsed.body("xids")
    assert row[1:3] == ["79", "1 error"]
    assert "No XID counter rose" not in text


def test_an_unknown_node_is_a_404_naming_it(client, admin_token):
    sign_in(client, admin_token)
    _, text = page(client, "/ui/nodes/no-such-node", 404)
    assert "no-such-node" in text and "/ui/nodes" in text


# --- the node's buttons -----------------------------------------------------------------------

def _status(api, name: str = "node-1") -> str:
    return api.get(f"/api/v1/nodes/{name}").json()["status"]


def test_an_operator_cordons_and_uncordons_with_the_buttons(client, api, admin_token,
                                                            fleet):  # noqa: F811
    sign_in(client, admin_token)
    _, text = page(client, "/ui/nodes/node-1")
    assert 'action="/ui/nodes/node-1/cordon"' in text and "/retire" in text
    token = csrf_of(text)
    done = client.post("/ui/nodes/node-1/cordon", data={"csrf_token": token, "reason": "fan"},
                       follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].endswith("?done=cordon")
    assert _status(api) == "cordoned"
    _, text = page(client, done.headers["location"])
    assert "Node cordoned" in text and 'action="/ui/nodes/node-1/uncordon"' in text
    client.post("/ui/nodes/node-1/uncordon", data={"csrf_token": token})
    assert _status(api) == "ready"


def test_retiring_needs_the_confirmation(client, api, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    token = csrf_of(client.get("/ui/nodes/node-1").text)
    refused = client.post("/ui/nodes/node-1/retire", data={"csrf_token": token})
    assert refused.status_code == 400 and "confirmation" in refused.text
    assert _status(api) == "ready"


def test_without_the_csrf_token_nothing_changes(client, api, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    for data in ({}, {"csrf_token": "forged"}):
        refused = client.post("/ui/nodes/node-1/cordon", data=data)
        assert refused.status_code == 403 and "CSRF" in refused.text
    assert _status(api) == "ready"


def test_the_server_refuses_a_member_the_action(client, api, fleet):  # noqa: F811
    sign_in(client, fleet["member"].token)
    token = csrf_of(client.get("/ui/nodes/node-1").text)
    refused = client.post("/ui/nodes/node-1/cordon", data={"csrf_token": token})
    assert refused.status_code == 403 and "may not" in refused.text
    assert _status(api) == "ready"


def test_an_unknown_action_is_refused(client, admin_token, fleet):  # noqa: F811
    sign_in(client, admin_token)
    token = csrf_of(client.get("/ui/nodes/node-1").text)
    refused = client.post("/ui/nodes/node-1/explode", data={"csrf_token": token})
    assert refused.status_code == 400 and "explode" in refused.text
    assert re.search(r"cordon, uncordon, retire", refused.text)
