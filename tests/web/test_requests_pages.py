"""The Requests pages through real HTTP: the list, a request's detail and its buttons, the
New request form's preview and submit, pools and quotas — each equal to the API's JSON for
the same question, scoped by the API's role model (docs/dashboard.md, "Requests")."""

from __future__ import annotations

import re

import pytest

from tests.lifecycle_world import create
from tests.web.test_sessions import csrf_of, sign_in

ROW_CODE = re.compile(r'<tr data-code="((?:GR|POOL)-\d+)"')
RULE = re.compile(r'<tr data-rule="([a-z_]+)">.*?<code>([a-z_]+)</code>', re.S)


def as_viewer(client, who) -> None:
    client.cookies.clear()
    sign_in(client, who.token)


def page(client, path: str, expect: int = 200) -> str:
    response = client.get(path)
    assert response.status_code == expect, response.text
    return response.text


def post_form(client, path: str, data: dict, csrf_from: str | None = None, **kwargs):
    token = csrf_of(page(client, csrf_from)) if csrf_from else None
    fields = data | ({"csrf_token": token} if token else {})
    return client.post(path, data=fields, follow_redirects=False, **kwargs)


def table(html: str, table_id: str) -> str:
    start = html.index(f'id="{table_id}"')
    return html[start:html.index("</table>", start)]


def rules(html: str, table_id: str) -> list[tuple[str, str]]:
    return RULE.findall(table(html, table_id))


@pytest.fixture
def world(h100s, api):
    """vision's pending request (mia's), speech's active one; a viewer."""
    member, operator = h100s
    pending = create(member, count=2, models=["H100-80GB"], duration_hours=4)["code"]
    speech = create(api, project="speech", count=1, duration_hours=4)["code"]
    operator.post(f"/api/v1/requests/{speech}/approve")
    viewer = api.as_(api.post("/api/v1/tokens", json={"name": "vic", "role": "viewer"})
                     .json()["token"])
    return {"member": member, "operator": operator, "viewer": viewer, "pending": pending,
            "speech": speech}


def state_of(api, code: str) -> str:
    return api.get(f"/api/v1/requests/{code}").json()["state"]


def test_the_list_equals_the_api_and_a_member_sees_only_their_projects(client, api, world):
    sign_in(client, api.token)
    for params in ({}, {"state": "active"}, {"state": "pending", "project": "vision"}):
        query = "&".join(f"{k}={v}" for k, v in params.items())
        shown = ROW_CODE.findall(page(client, f"/ui/requests?{query}"))
        listed = [r["code"] for r in api.get("/api/v1/requests", params=params).json()["items"]]
        assert shown == listed and shown, params
    as_viewer(client, world["member"])
    html = page(client, "/ui/requests")
    assert ROW_CODE.findall(html) == [world["pending"]]
    assert world["speech"] not in html
    page(client, f"/ui/requests/{world['speech']}", 404)  # as the API: not found


def test_the_list_pages_by_the_apis_cursor(client, api, world):
    sign_in(client, api.token)
    first = page(client, "/ui/requests?limit=1")
    assert ROW_CODE.findall(first) == [world["speech"]]
    next_url = re.search(r'<a href="([^"]+)" rel="next">', first).group(1).replace("&amp;", "&")
    assert ROW_CODE.findall(page(client, next_url)) == [world["pending"]]


def test_bad_filters_and_unknown_codes_are_4xx_naming_them(client, api, world):
    sign_in(client, api.token)
    assert "state &#39;bogus&#39; is not a request state" in page(
        client, "/ui/requests?state=bogus", 400)
    assert "limit must be between" in page(client, "/ui/requests?limit=0", 400)
    assert "GR-999999" in page(client, "/ui/requests/GR-999999", 404)
    assert "no-such" in page(client, "/ui/requests/no-such", 404)


def test_the_detail_shows_the_apis_why_and_history(client, api, world):
    sign_in(client, api.token)
    code = world["speech"]
    html = page(client, f"/ui/requests/{code}")
    why = api.get(f"/api/v1/requests/{code}/why").json()
    assert f'<p id="why-summary">{why["summary"]}</p>' in html
    history = api.get(f"/api/v1/requests/{code}/history").json()["items"]
    assert re.findall(r"<code>(request\.[a-z]+)</code>", html) == [e["action"] for e in history]
    view = api.get(f"/api/v1/requests/{code}").json()
    assert view["units"][0]["gpu_uuid"] in html
    assert f"export GPUFLEET_ALLOCATION={code}" in html
    for link in (f"/api/v1/requests/{code}", f"/api/v1/requests/{code}/why"):
        assert f'href="{link}' in html and api.get(link).status_code == 200


def buttons(html: str) -> set[str]:
    return set(re.findall(r'name="do" value="([a-z]+)"', html))


def test_buttons_follow_the_role_and_the_state(client, api, world):
    pending, active = world["pending"], world["speech"]
    as_viewer(client, world["operator"])
    assert buttons(page(client, f"/ui/requests/{pending}")) == {
        "approve", "reject", "cancel", "extend"}
    assert buttons(page(client, f"/ui/requests/{active}")) == {"release", "extend"}
    as_viewer(client, world["member"])
    assert buttons(page(client, f"/ui/requests/{pending}")) == {"cancel", "extend"}
    as_viewer(client, world["viewer"])
    assert buttons(page(client, f"/ui/requests/{pending}")) == set()
    assert "New request" not in page(client, "/ui/requests")


def test_a_forged_approval_is_refused_by_the_server(client, api, world):
    code = world["pending"]
    as_viewer(client, world["member"])
    refused = post_form(client, f"/ui/requests/{code}/approve", {}, f"/ui/requests/{code}")
    assert refused.status_code == 403 and "may not approve requests" in refused.text
    assert state_of(api, code) == "pending"


def test_without_the_csrf_token_nothing_changes(client, api, world):
    code = world["pending"]
    as_viewer(client, world["operator"])
    refused = post_form(client, f"/ui/requests/{code}/approve", {"csrf_token": "wrong"})
    assert refused.status_code == 403 and "CSRF" in refused.text
    assert post_form(client, f"/ui/requests/{code}/reject", {}).status_code == 403
    assert state_of(api, code) == "pending"


def test_approve_release_and_extend_through_the_buttons(client, api, world):
    code = world["pending"]
    as_viewer(client, world["operator"])
    done = post_form(client, f"/ui/requests/{code}/approve", {"reason": "ok"},
                     f"/ui/requests/{code}")
    assert done.status_code == 303
    assert done.headers["location"] == f"/ui/requests/{code}?done=approve"
    assert "Done: " + code + " approved" in page(client, done.headers["location"])
    assert state_of(api, code) == "active"
    ends = api.get(f"/api/v1/requests/{code}").json()["ends_at"]
    bad = post_form(client, f"/ui/requests/{code}/extend", {"hours": "soon"},
                    f"/ui/requests/{code}")
    assert bad.status_code == 400 and "hours &#39;soon&#39;" in bad.text
    assert post_form(client, f"/ui/requests/{code}/extend", {"hours": "2"},
                     f"/ui/requests/{code}").status_code == 303
    assert api.get(f"/api/v1/requests/{code}").json()["ends_at"] > ends
    again = post_form(client, f"/ui/requests/{code}/approve", {}, f"/ui/requests/{code}")
    assert again.status_code == 409 and "cannot become approved" in again.text
    assert post_form(client, f"/ui/requests/{code}/release", {},
                     f"/ui/requests/{code}").status_code == 303
    assert state_of(api, code) == "released"
    assert post_form(client, f"/ui/requests/{code}/frobnicate", {},
                     f"/ui/requests/{code}").status_code == 404


def test_reject_with_a_reason(client, api, world):
    code = world["pending"]
    as_viewer(client, world["operator"])
    assert post_form(client, f"/ui/requests/{code}/reject", {"reason": "not now"},
                     f"/ui/requests/{code}").status_code == 303
    history = api.get(f"/api/v1/requests/{code}/history").json()["items"]
    assert history[-1]["action"] == "request.rejected" and history[-1]["reason"] == "not now"


FORM = {"project": "vision", "kind": "whole", "count": "3", "models": "H100-80GB",
        "same_node": "on", "duration_hours": "4", "reason": "training"}
API_BODY = {"project": "vision", "count": 3, "models": ["H100-80GB"], "same_node": True,
            "duration_hours": 4, "reason": "training"}


def test_preview_equals_the_apis_and_writes_nothing(client, api, world):
    as_viewer(client, world["member"])
    before = api.get("/api/v1/requests").json()["items"]
    shown = post_form(client, "/ui/requests/new", FORM | {"do": "preview"}, "/ui/requests/new")
    assert shown.status_code == 200, shown.text
    assert api.get("/api/v1/requests").json()["items"] == before
    preview = world["member"].post("/api/v1/requests/preview", json=API_BODY).json()
    assert rules(shown.text, "preview-admission") == [
        (v["rule"], v["code"]) for v in preview["admission"]]
    assert rules(shown.text, "preview-steps") == [
        (v["rule"], v["code"]) for v in preview["placement"]["steps"]]
    units = table(shown.text, "preview-units")
    assert all(u["gpu_uuid"] in units for u in preview["placement"]["units"])
    assert "it would be <strong>pending</strong>" in shown.text
    assert 'value="3"' in shown.text  # the form keeps what was typed


def test_submit_creates_it_as_the_api_does_and_shows_it(client, api, world):
    as_viewer(client, world["member"])
    created = post_form(client, "/ui/requests/new", FORM | {"do": "submit"}, "/ui/requests/new")
    assert created.status_code == 303
    code = created.headers["location"].split("/")[-1].split("?")[0]
    view = api.get(f"/api/v1/requests/{code}").json()
    assert (view["project"], view["count"], view["models"], view["same_node"],
            view["justification"], view["state"]) == (
        "vision", 3, ["H100-80GB"], True, "training", "pending")
    assert "Done: " + code + " created" in page(client, created.headers["location"])


def test_bad_forms_name_the_problem(client, api, world):
    as_viewer(client, world["member"])
    for change, status, words in [
            ({"count": "many"}, 422, "count"),
            ({"kind": "shared", "fraction": "2"}, 422, "fraction must be strictly between"),
            ({"project": "speech"}, 403, "not a member of project &#39;speech&#39;"),
            ({"project": "nope"}, 404, "nope"),
            ({"count": "99", "same_node": ""}, 400, "the fleet has 16 H100-80GB")]:
        for do in ("preview", "submit"):
            shown = post_form(client, "/ui/requests/new", FORM | change | {"do": do},
                              "/ui/requests/new")
            assert shown.status_code == status and words in shown.text, (change, shown.text)
            assert 'id="form-error"' in shown.text
    assert len(api.get("/api/v1/requests").json()["items"]) == 2
    assert post_form(client, "/ui/requests/new", FORM | {"do": "submit"}).status_code == 403
    as_viewer(client, world["viewer"])
    assert "may not request GPUs" in page(client, "/ui/requests/new", 403)


def test_an_empty_list_says_what_to_do(client, api):
    sign_in(client, api.token)
    html = page(client, "/ui/requests")
    assert "gpufleet request create" in html and 'href="/ui/requests/new"' in html
    assert "gpufleet pool request" in page(client, "/ui/pools")


def test_pools_and_quotas_equal_the_api_and_operators_decide(client, api, world):
    member, operator = world["member"], world["operator"]
    api.request("PUT", "/api/v1/projects/vision/quotas", json={"flavour": "H100-80GB",
                                                               "limit": 8})
    pool = member.post("/api/v1/pools", json={"project": "vision", "flavour": "H100-80GB",
                                              "count": 2}).json()["code"]
    as_viewer(client, member)
    html = page(client, "/ui/pools?project=vision")
    assert ROW_CODE.findall(html) == [pool] and f"/ui/pools/{pool}/approve" not in html
    quotas = member.get("/api/v1/projects/vision/quotas").json()["quotas"]
    shown = table(html, "quotas")
    for q in quotas:
        assert f'data-flavour="{q["flavour"]}"' in shown and f'value="{q["limit"]}"' in shown
    forged = post_form(client, f"/ui/pools/{pool}/approve", {}, "/ui/pools")
    assert forged.status_code == 403
    hidden = page(client, "/ui/pools?project=speech", 404)  # as the API: not found
    assert "project &#39;speech&#39; does not exist" in hidden
    as_viewer(client, operator)
    assert f"/ui/pools/{pool}/approve" in page(client, "/ui/pools")
    done = post_form(client, f"/ui/pools/{pool}/approve", {"reason": "ok"}, "/ui/pools")
    assert done.status_code == 303 and "done=approved" in done.headers["location"]
    assert api.get(f"/api/v1/pools/{pool}").json()["state"] == "active"
    assert "state &#39;open&#39; is not a pool state" in page(client, "/ui/pools?state=open", 400)


def test_a_pools_project_ends_it_with_the_end_button_and_its_csrf_token(client, api, world):
    member, operator, viewer = world["member"], world["operator"], world["viewer"]
    pool = member.post("/api/v1/pools", json={"project": "vision", "flavour": "H100-80GB",
                                              "count": 2}).json()["code"]
    operator.post(f"/api/v1/pools/{pool}/approve")
    as_viewer(client, viewer)  # sees the pool, may not end it
    assert f"/ui/pools/{pool}/end" not in page(client, "/ui/pools")
    as_viewer(client, member)
    assert f"/ui/pools/{pool}/end" in page(client, "/ui/pools?state=active")
    forged = post_form(client, f"/ui/pools/{pool}/end", {"reason": "done"})
    assert forged.status_code == 403
    assert api.get(f"/api/v1/pools/{pool}").json()["state"] == "active"
    done = post_form(client, f"/ui/pools/{pool}/end", {"reason": "done"}, "/ui/pools")
    assert done.status_code == 303 and "done=ended" in done.headers["location"]
    ended = api.get(f"/api/v1/pools/{pool}").json()
    assert (ended["state"], ended["ended_by"], ended["end_reason"]) == \
        ("ended", "user:mia", "done")
    html = page(client, "/ui/pools?state=ended")
    assert ROW_CODE.findall(html) == [pool] and f"/ui/pools/{pool}/end" not in html
    again = post_form(client, f"/ui/pools/{pool}/end", {}, "/ui/pools")
    assert again.status_code == 409 and "only an active pool can be ended" in again.text
