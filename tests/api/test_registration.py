"""Node registration and heartbeat: how agents enter the inventory, and what they may not do."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select

from gpufleet.store.tables import (
    ApiToken,
    AuditEvent,
    Gpu,
    GpuMoveApproval,
    JoinToken,
    MigInstance,
    Node,
    NodeLabel,
)
from tests.helpers import GIB, create_environment, gpu, gpu_uuid, join_token, register, registration
from tests.module_world import shared_client

REGISTER = "/api/v1/agent/register"
# Rules decided in Python (payload validation, model and sharing-mode rules, status
# transitions) run on SQLite only; what depends on the database's transactions, constraints
# and queries (GPU claims, idempotence, MIG keys, missing GPUs) runs on both.
SQLITE_ONLY = pytest.mark.parametrize("store", ["sqlite"], indirect=True)
HEARTBEAT = "/api/v1/agent/heartbeat"


@pytest.fixture
def client(gf):
    """The conftest client, on one app shared by the session (tests.module_world)."""
    with shared_client(gf) as shared:
        yield shared


@pytest.fixture
def fleet(api):
    create_environment(api)
    return api


def join(api, body: dict, environment: str = "onprem-hpc") -> dict:
    """Register `body` with a fresh join token; the reply."""
    response = post_registration(api, join_token(api, environment), body)
    assert response.status_code == 200, response.text
    return response.json()


def with_gpus(node: int, *gpus: dict, **extra) -> dict:
    return {**registration(node, gpus=0, **extra), "gpus": list(gpus)}


def post_registration(api, token: str, body: dict):
    return api.as_(token).post(REGISTER, json=body)


def error_code(response) -> str:
    return response.json()["error"]["code"]


def count(store, model, *where) -> int:
    with store.read() as session:
        return session.scalar(select(func.count()).select_from(model).where(*where))


def join_token_used(store) -> list[bool]:
    with store.read() as session:
        return [t.used_at is not None for t in session.scalars(select(JoinToken)
                                                               .order_by(JoinToken.id))]


def audit_actions(api, **filters) -> list[str]:
    events = api.get("/api/v1/audit-events", params=filters).json()["items"]
    return [e["action"] for e in events]


def snapshot(store) -> dict:
    """Every row a registration can touch, for comparing before and after."""
    with store.read() as session:
        def rows(model, *columns):
            return sorted(tuple(r) for r in session.execute(select(*columns)).all())
        return {
            "nodes": rows(Node, Node.id, Node.name, Node.machine_id, Node.cpu_cores,
                          Node.memory_bytes, Node.status, Node.environment_id),
            "labels": rows(NodeLabel, NodeLabel.node_id, NodeLabel.key, NodeLabel.value),
            "gpus": rows(Gpu, Gpu.id, Gpu.uuid, Gpu.node_id, Gpu.index, Gpu.model, Gpu.health,
                         Gpu.status, Gpu.sharing_mode, Gpu.memory_bytes),
            "mig": rows(MigInstance, MigInstance.id, MigInstance.gpu_id, MigInstance.profile_id,
                        MigInstance.placement_start, MigInstance.mig_uuid),
            "tokens": rows(ApiToken, ApiToken.id, ApiToken.revoked_at),
            "join_tokens": rows(JoinToken, JoinToken.id, JoinToken.used_at),
            "audit": rows(AuditEvent, AuditEvent.id),
        }


# --- join tokens -------------------------------------------------------------------------


@SQLITE_ONLY
def test_join_token_is_single_use(fleet, store):
    token = join_token(fleet)
    assert post_registration(fleet, token, registration(1, gpus=1)).status_code == 200
    again = post_registration(fleet, token, registration(2, gpus=1))
    assert again.status_code == 401
    assert error_code(again) == "join_token_used"
    assert count(store, Node) == 1
    assert count(store, Gpu, Gpu.uuid == gpu_uuid(2, 0)) == 0


@SQLITE_ONLY
def test_join_token_expires(fleet, clock):
    tokens = fleet.post("/api/v1/join-tokens", json={
        "environment": "onprem-hpc", "expires_in_s": 60, "count": 3}).json()["tokens"]
    clock.advance(59)
    assert post_registration(fleet, tokens[0]["token"], registration(1)).status_code == 200
    for advance_s, token in ((1, tokens[1]), (3600, tokens[2])):
        clock.advance(advance_s)
        response = post_registration(fleet, token["token"], registration(2))
        assert response.status_code == 401
        assert error_code(response) == "token_expired"


@SQLITE_ONLY
def test_join_token_default_lifetime_is_the_setting(fleet, clock, settings):
    issued = fleet.post("/api/v1/join-tokens", json={"environment": "onprem-hpc"}).json()
    token = issued["tokens"][0]
    assert token["token"].startswith("gfj_")
    assert datetime.fromisoformat(token["expires_at"]) == \
        clock.now() + timedelta(seconds=settings.join_token_ttl_s)
    clock.advance(settings.join_token_ttl_s)
    assert post_registration(fleet, token["token"], registration(1)).status_code == 401


@SQLITE_ONLY
def test_several_join_tokens_at_once(fleet):
    issued = fleet.post("/api/v1/join-tokens",
                        json={"environment": "onprem-hpc", "count": 3}).json()["tokens"]
    assert len({t["token"] for t in issued}) == 3
    for n, token in enumerate(issued):
        assert post_registration(fleet, token["token"], registration(n, gpus=1)).status_code == 200


@SQLITE_ONLY
def test_unknown_join_token(fleet):
    response = post_registration(fleet, "gfj_made-up", registration(1))
    assert response.status_code == 401
    assert error_code(response) == "invalid_token"


# --- payload validation: nothing is written, the join token is kept -----------------------


def _with_gpu(**changes) -> dict:
    body = registration(1, gpus=2)
    body["gpus"][0].update(changes)
    return body


INVALID = {
    "unknown top-level field": {**registration(1), "colour": "blue"},
    "unknown gpu field": _with_gpu(temperature_c=40),
    "unknown mig field": _with_gpu(mig_enabled=True, mig_instances=[
        {"profile_id": 19, "placement_start": 0, "colour": "x"}]),
    "cpu_cores 0": registration(1, cpu_cores=0),
    "cpu_cores negative": registration(1, cpu_cores=-4),
    "cpu_cores absurd": registration(1, cpu_cores=10**9),
    "memory 0": registration(1, memory_bytes=0),
    "memory under 1 GiB": registration(1, memory_bytes=GIB - 1),
    "memory absurd": registration(1, memory_bytes=10**30),
    "65 gpus": with_gpus(1, *(gpu(1 + n // 64, n % 64) for n in range(65))),
    "gpu index 64": _with_gpu(index=64),
    "gpu index negative": _with_gpu(index=-1),
    "gpu memory 0": _with_gpu(memory_bytes=0),
    "gpu memory absurd": _with_gpu(memory_bytes=10**15),
    "pci id beyond 32 bits": _with_gpu(pci_device_id=2**32),
    "duplicate uuid": _with_gpu(uuid=gpu_uuid(1, 1)),
    "duplicate uuid, other case": _with_gpu(uuid=gpu_uuid(1, 1).upper()),
    "duplicate index": _with_gpu(index=1),
    "malformed uuid": _with_gpu(uuid="GPU-not-a-uuid"),
    "uuid without prefix": _with_gpu(uuid=gpu_uuid(1, 0)[4:]),
    "mig uuid as gpu uuid": _with_gpu(uuid="MIG-" + gpu_uuid(1, 0)[4:]),
    "mig instances on a non-MIG gpu": _with_gpu(mig_instances=[
        {"profile_id": 19, "placement_start": 0}]),
    "mig sharing without mig mode": _with_gpu(sharing_mode="mig"),
    "duplicate mig instance": _with_gpu(mig_enabled=True, mig_instances=[
        {"profile_id": 19, "placement_start": 0}, {"profile_id": 19, "placement_start": 0}]),
    "empty gpu name": _with_gpu(name=""),
    "hostname with spaces": registration(1, hostname="node one"),
    "empty machine id": registration(1, machine_id=""),
    "label key invalid": registration(1, labels={"bad key": "x"}),
    "gpus not a list": {**registration(1), "gpus": {"0": "x"}},
    "missing hostname": {k: v for k, v in registration(1).items() if k != "hostname"},
}


@SQLITE_ONLY
def test_invalid_registration_is_refused_and_writes_nothing(fleet, store):
    """Each payload of INVALID is a 422 naming its problem; nothing is written and the join
    token is not spent (one test over all cases: a fleet per case would be slow)."""
    token = join_token(fleet)
    before = snapshot(store)
    failures = []
    for case, body in INVALID.items():
        response = post_registration(fleet, token, body)
        error = response.json().get("error", {})
        if response.status_code != 422 or error.get("code") != "validation_failed" \
                or not error["details"]["errors"]:
            failures.append(f"{case}: {response.status_code} {response.text[:300]}")
    assert not failures, "\n".join(failures)
    assert snapshot(store) == before
    assert post_registration(fleet, token, registration(1)).status_code == 200


@SQLITE_ONLY
def test_oversized_registration(fleet, store, settings):
    token = join_token(fleet)
    body = {**registration(1), "os_name": "x" * settings.max_request_body_bytes}
    response = fleet.client.post(REGISTER, json=body,
                                 headers={"Authorization": f"Bearer {token}"})
    assert len(response.request.content) > settings.max_request_body_bytes
    assert response.status_code == 413
    assert error_code(response) == "payload_too_large"
    assert join_token_used(store) == [False]
    assert count(store, Node) == 0


# --- GPUs claimed by another node -----------------------------------------------------------


@pytest.fixture
def claim(fleet):
    """node-1 holds GPUs 1/0 and 1/1; node-2 wants to join with 1/1 and two GPUs of its own."""
    reply = register(fleet, 1, gpus=2)
    body = registration(2, gpus=2)
    body["gpus"].append({**gpu(1, 1), "index": 2})
    return {"credential": reply["credential"], "body": body, "token": join_token(fleet)}


def test_claiming_a_live_nodes_gpu_is_refused(fleet, store, claim):
    before = snapshot(store)
    response = post_registration(fleet, claim["token"], claim["body"])
    assert response.status_code == 409, response.text
    error = response.json()["error"]
    assert error["code"] == "gpu_claimed_by_other_node"
    assert error["details"] == {"gpus": [{"uuid": gpu_uuid(1, 1), "current_node": "node-1"}]}
    after = snapshot(store)
    # Nothing of the registration: no node, no GPUs, the join token still unused...
    assert after["nodes"] == before["nodes"]
    assert after["join_tokens"] == before["join_tokens"]
    assert after["tokens"] == before["tokens"]
    assert count(store, Gpu, Gpu.uuid.in_([gpu_uuid(2, 0), gpu_uuid(2, 1)])) == 0
    # ...but the claimed GPU is suspect, still on node-1, and the refusal is audited.
    claimed = fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 1)}").json()
    assert (claimed["node"], claimed["health"]) == ("node-1", "suspect")
    assert "node-2" in claimed["health_reason"]
    assert fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()["health"] == "healthy"
    events = fleet.get("/api/v1/audit-events", params={"action": "gpu.claim_refused"}).json()
    (event,) = events["items"]
    assert event["subject"] == gpu_uuid(1, 1)
    assert event["details"]["current_node"] == "node-1"
    assert event["details"]["claiming_node"] == "node-2"
    assert event["details"]["claiming_machine_id"] == "machine-2"
    assert join_token_used(store) == [True, False]


def test_claim_by_a_reregistering_node_is_refused_too(fleet, store, claim):
    second = register(fleet, 2, gpus=2)["credential"]
    before = snapshot(store)
    response = post_registration(fleet, second, claim["body"])
    assert response.status_code == 409
    assert error_code(response) == "gpu_claimed_by_other_node"
    after = snapshot(store)
    assert (after["nodes"], after["tokens"]) == (before["nodes"], before["tokens"])
    assert count(store, Gpu, Gpu.node_id == _node_id(store, "node-2")) == 2


def _node_id(store, name: str) -> int:
    with store.read() as session:
        return session.scalar(select(Node.id).where(Node.name == name))


def _assert_moved(fleet, store, reason: str) -> None:
    moved = fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 1)}").json()
    assert moved["node"] == "node-2"
    assert moved["index"] == 2
    assert count(store, Gpu, Gpu.uuid == gpu_uuid(1, 1)) == 1
    events = fleet.get("/api/v1/audit-events", params={"action": "gpu.moved"}).json()["items"]
    assert [(e["subject"], e["reason"], e["details"]["from_node"], e["details"]["to_node"])
            for e in events] == [(gpu_uuid(1, 1), reason, "node-1", "node-2")]
    node1 = fleet.get("/api/v1/nodes/node-1").json()
    assert [g["uuid"] for g in node1["gpu_list"]] == [gpu_uuid(1, 0)]
    # A refused claim left the GPU suspect; a move by the rules settles the dispute.
    assert (moved["health"], moved["health_reason"]) == ("healthy", None)


def test_claim_succeeds_once_the_old_node_is_unreachable(fleet, store, claim, clock, gf):
    assert post_registration(fleet, claim["token"], claim["body"]).status_code == 409
    clock.advance(3 * 30 + 1)
    assert gf.mark_silent_nodes_unreachable() == ["node-1"]
    response = post_registration(fleet, claim["token"], claim["body"])
    assert response.status_code == 200, response.text
    assert response.json()["credential"]
    _assert_moved(fleet, store, "old node unreachable")


@SQLITE_ONLY
def test_not_yet_unreachable_is_still_live(fleet, claim, clock, gf):
    clock.advance(3 * 30)
    assert gf.mark_silent_nodes_unreachable() == []
    assert post_registration(fleet, claim["token"], claim["body"]).status_code == 409


def test_claim_succeeds_once_the_old_node_is_retired(fleet, store, claim):
    assert fleet.post("/api/v1/nodes/node-1/retire", json={"reason": "rma"}).status_code == 200
    response = post_registration(fleet, claim["token"], claim["body"])
    assert response.status_code == 200, response.text
    _assert_moved(fleet, store, "old node retired")


def test_claim_succeeds_with_an_operators_approval(fleet, store, claim):
    assert post_registration(fleet, claim["token"], claim["body"]).status_code == 409
    wrong_node = fleet.post(f"/api/v1/gpus/{gpu_uuid(1, 1)}/move-approvals",
                            json={"to_node": "node-3"})
    assert wrong_node.status_code == 404, wrong_node.text
    assert error_code(wrong_node) == "node_not_found"
    assert post_registration(fleet, claim["token"], claim["body"]).status_code == 409
    approval = fleet.post(f"/api/v1/gpus/{gpu_uuid(1, 1).upper()}"
                          "/move-approvals", json={"to_node": "node-2", "reason": "moved"})
    assert approval.status_code == 201, approval.text
    assert approval.json()["gpu_uuid"] == gpu_uuid(1, 1)
    assert approval.json()["used_at"] is None
    response = post_registration(fleet, claim["token"], claim["body"])
    assert response.status_code == 200, response.text
    _assert_moved(fleet, store, "operator approved")
    with store.read() as session:
        used = {a.to_node_name: a.used_at for a in session.scalars(select(GpuMoveApproval))}
    assert used == {"node-2": used["node-2"]} and used["node-2"] is not None
    assert "gpu.move_approved" in audit_actions(fleet)


def test_a_move_approval_names_a_node_of_the_inventory_or_the_gpus_claimant(fleet, store,
                                                                            claim):
    """A name that is neither a node nor the host refused for claiming this GPU is 404, and
    nothing is written; a registered node (or the refused claimant, above) is approved."""
    register(fleet, 3, gpus=1)
    post_registration(fleet, claim["token"], claim["body"])  # node-2 claims GPU 1/1
    before = count(store, GpuMoveApproval)

    def approve(uuid: str, to_node: str):
        return fleet.post(f"/api/v1/gpus/{uuid}/move-approvals", json={"to_node": to_node})

    for uuid, to_node in ((gpu_uuid(1, 1), "node-9"), (gpu_uuid(1, 1), "Node-2"),
                          (gpu_uuid(1, 0), "node-2")):  # node-2 claimed 1/1, not 1/0
        response = approve(uuid, to_node)
        assert response.status_code == 404, (uuid, to_node, response.text)
        assert response.json()["error"]["details"] == {"node": to_node}
    assert count(store, GpuMoveApproval) == before
    assert approve(gpu_uuid(1, 0), "node-3").status_code == 201
    assert approve(gpu_uuid(1, 1), "node-2").status_code == 201


def test_an_approval_is_spent_by_one_move(fleet, store, claim, clock, gf):
    assert post_registration(fleet, claim["token"], claim["body"]).status_code == 409
    fleet.post(f"/api/v1/gpus/{gpu_uuid(1, 1)}/move-approvals", json={"to_node": "node-2"})
    second = post_registration(fleet, claim["token"], claim["body"]).json()["credential"]
    # node-1 takes the GPU back (node-2 is silent), then node-2 claims it again: refused.
    clock.advance(100)
    fleet.as_(claim["credential"]).post(HEARTBEAT, json={})
    assert gf.mark_silent_nodes_unreachable() == ["node-2"]
    assert post_registration(fleet, claim["credential"], registration(1, gpus=2)).status_code \
        == 200
    fleet.as_(second).post(HEARTBEAT, json={})
    response = post_registration(fleet, second, claim["body"])
    assert response.status_code == 409
    assert error_code(response) == "gpu_claimed_by_other_node"


# --- re-registration ----------------------------------------------------------------------


def test_reregistration_with_the_credential_is_idempotent(fleet, store, clock):
    body = registration(1, gpus=2)
    body["gpus"][0].update(mig_enabled=True, mig_instances=[
        {"profile_id": 19, "placement_start": 0, "mig_uuid": "MIG-a"},
        {"profile_id": 9, "placement_start": 4, "mig_uuid": "MIG-b"}])
    credential = join(fleet, body)["credential"]
    before = snapshot(store)
    clock.advance(10)
    for _ in range(2):
        again = post_registration(fleet, credential, body)
        assert again.status_code == 200, again.text
        reply = again.json()
        assert reply["credential"] is None
        assert (reply["node"], reply["gpus_registered"]) == ("node-1", 2)
    assert snapshot(store) == before
    assert count(store, AuditEvent, AuditEvent.action == "node.reregistered") == 0
    assert fleet.as_(credential).post(HEARTBEAT, json={}).status_code == 200
    with store.read() as session:
        assert session.scalar(select(Node.last_seen_at)) == clock.now()


def test_a_changed_inventory_is_audited(fleet, store):
    credential = register(fleet, 1, gpus=2)["credential"]
    grown = post_registration(fleet, credential, registration(1, gpus=3))
    assert grown.status_code == 200
    events = fleet.get("/api/v1/audit-events",
                       params={"action": "node.reregistered"}).json()["items"]
    assert [e["details"].get("added_gpus") for e in events] == [[gpu_uuid(1, 2)]]


# --- a join token presented for a machine id that is already a node ----------------------


def _go_silent(clock, gf, *names: str) -> None:
    clock.advance(3 * 30 + 1)
    assert gf.mark_silent_nodes_unreachable() == list(names)


def _refusal(fleet) -> dict:
    (event,) = fleet.get("/api/v1/audit-events",
                         params={"action": "node.join_refused"}).json()["items"]
    return event


def test_join_token_cannot_take_over_a_live_node(fleet, store):
    """The working agent keeps its credential and its node; the join token is not spent."""
    old = register(fleet, 1, gpus=2)["credential"]
    token = join_token(fleet)
    before = snapshot(store)
    response = post_registration(fleet, token, registration(1, gpus=2, hostname="intruder"))
    assert response.status_code == 409, response.text
    assert error_code(response) == "node_live"
    assert response.json()["error"]["details"] == {"node": "node-1", "status": "ready"}
    assert "desired_state" not in response.text
    after = snapshot(store)
    assert {k: v for k, v in after.items() if k != "audit"} == {
        k: v for k, v in before.items() if k != "audit"}
    assert fleet.as_(old).post(HEARTBEAT, json={}).status_code == 200
    event = _refusal(fleet)
    assert (event["subject"], event["details"]["machine_id"]) == ("node-1", "machine-1")
    assert event["details"]["hostname"] == "intruder"
    assert event["actor"].startswith("join-token:")


def test_join_token_cannot_take_over_a_cordoned_node(fleet, store):
    register(fleet, 1, gpus=1)
    assert fleet.post("/api/v1/nodes/node-1/cordon").status_code == 200
    response = post_registration(fleet, join_token(fleet), registration(1, gpus=1))
    assert response.status_code == 409
    assert error_code(response) == "node_live"
    assert join_token_used(store) == [True, False]


def test_join_token_cannot_take_over_a_node_of_another_environment(fleet, store, clock, gf):
    create_environment(fleet, "azure-koreacentral", kind="cloud")
    old = register(fleet, 1, gpus=1)["credential"]
    _go_silent(clock, gf, "node-1")
    response = post_registration(fleet, join_token(fleet, "azure-koreacentral"),
                                 registration(1, gpus=1))
    assert response.status_code == 409, response.text
    assert error_code(response) == "environment_mismatch"
    assert response.json()["error"]["details"] == {
        "node": "node-1", "environment": "onprem-hpc", "join_token_environment":
        "azure-koreacentral"}
    assert fleet.get("/api/v1/nodes/node-1").json()["environment"] == "onprem-hpc"
    assert count(store, ApiToken, ApiToken.node_id == _node_id(store, "node-1"),
                 ApiToken.revoked_at.is_(None)) == 1
    assert fleet.as_(old).post(HEARTBEAT, json={}).status_code == 200
    assert _refusal(fleet)["details"]["join_token_environment"] == "azure-koreacentral"


def test_join_token_takes_over_an_unreachable_node(fleet, store, clock, gf):
    """A machine whose agent lost its state rejoins once its old agent has gone silent."""
    old = register(fleet, 1, gpus=2)["credential"]
    node_id = _node_id(store, "node-1")
    _go_silent(clock, gf, "node-1")
    reply = post_registration(fleet, join_token(fleet), registration(1, gpus=2))
    assert reply.status_code == 200, reply.text
    new = reply.json()["credential"]
    assert new and new != old
    assert reply.json()["node_status"] == "ready"
    assert _node_id(store, "node-1") == node_id
    assert count(store, Node) == 1
    assert count(store, Gpu) == 2
    revoked = fleet.as_(old).post(HEARTBEAT, json={})
    assert revoked.status_code == 401
    assert error_code(revoked) == "token_revoked"
    assert fleet.as_(new).post(HEARTBEAT, json={}).status_code == 200
    assert count(store, ApiToken, ApiToken.node_id == node_id,
                 ApiToken.revoked_at.is_(None)) == 1
    assert audit_actions(fleet, subject="node-1")[:2] == ["node.reregistered", "node.unreachable"]


def test_retired_node_stays_retired(fleet, store):
    """A join token does not revive a node an operator retired (docs/lifecycle.md)."""
    register(fleet, 1, gpus=1)
    fleet.post("/api/v1/nodes/node-1/retire")
    before = snapshot(store)
    reply = post_registration(fleet, join_token(fleet), registration(1, gpus=1))
    assert reply.status_code == 409, reply.text
    assert error_code(reply) == "node_retired"
    assert "retired" in reply.json()["error"]["message"]
    after = snapshot(store)
    assert after["nodes"] == before["nodes"]
    assert after["tokens"] == before["tokens"]
    assert join_token_used(store) == [True, False]
    assert fleet.get("/api/v1/nodes/node-1").json()["status"] == "retired"
    assert fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()["status"] == "retired"
    assert _refusal(fleet)["details"]["status"] == "retired"


@SQLITE_ONLY
def test_hostname_of_a_live_node_is_taken(fleet, store):
    register(fleet, 1, gpus=1)
    token = join_token(fleet)
    before = snapshot(store)
    response = post_registration(fleet, token, registration(2, gpus=1, hostname="node-1"))
    assert response.status_code == 409
    assert error_code(response) == "hostname_taken"
    assert response.json()["error"]["details"] == {"node": "node-1"}
    assert snapshot(store) == before


@SQLITE_ONLY
def test_hostname_of_a_retired_node_is_reused(fleet, store):
    register(fleet, 1, gpus=1)
    fleet.post("/api/v1/nodes/node-1/retire")
    response = post_registration(fleet, join_token(fleet), registration(2, gpus=1,
                                                                       hostname="node-1"))
    assert response.status_code == 200, response.text
    with store.read() as session:
        names = dict(session.execute(select(Node.machine_id, Node.name)).all())
    assert names["machine-2"] == "node-1"
    assert names["machine-1"].startswith("node-1~retired-")


def test_gpu_missing_from_a_reregistration_becomes_suspect(fleet, store):
    credential = register(fleet, 1, gpus=3)["credential"]
    assert post_registration(fleet, credential, registration(1, gpus=2)).status_code == 200
    missing = fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 2)}").json()
    assert (missing["node"], missing["health"]) == ("node-1", "suspect")
    assert "missing" in missing["health_reason"]
    events = fleet.get("/api/v1/audit-events",
                       params={"action": "node.reregistered"}).json()["items"]
    assert events[0]["details"]["missing_gpus"] == [gpu_uuid(1, 2)]
    # It comes back: healthy again.
    assert post_registration(fleet, credential, registration(1, gpus=3)).status_code == 200
    back = fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 2)}").json()
    assert (back["health"], back["health_reason"]) == ("healthy", None)


@SQLITE_ONLY
def test_quarantine_survives_reregistration(fleet):
    credential = register(fleet, 1, gpus=2)["credential"]
    fleet.post(f"/api/v1/gpus/{gpu_uuid(1, 0)}/health",
               json={"health": "quarantined", "reason": "xid 79"})
    post_registration(fleet, credential, registration(1, gpus=2))
    kept = fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()
    assert (kept["health"], kept["status"]) == ("quarantined", "quarantined")


@SQLITE_ONLY
def test_node_attributes_follow_the_latest_registration(fleet):
    credential = register(fleet, 1, gpus=1)["credential"]
    body = registration(1, gpus=1, cpu_cores=64, memory_bytes=512 * GIB,
                        labels={"rack": "r9", "zone": "b"}, agent_version="1.2.3",
                        driver_version="570.86.15", cuda_version="12.8", os_name="Ubuntu 24.04")
    assert post_registration(fleet, credential, body).status_code == 200
    node = fleet.get("/api/v1/nodes/node-1").json()
    assert (node["cpu_cores"], node["memory_bytes"]) == (64, 512 * GIB)
    assert node["labels"] == {"rack": "r9", "zone": "b"}
    assert (node["agent_version"], node["driver_version"], node["cuda_version"],
            node["os_name"]) == ("1.2.3", "570.86.15", "12.8", "Ubuntu 24.04")


# --- heartbeat ----------------------------------------------------------------------------


@SQLITE_ONLY
def test_heartbeat_updates_last_seen_and_carries_desired_state(fleet, clock):
    credential = register(fleet, 1, gpus=1)["credential"]
    clock.advance(30)
    response = fleet.as_(credential).post(HEARTBEAT, json={"agent_version": "0.2.0",
                                                           "applied_desired_state_version": 1})
    assert response.status_code == 200
    reply = response.json()
    assert reply["node"] == "node-1"
    assert reply["node_status"] == "ready"
    assert reply["heartbeat_interval_s"] == 30
    assert reply["desired_state"]["version"] == 1
    assert reply["desired_state"]["bindings"] == []
    node = fleet.get("/api/v1/nodes/node-1").json()
    assert node["last_seen_at"] == clock.now().isoformat().replace("+00:00", "Z")
    assert node["agent_version"] == "0.2.0"


@SQLITE_ONLY
def test_unreachable_node_is_ready_again_on_heartbeat(fleet, clock, gf):
    credential = register(fleet, 1, gpus=1)["credential"]
    clock.advance(91)
    assert gf.mark_silent_nodes_unreachable() == ["node-1"]
    assert fleet.get("/api/v1/nodes/node-1").json()["status"] == "unreachable"
    assert fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()["status"] == "unreachable"
    reply = fleet.as_(credential).post(HEARTBEAT, json={}).json()
    assert reply["node_status"] == "ready"
    assert fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()["status"] == "free"
    assert audit_actions(fleet, subject="node-1")[:2] == ["node.reachable", "node.unreachable"]


@SQLITE_ONLY
def test_cordoned_node_returns_to_cordoned_not_ready(fleet, clock, gf):
    credential = register(fleet, 1, gpus=1)["credential"]
    fleet.post("/api/v1/nodes/node-1/cordon", json={"reason": "maintenance"})
    clock.advance(91)
    gf.mark_silent_nodes_unreachable()
    assert fleet.get("/api/v1/nodes/node-1").json()["status"] == "unreachable"
    reply = fleet.as_(credential).post(HEARTBEAT, json={}).json()
    assert reply["node_status"] == "cordoned"
    assert fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()["status"] == "cordoned"


@SQLITE_ONLY
def test_reregistration_of_an_unreachable_node_makes_it_reachable(fleet, clock, gf):
    credential = register(fleet, 1, gpus=1)["credential"]
    clock.advance(91)
    gf.mark_silent_nodes_unreachable()
    reply = post_registration(fleet, credential, registration(1, gpus=1)).json()
    assert reply["node_status"] == "ready"


def test_retired_nodes_credential_is_revoked(fleet, store):
    credential = register(fleet, 1, gpus=1)["credential"]
    assert fleet.post("/api/v1/nodes/node-1/retire").status_code == 200
    for path, body in ((HEARTBEAT, {}), (REGISTER, registration(1, gpus=1))):
        response = fleet.as_(credential).post(path, json=body)
        assert response.status_code == 401
        assert error_code(response) == "token_revoked"
    assert count(store, ApiToken, ApiToken.node_id.is_not(None),
                 ApiToken.revoked_at.is_(None)) == 0


@SQLITE_ONLY
def test_heartbeat_needs_a_node_credential(fleet):
    register(fleet, 1, gpus=1)
    response = fleet.post(HEARTBEAT, json={})
    assert response.status_code == 403
    assert fleet.post(HEARTBEAT, json={"applied_desired_state_version": -1}).status_code == 422


# --- what a registration records ---------------------------------------------------------


@SQLITE_ONLY
def test_model_normalisation(fleet):
    cases = [  # reported name, PCI device id -> model, known
        ("NVIDIA H100 80GB HBM3", 0x233010DE, "H100-80GB", True),
        ("Some name a new driver prints", 0x233010DE, "H100-80GB", True),  # by PCI id
        ("NVIDIA A100-SXM4-80GB", None, "A100-80GB", True),  # by name
        ("NVIDIA L40S", 0xFFFF10DE, "L40S-48GB", True),  # unknown PCI id, known name
        ("NVIDIA Mystery 9000", 0x999910DE, "NVIDIA Mystery 9000", False),
        ("NVIDIA Mystery 9000", None, "NVIDIA Mystery 9000", False),
    ]
    join(fleet, with_gpus(1, *(gpu(1, i, name=name, pci_device_id=pci)
                               for i, (name, pci, _, _) in enumerate(cases))))
    for i, (name, _, model, known) in enumerate(cases):
        view = fleet.get(f"/api/v1/gpus/{gpu_uuid(1, i)}").json()
        assert (view["model"], view["model_known"], view["reported_name"]) == \
            (model, known, name), name
    unknown = fleet.get("/api/v1/gpus", params={"model_known": "false"}).json()["items"]
    assert [g["uuid"] for g in unknown] == [gpu_uuid(1, 4), gpu_uuid(1, 5)]


@SQLITE_ONLY
def test_sharing_mode(api):
    cases = [  # environment default, reported, MIG mode -> sharing mode
        ("exclusive", None, False, "exclusive"),
        ("shared", None, False, "shared"),
        ("mig", None, True, "mig"),
        ("exclusive", None, True, "mig"),
        ("shared", None, True, "mig"),
        ("exclusive", "shared", False, "shared"),
        ("mig", "exclusive", True, "exclusive"),
        ("mig", None, False, "exclusive"),  # MIG mode is off: the environment's mig cannot apply
    ]
    for default in ("exclusive", "shared", "mig"):
        create_environment(api, default, default_sharing_mode=default)
    for n, (default, reported, mig_enabled, _) in enumerate(cases):
        extra = {"mig_enabled": mig_enabled, **({"sharing_mode": reported} if reported else {})}
        join(api, with_gpus(n, gpu(n, 0, **extra)), environment=default)
    for n, case in enumerate(cases):
        assert api.get(f"/api/v1/gpus/{gpu_uuid(n, 0)}").json()["sharing_mode"] == case[3], case


def _mig_rows(store) -> dict[tuple, tuple]:
    with store.read() as session:
        rows = session.execute(select(MigInstance.profile_id, MigInstance.placement_start,
                                      MigInstance.id, MigInstance.placement_size,
                                      MigInstance.profile_name, MigInstance.mig_uuid,
                                      MigInstance.gpu_instance_id)).all()
    return {(r[0], r[1]): tuple(r[2:]) for r in rows}


def test_mig_instances_are_keyed_by_profile_and_placement(fleet, store):
    instances = [
        {"profile_id": 19, "placement_start": 0, "mig_uuid": "MIG-a", "gpu_instance_id": 7},
        {"profile_id": 19, "placement_start": 1, "mig_uuid": "MIG-b", "gpu_instance_id": 8},
        {"profile_id": 14, "placement_start": 2, "placement_size": 2, "mig_uuid": "MIG-c"},
        {"profile_id": 9, "placement_start": 4, "profile_name": "3g.39gb", "mig_uuid": "MIG-d"},
    ]
    body = with_gpus(1, gpu(1, 0, mig_enabled=True, mig_instances=instances))
    credential = join(fleet, body)["credential"]
    first = _mig_rows(store)
    assert set(first) == {(19, 0), (19, 1), (14, 2), (9, 4)}
    # Sizes and names come from the geometry when the node does not say; names it reports
    # are kept for display.
    assert first[(19, 0)][1:4] == (1, "1g.10gb", "MIG-a")
    assert first[(14, 2)][1:3] == (2, "2g.20gb")
    assert first[(9, 4)][1:3] == (4, "3g.39gb")
    view = fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()
    assert view["sharing_mode"] == "mig"
    assert [(m["profile_id"], m["placement_start"]) for m in view["mig_instances"]] == \
        [(19, 0), (19, 1), (14, 2), (9, 4)]

    # Recreated by the driver: new MIG UUIDs and instance ids, same (profile, placement).
    # (19, 1) and (14, 2) are gone, (15, 2) is new.
    body["gpus"][0]["mig_instances"] = [
        {"profile_id": 19, "placement_start": 0, "mig_uuid": "MIG-a2", "gpu_instance_id": 9},
        {"profile_id": 15, "placement_start": 2, "mig_uuid": "MIG-e"},
        {"profile_id": 9, "placement_start": 4, "mig_uuid": "MIG-d2"},
    ]
    assert post_registration(fleet, credential, body).status_code == 200
    second = _mig_rows(store)
    assert set(second) == {(19, 0), (15, 2), (9, 4)}
    assert second[(19, 0)][0] == first[(19, 0)][0]  # the same row, updated
    assert second[(19, 0)][3:] == ("MIG-a2", 9)
    assert second[(9, 4)][0] == first[(9, 4)][0]
    assert second[(15, 2)][1:3] == (2, "1g.20gb")

    body["gpus"][0] = gpu(1, 0)  # MIG mode switched off
    assert post_registration(fleet, credential, body).status_code == 200
    assert _mig_rows(store) == {}
    assert fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()["sharing_mode"] == "exclusive"


def test_mig_instances_without_placement_are_told_apart_by_instance_id(fleet, store):
    """A source without placements (dcgm-exporter) still reports every instance."""
    body = with_gpus(1, gpu(1, 0, mig_enabled=True, mig_instances=[
        {"profile_id": 19, "gpu_instance_id": 7, "mig_uuid": "MIG-a"},
        {"profile_id": 19, "gpu_instance_id": 8, "mig_uuid": "MIG-b"},
        {"profile_id": 9, "gpu_instance_id": 2, "mig_uuid": "MIG-c"},
    ]))
    credential = join(fleet, body)["credential"]
    view = fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()
    assert sorted(m["mig_uuid"] for m in view["mig_instances"]) == ["MIG-a", "MIG-b", "MIG-c"]
    assert all(m["placement_start"] is None and m["placement_size"] is None
               for m in view["mig_instances"])
    assert post_registration(fleet, credential, body).status_code == 200
    assert count(store, MigInstance) == 3


@SQLITE_ONLY
def test_gpu_attributes_are_stored(fleet):
    peers = [gpu_uuid(1, 1).upper()]
    join(fleet, with_gpus(1, gpu(1, 0, pci_bus_id="00000000:18:00.0",
                                 driver_version="570.86.15", nvlink_peers=peers), gpu(1, 1)))
    view = fleet.get(f"/api/v1/gpus/{gpu_uuid(1, 0).upper()}").json()
    assert view["uuid"] == gpu_uuid(1, 0)
    assert (view["pci_bus_id"], view["driver_version"]) == ("00000000:18:00.0", "570.86.15")
    assert view["nvlink_peers"] == [gpu_uuid(1, 1)]
    assert view["memory_bytes"] == 80 * GIB
    assert view["pci_device_id"] == 0x233010DE
    assert (view["health"], view["status"], view["environment"]) == ("healthy", "free",
                                                                      "onprem-hpc")


@SQLITE_ONLY
def test_uuid_case_does_not_make_a_second_gpu(fleet, store):
    credential = register(fleet, 1, gpus=1)["credential"]
    body = with_gpus(1, gpu(1, 0, uuid=gpu_uuid(1, 0).upper()))
    assert post_registration(fleet, credential, body).status_code == 200
    assert count(store, Gpu) == 1


@SQLITE_ONLY
def test_registration_reply(fleet, settings):
    reply = register(fleet, 1, gpus=3)
    assert reply["node"] == "node-1"
    assert reply["node_status"] == "ready"
    assert reply["environment"] == "onprem-hpc"
    assert reply["credential"].startswith("gfa_")
    assert reply["heartbeat_interval_s"] == settings.heartbeat_interval_s
    assert reply["desired_state"] == {"version": 1, "bindings": [], "mig_plans": []}
    assert reply["gpus_registered"] == 3
    assert audit_actions(fleet, subject="node-1") == ["node.registered"]
