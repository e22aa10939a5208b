"""Every listing answers one paged shape, `{items, next_cursor}`, and pages with a cursor.

Projects, pools, tokens, users, environments and a request's history used to answer a bare
list, with no limit: a script had to know which listing was which, and a fleet of 1,000
nodes listed 1,000 node credentials in one reply.
"""

from __future__ import annotations

import pytest

from tests.helpers import create_environment, register
from tests.lifecycle_world import act, create


def every_page(api, path: str, key: str, **params) -> list:
    """Follow `next_cursor` one item at a time; the keys of every item, in order."""
    keys, cursor = [], None
    for _ in range(100):
        response = api.get(path, params={**params, "limit": 1,
                                         **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        page = response.json()
        assert set(page) == {"items", "next_cursor"}
        assert len(page["items"]) <= 1
        keys += [item[key] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return keys
    raise AssertionError(f"{path} did not end")


def one_page(api, path: str, **params) -> dict:
    response = api.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def listed(h100s, api):
    """Three environments, two projects, two pools, a rejected request (two events), and
    the node credentials of two registered nodes."""
    member, operator = h100s
    create_environment(api, "azure-eastus", kind="cloud")
    create_environment(api, "aws-west", kind="cloud")
    for project in ("speech", "vision"):
        api.post("/api/v1/pools", json={"project": project, "flavour": "H100-80GB",
                                        "count": 1, "reason": "steady load"})
    code = create(member, count=1, models=["H100-80GB"])["code"]
    act(operator, code, "reject", reason="not now")
    return member, operator, code


def test_each_listing_pages_through_every_item_once(listed, api):
    code = listed[2]
    expected = {
        "/api/v1/environments": ("name", ["aws-west", "azure-eastus", "onprem-hpc"]),
        "/api/v1/projects": ("name", ["speech", "vision"]),
        "/api/v1/users": ("name", ["admin", "mia", "olga"]),
        "/api/v1/pools": ("code", [p["code"] for p in one_page(api, "/api/v1/pools")["items"]]),
        f"/api/v1/requests/{code}/history": ("action", [
            "request.created", "request.rejected"]),
    }
    for path, (key, keys) in expected.items():
        whole = one_page(api, path)
        assert (set(whole), whole["next_cursor"]) == ({"items", "next_cursor"}, None), path
        assert [item[key] for item in whole["items"]] == keys, path
        assert every_page(api, path, key) == keys, path
    assert len(expected["/api/v1/pools"][1]) == 2
    tokens = [t["id"] for t in one_page(api, "/api/v1/tokens")["items"]]
    assert len(tokens) == 5 and tokens == sorted(tokens)  # admin, mia, olga, two nodes
    assert every_page(api, "/api/v1/tokens", "id") == tokens


def test_a_member_pages_through_their_own_projects_and_pools_only(listed):
    member, _, _ = listed
    assert every_page(member, "/api/v1/projects", "name") == ["vision"]
    assert len(every_page(member, "/api/v1/pools", "code")) == 1
    assert one_page(member, "/api/v1/pools")["items"][0]["project"] == "vision"


def test_tokens_filter_by_kind_and_role(listed, api):
    agents = one_page(api, "/api/v1/tokens", kind="agent")["items"]
    assert sorted(t["node"] for t in agents) == ["node-1", "node-2"]
    assert {t["role"] for t in agents} == {"agent"}
    people = one_page(api, "/api/v1/tokens", kind="user")["items"]
    assert sorted(t["name"] for t in people) == ["bootstrap admin", "mia", "olga"]
    assert [t["name"] for t in one_page(api, "/api/v1/tokens", role="operator")["items"]] == [
        "olga"]
    assert one_page(api, "/api/v1/tokens", role="admin", kind="agent")["items"] == []
    assert every_page(api, "/api/v1/tokens", "node", kind="agent") == [
        t["node"] for t in agents]


def test_revoked_tokens_are_listed_only_when_asked(listed, api):
    olga = one_page(api, "/api/v1/tokens", role="operator")["items"][0]
    api.post(f"/api/v1/tokens/{olga['id']}/revoke")
    assert one_page(api, "/api/v1/tokens", role="operator")["items"] == []
    assert [t["id"] for t in one_page(api, "/api/v1/tokens", role="operator",
                                      include_revoked="true")["items"]] == [olga["id"]]


@pytest.mark.parametrize(("name", "value", "choices"), [
    ("kind", "agents", ["agent", "user"]),
    ("role", "root", ["admin", "operator", "viewer"]),
])
def test_an_unknown_token_filter_is_refused_with_the_choices(api, name, value, choices):
    response = api.get("/api/v1/tokens", params={name: value})
    assert 400 <= response.status_code < 500
    message = response.json()["error"]["message"]
    assert name in message and all(f"'{choice}'" in message for choice in choices), message


@pytest.mark.parametrize("path", ["/api/v1/projects", "/api/v1/pools", "/api/v1/tokens",
                                  "/api/v1/users", "/api/v1/environments"])
def test_a_bad_limit_or_cursor_is_a_400(api, path):
    for params, code in [({"limit": 0}, "invalid_limit"), ({"limit": 100_000}, "invalid_limit"),
                         ({"cursor": "not-a-cursor"}, "invalid_cursor"),
                         ({"cursor": "WzEsMl0"}, "invalid_cursor")]:  # [1,2]: wrong width
        response = api.get(path, params=params)
        assert (response.status_code, response.json()["error"]["code"]) == (400, code), params


def test_a_cursor_from_another_listing_is_a_400(api, h100s):
    project_cursor = one_page(api, "/api/v1/projects", limit=1)["next_cursor"]
    response = api.get("/api/v1/tokens", params={"cursor": project_cursor})
    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_cursor")


def test_environment_counts_are_right_on_every_page(api):
    for name in ("a-env", "b-env"):
        create_environment(api, name)
    register(api, 1, environment="b-env", gpus=3)
    first = one_page(api, "/api/v1/environments", limit=1)
    second = one_page(api, "/api/v1/environments", limit=1, cursor=first["next_cursor"])
    assert [(e["name"], e["nodes"], e["gpus"]) for e in first["items"] + second["items"]] == [
        ("a-env", 0, 0), ("b-env", 1, 3)]
