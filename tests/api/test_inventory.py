"""Inventory queries and operator actions: summary, filters, keyset paging, node and GPU
transitions, and the identity records (environments, users, projects, tokens)."""

from __future__ import annotations

import itertools
import stat
from collections import Counter

import pytest
from sqlalchemy import select

from gpufleet.server import bootstrap_admin_token
from gpufleet.store.tables import ApiToken, Gpu, GpuLabel
from tests.helpers import GIB, create_environment, gpu, gpu_uuid, join_token, registration
from tests.module_world import DATABASES, module_world, shared_client

GPUS = "/api/v1/gpus"
# Queries (summary, filters, paging, status refresh) run on both databases; rules decided in
# Python (transitions, token checks) on SQLite only.
SQLITE_ONLY = pytest.mark.parametrize("store", ["sqlite"], indirect=True)
NODES = "/api/v1/nodes"


@pytest.fixture
def client(gf):
    """The conftest client, on one app shared by the session (tests.module_world)."""
    with shared_client(gf) as shared:
        yield shared


def join(api, body: dict, environment: str) -> str:
    response = api.as_(join_token(api, environment)).post("/api/v1/agent/register", json=body)
    assert response.status_code == 200, response.text
    return response.json()["credential"]


def with_gpus(node: int, gpus: list[dict], **extra) -> dict:
    return {**registration(node, gpus=0, **extra), "gpus": gpus}


def build_inventory(api, store, clock, gf):
    """A small fleet with every GPU status but `allocated`:

    node    environment         GPUs                              ends up
    node-1  onprem-hpc          4 × H100 (80/80/40/80 GiB)        gpu 3 quarantined
    node-2  onprem-hpc          2 × A100-80GB, gpu 0 in MIG mode  cordoned
    node-3  azure-koreacentral  2 × H100                          unreachable
    node-4  onprem-slicing      2 × L40S + 1 unknown (no memory)  ready, shared by default
    node-5  onprem-hpc          1 × H100                          retired
    """
    create_environment(api, "onprem-hpc")
    create_environment(api, "azure-koreacentral", kind="cloud", provider="azure",
                       region="koreacentral")
    create_environment(api, "onprem-slicing", default_sharing_mode="shared")
    a100 = {"name": "NVIDIA A100-SXM4-80GB", "pci_device_id": 0x20B210DE}
    l40s = {"name": "NVIDIA L40S", "pci_device_id": 0x26B910DE, "memory_bytes": 48 * GIB}
    credentials = {
        1: join(api, with_gpus(1, [gpu(1, 0), gpu(1, 1), gpu(1, 2, memory_bytes=40 * GIB),
                                   gpu(1, 3)], labels={"rack": "r1"}), "onprem-hpc"),
        2: join(api, with_gpus(2, [gpu(2, 0, **a100, mig_enabled=True), gpu(2, 1, **a100)],
                               labels={"rack": "r2"}, cpu_cores=64), "onprem-hpc"),
        3: join(api, with_gpus(3, [gpu(3, 0), gpu(3, 1)], labels={"rack": "r1"},
                               cpu_cores=96, memory_bytes=1024 * GIB), "azure-koreacentral"),
        4: join(api, with_gpus(4, [gpu(4, 0, **l40s), gpu(4, 1, **l40s),
                                   {**gpu(4, 2, name="NVIDIA Mystery 9000", pci_device_id=None),
                                    "memory_bytes": None}], cpu_cores=32), "onprem-slicing"),
        5: join(api, with_gpus(5, [gpu(5, 0)], cpu_cores=8, memory_bytes=64 * GIB,
                               labels={"rack": "r5"}),
                "onprem-hpc"),
    }
    assert api.post(f"{GPUS}/{gpu_uuid(1, 3)}/health",
                    json={"health": "quarantined", "reason": "xid 79"}).status_code == 200
    assert api.post(f"{NODES}/node-2/cordon", json={"reason": "bios"}).status_code == 200
    assert api.post(f"{NODES}/node-5/retire").status_code == 200
    clock.advance(91)
    for n in (1, 2, 4):
        assert api.as_(credentials[n]).post("/api/v1/agent/heartbeat", json={}).status_code == 200
    assert gf.mark_silent_nodes_unreachable() == ["node-3"]
    with store.write() as session:
        for uuid in (gpu_uuid(1, 0), gpu_uuid(4, 1)):
            gpu_id = session.scalar(select(Gpu.id).where(Gpu.uuid == uuid))
            session.add(GpuLabel(gpu_id=gpu_id, key="team", value="ml"))
    return api


@pytest.fixture(scope="module", params=DATABASES)
def inventory(request, tmp_path_factory):
    """The fleet above, built once per database for the tests that only read it."""
    with module_world(request, tmp_path_factory) as m:
        yield build_inventory(m.api, m.store, m.clock, m.gf)


@pytest.fixture
def fresh_inventory(api, store, clock, gf):
    """The same fleet, for a test that changes it."""
    return build_inventory(api, store, clock, gf)


def all_gpus(api, **params) -> list[dict]:
    response = api.get(GPUS, params={**params, "limit": 1000})
    assert response.status_code == 200, response.text
    assert response.json()["next_cursor"] is None
    return response.json()["items"]


def uuids(items: list[dict]) -> set[str]:
    return {g["uuid"] for g in items}


# --- fleet summary -----------------------------------------------------------------------


def test_fleet_summary(inventory):
    summary = inventory.get("/api/v1/fleet/summary").json()
    cells = {(c["environment"], c["model"], c["status"]): c["gpus"] for c in summary["cells"]}
    assert cells == {
        ("azure-koreacentral", "H100-80GB", "unreachable"): 2,
        ("onprem-hpc", "A100-80GB", "cordoned"): 2,
        ("onprem-hpc", "H100-80GB", "free"): 3,
        ("onprem-hpc", "H100-80GB", "quarantined"): 1,
        ("onprem-hpc", "H100-80GB", "retired"): 1,
        ("onprem-slicing", "L40S-48GB", "free"): 2,
        ("onprem-slicing", "NVIDIA Mystery 9000", "free"): 1,
    }
    assert [(c["environment"], c["model"], c["status"]) for c in summary["cells"]] == \
        sorted(cells)
    assert summary["total_gpus"] == 11  # retired GPUs are not in the fleet...
    assert summary["retired_gpus"] == 1  # ...but are counted apart
    assert summary["nodes"] == 4
    assert summary["by_status"] == {"cordoned": 2, "free": 6, "quarantined": 1,
                                    "unreachable": 2}
    environments = {e["environment"]: e for e in summary["by_environment"]}
    assert list(environments) == ["azure-koreacentral", "onprem-hpc", "onprem-slicing"]
    hpc = environments["onprem-hpc"]
    assert (hpc["kind"], hpc["nodes"], hpc["total_gpus"]) == ("onprem", 2, 6)
    assert hpc["by_status"] == {"cordoned": 2, "free": 3, "quarantined": 1}
    assert [(m["model"], m["total_gpus"], m["by_status"]) for m in hpc["models"]] == [
        ("A100-80GB", 2, {"cordoned": 2}),
        ("H100-80GB", 4, {"free": 3, "quarantined": 1}),
    ]
    azure = environments["azure-koreacentral"]
    assert (azure["kind"], azure["nodes"], azure["total_gpus"]) == ("cloud", 1, 2)
    assert [(m["model"], m["total_gpus"]) for m in summary["by_model"]] == [
        ("A100-80GB", 2), ("H100-80GB", 6), ("L40S-48GB", 2), ("NVIDIA Mystery 9000", 1)]
    assert sum(e["total_gpus"] for e in summary["by_environment"]) == summary["total_gpus"]


@SQLITE_ONLY
def test_empty_fleet_summary(api):
    create_environment(api)
    summary = api.get("/api/v1/fleet/summary").json()
    assert (summary["total_gpus"], summary["retired_gpus"], summary["nodes"]) == (0, 0, 0)
    assert summary["cells"] == [] and summary["by_model"] == []
    assert summary["by_environment"][0]["total_gpus"] == 0


# --- GPU listing: filters ----------------------------------------------------------------


def test_gpu_filters(inventory):
    everything = all_gpus(inventory)
    assert len(everything) == 12
    by_uuid = {g["uuid"]: g for g in everything}

    def expect(params: dict, predicate) -> None:
        got = uuids(all_gpus(inventory, **params))
        want = {u for u, g in by_uuid.items() if predicate(g)}
        assert got == want, params
        assert want, f"{params} selects nothing: a weak case"

    expect({"environment": "onprem-hpc"}, lambda g: g["environment"] == "onprem-hpc")
    expect({"environment": ["onprem-slicing", "azure-koreacentral"]},
           lambda g: g["environment"] != "onprem-hpc")
    expect({"model": "H100-80GB"}, lambda g: g["model"] == "H100-80GB")
    expect({"model": ["A100-80GB", "L40S-48GB"]}, lambda g: g["model"][0] in "AL")
    expect({"status": "free"}, lambda g: g["status"] == "free")
    expect({"status": ["cordoned", "unreachable", "retired"]},
           lambda g: g["node"] in ("node-2", "node-3", "node-5"))
    expect({"status": "quarantined"}, lambda g: g["uuid"] == gpu_uuid(1, 3))
    expect({"health": "quarantined"}, lambda g: g["uuid"] == gpu_uuid(1, 3))
    expect({"health": "healthy"}, lambda g: g["uuid"] != gpu_uuid(1, 3))
    expect({"sharing_mode": "shared"}, lambda g: g["node"] == "node-4")
    expect({"sharing_mode": "mig"}, lambda g: g["uuid"] == gpu_uuid(2, 0))
    expect({"sharing_mode": "exclusive"},
           lambda g: g["node"] != "node-4" and g["uuid"] != gpu_uuid(2, 0))
    expect({"node": "node-2"}, lambda g: g["node"] == "node-2")
    expect({"label": "team=ml"}, lambda g: g["uuid"] in (gpu_uuid(1, 0), gpu_uuid(4, 1)))
    expect({"node_label": "rack=r1"}, lambda g: g["node"] in ("node-1", "node-3"))
    expect({"model_known": "false"}, lambda g: g["uuid"] == gpu_uuid(4, 2))
    expect({"model_known": "true"}, lambda g: g["uuid"] != gpu_uuid(4, 2))
    # Filters combine with AND; repeated values of one filter with OR.
    expect({"environment": "onprem-hpc", "model": "H100-80GB", "status": "free"},
           lambda g: g["node"] == "node-1" and g["status"] == "free")
    expect({"node_label": "rack=r1", "environment": "azure-koreacentral"},
           lambda g: g["node"] == "node-3")
    expect({"label": "team=ml", "node": "node-4"}, lambda g: g["uuid"] == gpu_uuid(4, 1))
    for params in ({"node": "node-9"}, {"environment": "nowhere"}, {"label": "team=ops"},
                   {"node_label": ["rack=r1", "rack=r2"]}, {"model": "B200-180GB"},
                   {"status": "allocated"}, {"label": "team=ml", "node": "node-2"}):
        assert all_gpus(inventory, **params) == [], params


def test_gpu_view(inventory):
    view = inventory.get(f"{GPUS}/{gpu_uuid(4, 2)}").json()
    assert (view["model"], view["model_known"], view["memory_bytes"]) == \
        ("NVIDIA Mystery 9000", False, None)
    assert (view["node"], view["environment"], view["sharing_mode"]) == \
        ("node-4", "onprem-slicing", "shared")
    assert inventory.get(f"{GPUS}/{gpu_uuid(1, 0)}").json()["labels"] == {"team": "ml"}
    assert inventory.get(f"{GPUS}/{gpu_uuid(5, 0)}").json()["status"] == "retired"


# --- keyset paging through every sort ------------------------------------------------------

GPU_SORT_KEYS = {
    "uuid": lambda g: (g["uuid"],),
    "node": lambda g: (g["node"], g["index"], g["uuid"]),
    "environment": lambda g: (g["environment"], g["uuid"]),
    "model": lambda g: (g["model"], g["uuid"]),
    "status": lambda g: (g["status"], g["uuid"]),
    "health": lambda g: (g["health"], g["uuid"]),
    "memory": lambda g: (g["memory_bytes"] if g["memory_bytes"] is not None else -1, g["uuid"]),
}

NODE_SORT_KEYS = {
    "name": lambda n: (n["name"],),
    "environment": lambda n: (n["environment"], n["name"]),
    "status": lambda n: (n["status"], n["name"]),
    "cpu_cores": lambda n: (n["cpu_cores"], n["name"]),
    "memory": lambda n: (n["memory_bytes"], n["name"]),
}


def page_through(api, path: str, key: str, limit: int = 3, **params) -> list[str]:
    """Every page of a listing, following next_cursor; the identities in order served."""
    identity = "uuid" if path == GPUS else "name"
    served, cursor, pages = [], None, 0
    while True:
        query = {**params, "sort": key, "limit": limit}
        if cursor is not None:
            query["cursor"] = cursor
        response = api.get(path, params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["items"]) <= limit
        served += [item[identity] for item in page["items"]]
        cursor, pages = page["next_cursor"], pages + 1
        if cursor is None:
            return served
        assert len(page["items"]) == limit
        assert pages < 100, "paging does not end"


@pytest.mark.parametrize(("path", "sort_keys"), [(GPUS, GPU_SORT_KEYS), (NODES, NODE_SORT_KEYS)],
                         ids=["gpus", "nodes"])
def test_every_sort_pages_through_all_rows(inventory, path, sort_keys):
    identity = "uuid" if path == GPUS else "name"
    full = inventory.get(path, params={"limit": 1000}).json()["items"]
    assert len(full) >= 5
    for (name, key), descending in itertools.product(sort_keys.items(), (False, True)):
        sort = f"-{name}" if descending else name
        expected = [item[identity] for item in sorted(full, key=key, reverse=descending)]
        served = page_through(inventory, path, sort)
        assert len(served) == len(set(served)), f"{sort}: duplicates"
        assert served == expected, f"{sort}: pages differ from the sorted listing"
        single = [item[identity] for item in
                  inventory.get(path, params={"sort": sort, "limit": 1000}).json()["items"]]
        assert single == expected, sort


def test_paging_with_a_filter_and_odd_limits(inventory):
    hpc = [g["uuid"] for g in all_gpus(inventory, environment="onprem-hpc", sort="-memory")]
    for limit in (1, 2, 5, 7, 1000):
        assert page_through(inventory, GPUS, "-memory", limit=limit,
                            environment="onprem-hpc") == hpc


def test_paging_is_stable_while_rows_are_added(fresh_inventory):
    """A keyset cursor resumes after the last row served, whatever was inserted meanwhile."""
    first = fresh_inventory.get(GPUS, params={"sort": "uuid", "limit": 3}).json()
    join(fresh_inventory, with_gpus(0, [gpu(0, 0)]), "onprem-hpc")  # sorts before everything
    rest = page_through_from(fresh_inventory, first["next_cursor"])
    served = [g["uuid"] for g in first["items"]] + rest
    assert len(served) == len(set(served)) == 12
    assert gpu_uuid(0, 0) not in served


def page_through_from(api, cursor: str) -> list[str]:
    served = []
    while cursor:
        page = api.get(GPUS, params={"sort": "uuid", "limit": 3, "cursor": cursor}).json()
        served += [g["uuid"] for g in page["items"]]
        cursor = page["next_cursor"]
    return served


def test_default_page_size_and_cursor_reuse_across_sorts(inventory, settings):
    page = inventory.get(GPUS).json()
    assert len(page["items"]) == 12 <= settings.page_size_default
    assert page["next_cursor"] is None
    cursor = inventory.get(GPUS, params={"sort": "node", "limit": 2}).json()["next_cursor"]
    # A cursor of a 3-column sort does not fit a 2-column one.
    wrong = inventory.get(GPUS, params={"sort": "model", "cursor": cursor})
    assert wrong.status_code == 400
    assert wrong.json()["error"]["code"] == "invalid_cursor"


# --- node listing ------------------------------------------------------------------------


def test_node_filters(inventory):
    def names(**params) -> list[str]:
        response = inventory.get(NODES, params={**params, "limit": 1000})
        assert response.status_code == 200, response.text
        return [n["name"] for n in response.json()["items"]]

    assert names() == ["node-1", "node-2", "node-3", "node-4", "node-5"]
    assert names(environment="onprem-hpc") == ["node-1", "node-2", "node-5"]
    assert names(environment=["onprem-slicing", "azure-koreacentral"]) == ["node-3", "node-4"]
    assert names(status="ready") == ["node-1", "node-4"]
    assert names(status="cordoned") == ["node-2"]
    assert names(status="unreachable") == ["node-3"]
    assert names(status="retired") == ["node-5"]
    assert names(status=["cordoned", "retired"]) == ["node-2", "node-5"]
    assert names(model="H100-80GB") == ["node-1", "node-3", "node-5"]
    assert names(model="L40S-48GB") == ["node-4"]
    assert names(health="quarantined") == ["node-1"]
    assert names(label="rack=r1") == ["node-1", "node-3"]
    assert names(label=["rack=r1", "rack=r2"]) == []
    assert names(model="H100-80GB", status="ready") == ["node-1"]
    assert names(label="rack=r9") == []


def test_node_view_and_detail(inventory):
    listed = {n["name"]: n for n in inventory.get(NODES).json()["items"]}
    assert {name: n["gpus"] for name, n in listed.items()} == {
        "node-1": 4, "node-2": 2, "node-3": 2, "node-4": 3, "node-5": 1}
    assert listed["node-2"]["status_reason"] == "bios"
    assert listed["node-3"]["labels"] == {"rack": "r1"}
    detail = inventory.get(f"{NODES}/node-1").json()
    assert [g["index"] for g in detail["gpu_list"]] == [0, 1, 2, 3]
    assert detail["gpus"] == 4
    assert Counter(g["status"] for g in detail["gpu_list"]) == {"free": 3, "quarantined": 1}


# --- operator actions -----------------------------------------------------------------------

ACTIONS = ("cordon", "uncordon", "retire")
START_STATES = ("ready", "cordoned", "retired")
# (start, action) -> resulting status, or 409 when the node is retired
TRANSITIONS = {
    ("ready", "cordon"): "cordoned", ("ready", "uncordon"): "ready",
    ("ready", "retire"): "retired",
    ("cordoned", "cordon"): "cordoned", ("cordoned", "uncordon"): "ready",
    ("cordoned", "retire"): "retired",
    ("retired", "cordon"): 409, ("retired", "uncordon"): 409, ("retired", "retire"): "retired",
}
AUDITED = {"cordon": "node.cordoned", "uncordon": "node.uncordoned", "retire": "node.retired"}
GPU_STATUS_ON = {"ready": "free", "cordoned": "cordoned", "retired": "retired"}


@SQLITE_ONLY
def test_node_transitions(api):
    """Every (state, action) pair: the resulting node and GPU status, and its audit event."""
    create_environment(api)
    cases = list(itertools.product(START_STATES, ACTIONS))
    assert set(cases) == set(TRANSITIONS)
    for n, (start, action) in enumerate(cases, start=1):
        name = f"node-{n}"
        join(api, registration(n, gpus=1), "onprem-hpc")
        if start != "ready":
            api.post(f"{NODES}/{name}/{'cordon' if start == 'cordoned' else 'retire'}")
        before = api.get("/api/v1/audit-events", params={"subject": name}).json()["items"]
        response = api.post(f"{NODES}/{name}/{action}", json={"reason": f"{action} test"})
        expected = TRANSITIONS[(start, action)]
        case = f"{start} => {action}"
        after = api.get("/api/v1/audit-events", params={"subject": name}).json()["items"]
        if expected == 409:
            assert response.status_code == 409, case
            assert response.json()["error"]["code"] == "node_retired", case
            assert len(after) == len(before), case
            continue
        assert response.status_code == 200, case
        node = response.json()
        assert node["status"] == expected, case
        assert [g["status"] for g in node["gpu_list"]] == [GPU_STATUS_ON[expected]], case
        if expected == start:  # nothing changed: nothing audited
            assert len(after) == len(before), case
        else:
            event = after[0]
            assert (event["action"], event["reason"], event["details"]["previous"]) == \
                (AUDITED[action], f"{action} test", "cordoned" if start == "cordoned"
                 else "active"), case
            assert event["actor"] == "user:admin", case


def test_retire_revokes_the_credential_and_frees_the_gpus_to_move(api, store):
    create_environment(api)
    credential = join(api, registration(1, gpus=2), "onprem-hpc")
    api.post(f"{NODES}/node-1/retire", json={"reason": "decommissioned"})
    with store.read() as session:
        token = session.scalar(select(ApiToken).where(ApiToken.node_id.is_not(None)))
    assert token.revoked_at is not None
    assert api.as_(credential).post("/api/v1/agent/heartbeat", json={}).status_code == 401
    assert join(api, {**registration(2, gpus=0), "gpus": [gpu(1, 0)]}, "onprem-hpc")
    assert api.get(f"{GPUS}/{gpu_uuid(1, 0)}").json()["node"] == "node-2"


def test_quarantine_changes_status(fresh_inventory):
    inventory = fresh_inventory
    path = f"{GPUS}/{gpu_uuid(1, 1)}/health"
    quarantined = inventory.post(path, json={"health": "quarantined", "reason": "ecc"}).json()
    assert (quarantined["health"], quarantined["status"], quarantined["health_reason"]) == \
        ("quarantined", "quarantined", "ecc")
    back = inventory.post(path, json={"health": "healthy", "reason": "replaced"}).json()
    assert (back["health"], back["status"]) == ("healthy", "free")
    # On a cordoned node a healthy GPU is cordoned; on an unreachable one, unreachable.
    on_cordoned = inventory.post(f"{GPUS}/{gpu_uuid(2, 1)}/health",
                                 json={"health": "quarantined", "reason": "x"}).json()
    assert on_cordoned["status"] == "quarantined"
    on_cordoned = inventory.post(f"{GPUS}/{gpu_uuid(2, 1)}/health",
                                 json={"health": "healthy", "reason": "x"}).json()
    assert on_cordoned["status"] == "cordoned"
    on_silent = inventory.post(f"{GPUS}/{gpu_uuid(3, 0)}/health",
                               json={"health": "quarantined", "reason": "x"}).json()
    assert on_silent["status"] == "unreachable"
    events = inventory.get("/api/v1/audit-events", params={
        "action": "gpu.health_changed", "subject": gpu_uuid(1, 1)}).json()["items"]
    assert [(e["details"]["previous"], e["details"]["health"], e["reason"]) for e in events] == \
        [("quarantined", "healthy", "replaced"), ("healthy", "quarantined", "ecc")]
    assert inventory.post(path, json={"health": "quarantined"}).status_code == 422
    assert inventory.post(path, json={"health": "broken", "reason": "x"}).status_code == 422


# --- environments, users, projects -----------------------------------------------------------


@SQLITE_ONLY
def test_environments(api):
    created = create_environment(api, "azure-koreacentral", kind="cloud", provider="azure",
                                 region="koreacentral", description="Korea Central")
    assert (created["kind"], created["provider"], created["region"],
            created["default_sharing_mode"], created["nodes"], created["gpus"]) == \
        ("cloud", "azure", "koreacentral", "exclusive", 0, 0)
    create_environment(api, "onprem-hpc")
    join(api, registration(1, gpus=3), "onprem-hpc")
    listed = {e["name"]: e for e in api.get("/api/v1/environments").json()["items"]}
    assert list(listed) == ["azure-koreacentral", "onprem-hpc"]
    assert (listed["onprem-hpc"]["nodes"], listed["onprem-hpc"]["gpus"]) == (1, 3)
    duplicate = api.post("/api/v1/environments", json={"name": "onprem-hpc", "kind": "cloud"})
    assert duplicate.status_code == 409
    assert duplicate.json()["error"]["code"] == "environment_exists"
    unknown = api.post("/api/v1/join-tokens", json={"environment": "nowhere"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "environment_not_found"
    assert "environment.created" in [e["action"] for e in
                                     api.get("/api/v1/audit-events").json()["items"]]


@SQLITE_ONLY
def test_users_and_projects(api):
    for name, role in (("ann", "operator"), ("bob", "member"), ("cy", "member")):
        created = api.post("/api/v1/users", json={"name": name, "role": role,
                                                   "email": f"{name}@example.com"})
        assert created.status_code == 201, created.text
    assert api.post("/api/v1/users", json={"name": "ann", "role": "viewer"}).status_code == 409
    project = api.post("/api/v1/projects", json={
        "name": "vision", "organisation": "research", "department": "ml",
        "cost_centre": "cc-42"}).json()
    assert (project["cost_centre"], project["members"]) == ("cc-42", [])
    for user in ("cy", "bob"):
        assert api.post("/api/v1/projects/vision/members", json={"user": user}).status_code \
            == 201
    again = api.post("/api/v1/projects/vision/members", json={"user": "bob"})
    assert (again.status_code, again.json()["error"]["code"]) == (409, "already_member")
    ghost = api.post("/api/v1/projects/vision/members", json={"user": "ghost"})
    assert (ghost.status_code, ghost.json()["error"]["code"]) == (404, "user_not_found")
    shown = api.get("/api/v1/projects/vision").json()
    assert shown["members"] == ["bob", "cy"]
    users = {u["name"]: u for u in api.get("/api/v1/users").json()["items"]}
    assert list(users) == ["admin", "ann", "bob", "cy"]
    assert users["bob"]["projects"] == ["vision"]
    assert users["ann"]["projects"] == []
    dup = api.post("/api/v1/projects", json={"name": "vision", "organisation": "x"})
    assert (dup.status_code, dup.json()["error"]["code"]) == (409, "project_exists")
    actions = [e["action"] for e in api.get("/api/v1/audit-events").json()["items"]]
    assert actions.count("project.member_added") == 2
    assert actions.count("user.created") == 3


# --- tokens --------------------------------------------------------------------------------


@SQLITE_ONLY
def test_tokens_are_shown_once_and_stored_hashed(api, store):
    issued = api.post("/api/v1/tokens", json={"name": "ci", "role": "viewer"}).json()
    raw = issued["token"]
    assert raw.startswith("gfa_") and len(raw) > 40
    assert issued["prefix"] == raw[:12]
    listed = {t["name"]: t for t in api.get("/api/v1/tokens").json()["items"]}
    assert "token" not in listed["ci"]
    assert listed["ci"]["role"] == "viewer"
    with store.read() as session:
        stored = session.scalar(select(ApiToken).where(ApiToken.name == "ci"))
    assert raw not in (stored.token_hash, stored.prefix)
    assert len(stored.token_hash) == 64


@SQLITE_ONLY
def test_token_creation_is_checked(api):
    api.post("/api/v1/users", json={"name": "bob", "role": "member"})
    for body, status, code in [
        ({"name": "t"}, 400, "role_required"),
        ({"name": "t", "role": "agent"}, 400, "agent_token_by_hand"),
        ({"name": "t", "role": "member"}, 400, "member_needs_user"),
        ({"name": "t", "user": "bob", "role": "admin"}, 400, "role_mismatch"),
        ({"name": "t", "user": "ghost"}, 404, "user_not_found"),
        ({"name": "t", "role": "viewer", "expires_in_days": 0}, 422, "validation_failed"),
        ({"name": "", "role": "viewer"}, 422, "validation_failed"),
    ]:
        response = api.post("/api/v1/tokens", json=body)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), body
    assert [t["name"] for t in api.get("/api/v1/tokens").json()["items"]] == ["bootstrap admin"]


@SQLITE_ONLY
def test_user_token_carries_the_users_role(api):
    api.post("/api/v1/users", json={"name": "bob", "role": "member"})
    token = api.post("/api/v1/tokens", json={"name": "bob", "user": "bob"}).json()
    assert (token["role"], token["user"]) == ("member", "bob")
    who = api.as_(token["token"]).get("/api/v1/whoami").json()
    assert (who["role"], who["user"], who["actor"]) == ("member", "bob", "user:bob")


@SQLITE_ONLY
def test_token_expiry(api, clock, settings):
    short = api.post("/api/v1/tokens", json={"name": "s", "role": "viewer",
                                             "expires_in_days": 1}).json()
    default = api.post("/api/v1/tokens", json={"name": "d", "role": "viewer"}).json()
    clock.advance(86_400 - 1)
    assert api.as_(short["token"]).get("/api/v1/whoami").status_code == 200
    clock.advance(1)
    expired = api.as_(short["token"]).get("/api/v1/whoami")
    assert (expired.status_code, expired.json()["error"]["code"]) == (401, "token_expired")
    assert api.as_(default["token"]).get("/api/v1/whoami").status_code == 200
    clock.advance(settings.api_token_ttl_days * 86_400)
    assert api.as_(default["token"]).get("/api/v1/whoami").status_code == 401


@SQLITE_ONLY
def test_token_revocation(api):
    token = api.post("/api/v1/tokens", json={"name": "r", "role": "operator"}).json()
    user = api.as_(token["token"])
    assert user.get(GPUS).status_code == 200
    revoked = api.post(f"/api/v1/tokens/{token['id']}/revoke", json={"reason": "leaked"})
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    response = user.get(GPUS)
    assert (response.status_code, response.json()["error"]["code"]) == (401, "token_revoked")
    # Revoking again changes nothing and audits nothing new.
    assert api.post(f"/api/v1/tokens/{token['id']}/revoke").status_code == 200
    events = api.get("/api/v1/audit-events", params={"action": "token.revoked"}).json()["items"]
    assert [(e["subject"], e["reason"]) for e in events] == [(str(token["id"]), "leaked")]
    active = [t["name"] for t in api.get("/api/v1/tokens").json()["items"]]
    assert "r" not in active
    everything = [t["name"] for t in api.get(
        "/api/v1/tokens", params={"include_revoked": "true"}).json()["items"]]
    assert "r" in everything


@SQLITE_ONLY
def test_last_used_is_recorded_at_minute_resolution(api, clock):
    token = api.post("/api/v1/tokens", json={"name": "u", "role": "viewer"}).json()

    def last_used():
        return next(t for t in api.get("/api/v1/tokens").json()["items"] if t["id"] == token["id"])[
            "last_used_at"]

    assert last_used() is None
    api.as_(token["token"]).get(GPUS)
    first = last_used()
    clock.advance(30)
    api.as_(token["token"]).get(GPUS)
    assert last_used() == first
    clock.advance(31)
    api.as_(token["token"]).get(GPUS)
    assert last_used() != first


@SQLITE_ONLY
def test_bootstrap_admin_token_file(gf, settings, clock):
    path = settings.data_dir / "admin-token"
    raw = bootstrap_admin_token(gf, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == raw
    assert bootstrap_admin_token(gf, path) == raw  # kept across restarts
    clock.advance(settings.api_token_ttl_days * 86_400)
    renewed = bootstrap_admin_token(gf, path)  # expired: replaced
    assert renewed != raw
    assert gf.authenticate(renewed).role.value == "admin"


@SQLITE_ONLY
def test_audit_log_pages_backwards(api):
    for n in range(5):
        api.post("/api/v1/projects", json={"name": f"p{n}", "organisation": "o"})
    first = api.get("/api/v1/audit-events", params={"action": "project.created",
                                                    "limit": 2}).json()
    assert [e["subject"] for e in first["items"]] == ["p4", "p3"]
    rest = api.get("/api/v1/audit-events", params={"action": "project.created", "limit": 10,
                                                   "cursor": first["next_cursor"]}).json()
    assert [e["subject"] for e in rest["items"]] == ["p2", "p1", "p0"]
    assert rest["next_cursor"] is None
    kinds = {e["subject_kind"] for e in api.get("/api/v1/audit-events",
                                                params={"subject_kind": "project"}).json()[
        "items"]}
    assert kinds == {"project"}
