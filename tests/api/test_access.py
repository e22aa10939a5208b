"""Who may call what: every route × every kind of caller, and the scoping on top of roles.

The expected grants are written out here, not imported from `gpufleet.domain.access`, so a
change to either the code or this table is caught. Every route of the app must have a row:
a new route without one fails `test_every_route_is_in_the_matrix`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpufleet.clock import ManualClock
from gpufleet.domain.operations.notifications import Severity
from gpufleet.domain.operations.observations import Observation
from gpufleet.domain.operations.reclaim_policy import Scope
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.services.chatops.identity import ChatUser
from gpufleet.services.operations.alerts import AlertEvaluation
from gpufleet.store.tables import Gpu, GpuLabel, Node
from gpufleet.wire.alerts import SilenceCreate
from gpufleet.wire.billing import RateSet
from gpufleet.wire.chatops import ChatIdentityLink
from gpufleet.wire.events import EventSubscriptionCreate
from gpufleet.wire.inventory import GpuHealthChange, UserCreate
from gpufleet.wire.receivers import ReceiverCreate
from gpufleet.wire.reclaim import PolicySet
from gpufleet.wire.remote_write import encode_write_request
from gpufleet.wire.requests import PoolCreate, RequestCreate
from gpufleet.wire.telemetry import NodeSnapshot, UnitSnapshot
from gpufleet.wire.telemetry_batch import columnar, encode
from tests.helpers import create_environment, gpu_uuid, join_token, register, registration
from tests.module_world import module_world, shared_client


@pytest.fixture
def client(gf):
    """The conftest client, on one app shared by the session (tests.module_world)."""
    with shared_client(gf) as shared:
        yield shared


# --- the matrix --------------------------------------------------------------------------

ROLES = ("admin", "operator", "member", "viewer", "agent", "ingest")
# Callers that are not a valid API token: each must get 401 everywhere it is not allowed.
NOT_AUTHENTICATED = ("none", "revoked", "expired", "join")
CALLERS = ROLES + NOT_AUTHENTICATED

EVERYONE = frozenset(ROLES)
READERS = frozenset({"admin", "operator", "member", "viewer"})
OPERATORS = frozenset({"admin", "operator"})
ADMIN = frozenset({"admin"})
REQUESTERS = frozenset({"admin", "operator", "member"})

MATRIX: dict[tuple[str, str], frozenset[str]] = {
    ("GET", "/api/v1/whoami"): EVERYONE,
    ("POST", "/api/v1/tokens"): ADMIN,
    ("GET", "/api/v1/tokens"): ADMIN,
    ("GET", "/api/v1/server/settings"): ADMIN,
    ("POST", "/api/v1/tokens/{token_id}/revoke"): ADMIN,
    ("POST", "/api/v1/join-tokens"): OPERATORS,
    ("GET", "/api/v1/users"): OPERATORS,
    ("POST", "/api/v1/users"): ADMIN,
    ("GET", "/api/v1/projects"): READERS,
    ("POST", "/api/v1/projects"): OPERATORS,
    ("GET", "/api/v1/projects/{name}"): READERS,
    ("POST", "/api/v1/projects/{name}/members"): OPERATORS,
    ("GET", "/api/v1/audit-events"): OPERATORS,
    ("GET", "/api/v1/fleet/summary"): READERS,
    ("GET", "/metrics"): READERS - {"member"},  # every project's allocations
    ("GET", "/api/v1/gpus"): READERS,
    ("GET", "/api/v1/gpus/{uuid}"): READERS,
    ("GET", "/api/v1/gpus/{uuid}/bindings"): READERS,  # members: their projects' bindings
    ("POST", "/api/v1/gpus/{uuid}/health"): OPERATORS,
    # members: only the GPUs their projects hold (the builder picks one vision holds)
    ("GET", "/api/v1/gpus/{uuid}/health"): READERS,
    ("POST", "/api/v1/gpus/{uuid}/clear"): OPERATORS,
    ("POST", "/api/v1/gpus/{uuid}/retire"): OPERATORS,
    ("POST", "/api/v1/gpus/{uuid}/move-approvals"): OPERATORS,
    ("GET", "/api/v1/nodes"): READERS,
    ("GET", "/api/v1/nodes/{name}"): READERS,
    ("POST", "/api/v1/nodes/{name}/cordon"): OPERATORS,
    ("POST", "/api/v1/nodes/{name}/uncordon"): OPERATORS,
    ("POST", "/api/v1/nodes/{name}/retire"): OPERATORS,
    ("GET", "/api/v1/environments"): READERS,
    ("POST", "/api/v1/environments"): OPERATORS,
    # Registration is authenticated by the token itself: a join token admits a new node,
    # a node's own credential re-registers it; no other token may.
    ("POST", "/api/v1/agent/register"): frozenset({"agent", "join"}),
    ("POST", "/api/v1/agent/heartbeat"): frozenset({"agent"}),
    # Telemetry in: a node's agent for its own GPUs; an ingest token (a relay) for any node's.
    ("POST", "/api/v1/telemetry/batches"): frozenset({"agent", "ingest"}),
    # Prometheus remote-write: ingest tokens only (agents upload batches).
    ("POST", "/api/v1/telemetry/remote-write"): frozenset({"ingest"}),
    # The lifecycle: members request for their own projects, operators decide.
    ("POST", "/api/v1/requests"): REQUESTERS,
    ("POST", "/api/v1/requests/preview"): REQUESTERS,
    ("GET", "/api/v1/requests"): READERS,
    ("GET", "/api/v1/requests/{code}"): READERS,
    ("GET", "/api/v1/requests/{code}/why"): READERS,
    ("GET", "/api/v1/requests/{code}/history"): READERS,
    ("POST", "/api/v1/requests/{code}/approve"): OPERATORS,
    ("POST", "/api/v1/requests/{code}/reject"): OPERATORS,
    ("POST", "/api/v1/requests/{code}/cancel"): REQUESTERS,
    ("POST", "/api/v1/requests/{code}/release"): REQUESTERS,
    ("POST", "/api/v1/requests/{code}/extend"): REQUESTERS,
    ("POST", "/api/v1/pools"): REQUESTERS,
    ("GET", "/api/v1/pools"): READERS,
    ("GET", "/api/v1/pools/{code}"): READERS,
    ("POST", "/api/v1/pools/{code}/approve"): OPERATORS,
    ("POST", "/api/v1/pools/{code}/reject"): OPERATORS,
    ("POST", "/api/v1/pools/{code}/end"): REQUESTERS,
    ("GET", "/api/v1/projects/{name}/quotas"): READERS,
    ("GET", "/api/v1/placement/fleet-state"): READERS,
    ("PUT", "/api/v1/projects/{name}/quotas"): OPERATORS,
    ("DELETE", "/api/v1/projects/{name}/quotas/{flavour:path}"): OPERATORS,
    ("PUT", "/api/v1/projects/{name}/auto-approve"): OPERATORS,
    ("DELETE", "/api/v1/projects/{name}/auto-approve"): OPERATORS,
    # MIG layouts as a mig-parted config: inventory, which every reader sees.
    ("GET", "/api/v1/mig/configs"): READERS,
    # Telemetry queries: readers; members see their own projects' allocations.
    ("GET", "/api/v1/telemetry/query"): READERS,
    ("GET", "/api/v1/telemetry/latest"): READERS,
    ("GET", "/api/v1/telemetry/funnel"): READERS,
    ("GET", "/api/v1/telemetry/idle"): READERS,
    ("GET", "/api/v1/telemetry/zombies"): READERS,
    ("GET", "/api/v1/telemetry/unattributed"): READERS,
    ("GET", "/api/v1/telemetry/top"): READERS,
    # Events: readers see those of the projects they see (scoping tested in test_events.py);
    # subscriptions send every project's events out, so they are the operators'.
    ("GET", "/api/v1/events"): READERS,
    ("GET", "/api/v1/events/stream"): READERS,
    ("POST", "/api/v1/event-subscriptions"): OPERATORS,
    ("GET", "/api/v1/event-subscriptions"): OPERATORS,
    ("DELETE", "/api/v1/event-subscriptions/{name}"): OPERATORS,
    # Alerts: readers (members: their projects' and fleet-wide ones); operators act.
    ("GET", "/api/v1/alerts"): READERS,
    ("GET", "/api/v1/alerts/history"): READERS,
    ("GET", "/api/v1/alerts/{fingerprint}"): READERS,
    ("POST", "/api/v1/alerts/{fingerprint}/ack"): OPERATORS,
    ("POST", "/api/v1/silences"): OPERATORS,
    ("GET", "/api/v1/silences"): READERS,
    ("DELETE", "/api/v1/silences/{silence_id}"): OPERATORS,
    # Reclamation: readers read (members their projects' part); operators set policies,
    # run rounds and grant exemptions; owners may ask for one (it protects nothing until
    # an operator grants it: docs/operations.md, "Exemptions").
    ("GET", "/api/v1/reclaim/policies"): READERS,
    ("GET", "/api/v1/reclaim/policies/effective"): READERS,
    ("PUT", "/api/v1/reclaim/policies/{scope}/{name}"): OPERATORS,
    ("DELETE", "/api/v1/reclaim/policies/{scope}/{name}"): OPERATORS,
    ("POST", "/api/v1/reclaim/run"): OPERATORS,
    ("GET", "/api/v1/reclaim/warnings"): READERS,
    ("GET", "/api/v1/reclaim/exemptions"): READERS,
    ("GET", "/api/v1/reclaim/report"): READERS,
    ("POST", "/api/v1/requests/{code}/exempt"): REQUESTERS,
    # Receivers hold secrets: admins write them, operators read them and their log.
    ("POST", "/api/v1/receivers"): ADMIN,
    ("GET", "/api/v1/receivers"): OPERATORS,
    ("GET", "/api/v1/receivers/{name}"): OPERATORS,
    ("DELETE", "/api/v1/receivers/{name}"): ADMIN,
    ("PATCH", "/api/v1/receivers/{name}"): ADMIN,
    ("POST", "/api/v1/receivers/{name}/test"): ADMIN,
    ("GET", "/api/v1/receivers/{name}/deliveries"): OPERATORS,
    # Every person reads their own notifications.
    ("GET", "/api/v1/notifications"): READERS,
    # Alert rules: everyone reads (and tests a rule file: members see their projects'
    # observations only), operators write.
    ("GET", "/api/v1/alert-rules"): READERS,
    ("GET", "/api/v1/alert-rules/{name}"): READERS,
    ("PUT", "/api/v1/alert-rules/{name}"): OPERATORS,
    ("DELETE", "/api/v1/alert-rules/{name}"): OPERATORS,
    ("POST", "/api/v1/alert-rules/test"): READERS,
    # Rate cards: prices are no secret (statements are scoped); administrators set them.
    ("GET", "/api/v1/billing/rates"): READERS,
    ("POST", "/api/v1/billing/rates"): ADMIN,
    ("POST", "/api/v1/billing/rates/{rate_id}/end"): ADMIN,
    # Chat-ops (docs/chatops.md, "Identity"): a person links their own chat user; operators
    # see who is who; administrators link and unlink others.
    ("POST", "/api/v1/chatops/links"): READERS,
    ("GET", "/api/v1/chatops/identities"): OPERATORS,
    ("POST", "/api/v1/chatops/identities"): ADMIN,
    ("DELETE", "/api/v1/chatops/identities/{platform}/{team_id}/{chat_user_id}"): ADMIN,
    ("GET", "/api/v1/billing/statements"): READERS,
}

# Intentionally public, and the only exceptions: probes and the API's own documentation.
PUBLIC = {
    ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/docs"), ("GET", "/openapi.json"),
    ("GET", "/docs/oauth2-redirect"), ("GET", "/redoc"),
}
# The chat platforms' request URLs: Slack signs each request, Mattermost sends a command
# token; neither carries a bearer token (tests/api/chatops/ covers who gets through).
CHAT_PLATFORMS = {
    ("POST", "/api/v1/chatops/slack/commands"), ("POST", "/api/v1/chatops/slack/interactions"),
    ("POST", "/api/v1/chatops/mattermost/commands"),
}
# Static files of /docs and /redoc: public like the pages (tests/api/test_offline_pages.py).
PUBLIC_MOUNTS = {("*", "/docs-assets")}
# The dashboard signs in with a session cookie, not a bearer token; its assets are public.
# Every route under /ui/ is a dashboard page, whose role checks tests/web/ covers (each
# page is built with the caller's principal through the same services; docs/dashboard.md).
DASHBOARD = {
    ("GET", "/"), ("GET", "/ui/login"), ("POST", "/ui/login"), ("POST", "/ui/logout"),
    ("GET", "/ui/"), ("*", "/ui/static"),
}


def expected_status(caller: str, route: tuple[str, str]) -> int | None:
    """None: allowed (any 2xx); otherwise the status the caller must get."""
    if caller in MATRIX[route]:
        return None
    return 401 if caller in NOT_AUTHENTICATED else 403


CASES = list(itertools.product(CALLERS, MATRIX))


# --- one fleet per database for the whole matrix -----------------------------------------

NODE_SELF, NODE_CORDON, NODE_RETIRE, NODE_NEW = 1, 2, 3, 50
NODE_SPARE = 4  # its GPUs are retired one per allowed caller (a retirement is for good)


@dataclass
class World:
    gf: Gpufleet
    client: TestClient
    clock: ManualClock
    tokens: dict[str, str | None] = field(default_factory=dict)
    throwaway_token_id: int = 0
    vision_request: str = ""
    vision_pool: str = ""
    serial: itertools.count = field(default_factory=itertools.count)

    def unique(self, prefix: str) -> str:
        return f"{prefix}{next(self.serial)}"


# Roles are enforced in Python above the database, so the 540-case matrix runs on SQLite;
# the scoping tests below, which query, run on both databases.
@pytest.fixture(scope="module", params=["sqlite"])
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory) as m:
        api, clock = m.api, m.clock
        w = World(m.gf, m.client, clock)
        create_environment(api)
        agent = register(api, NODE_SELF, gpus=2)["credential"]
        register(api, NODE_CORDON, gpus=1)
        register(api, NODE_RETIRE, gpus=1)
        register(api, NODE_SPARE, gpus=len(ROLES))
        for user, role in (("olga", "operator"), ("mia", "member"), ("vic", "viewer")):
            assert api.post("/api/v1/users", json={"name": user, "role": role}).status_code == 201
        for project in ("vision", "speech"):
            created = api.post("/api/v1/projects", json={"name": project, "organisation": "r"})
            assert created.status_code == 201
        assert api.post("/api/v1/projects/vision/members", json={"user": "mia"}).status_code == 201

        def token(**body) -> dict:
            response = api.post("/api/v1/tokens", json={"name": w.unique("t"), **body})
            assert response.status_code == 201, response.text
            return response.json()

        revoked = token(role="viewer")
        assert api.post(f"/api/v1/tokens/{revoked['id']}/revoke").status_code == 200
        w.throwaway_token_id = token(role="viewer")["id"]
        expired = token(role="viewer", expires_in_days=1)
        w.tokens = {
            "admin": api.token, "operator": token(user="olga")["token"],
            "member": token(user="mia")["token"], "viewer": token(user="vic")["token"],
            "agent": agent, "ingest": token(role="ingest")["token"], "none": None,
            "revoked": revoked["token"], "expired": expired["token"],
            "join": api.post("/api/v1/join-tokens", json={
                "environment": "onprem-hpc", "expires_in_s": 30 * 86_400,
            }).json()["tokens"][0]["token"],
        }
        clock.advance(2 * 86_400)  # past the `expired` token's day, well within the others'
        assert api.post("/api/v1/receivers", json=_webhook("ops-hook")).status_code == 201
        w.vision_request = api.post("/api/v1/requests", json={
            "project": "vision", "count": 1, "models": ["H100-80GB"]}).json()["code"]
        w.vision_pool = api.post("/api/v1/pools", json={
            "project": "vision", "flavour": "H100-80GB", "count": 1}).json()["code"]
        yield w


@dataclass(frozen=True)
class AlertRuleStub:
    """The rule attributes the alert state needs (the rule language's Rule has them)."""

    name: str = "gpu-hot"
    severity: Severity = Severity.WARNING
    for_s: float = 0
    labels: dict = field(default_factory=dict)
    group_by: tuple = ()
    summary: str = "hot"
    description: str = ""


Request = tuple[str, dict | bytes | None]  # (concrete path, JSON body or raw bytes)
ALERT_RULE = {"kind": "threshold", "metric": "gpu.temperature_celsius", "op": ">=",
              "value": 85}


def _webhook(name: str) -> dict:
    return {"name": name, "kind": "webhook", "config": {"url": "http://127.0.0.1:9/hook"}}


def _request_for(world: World, route: tuple[str, str], caller: str) -> Request:
    """A concrete request for a route that succeeds for an allowed caller, repeatably."""
    _, template = route
    gpu_self, gpu_other = gpu_uuid(NODE_SELF, 0), gpu_uuid(NODE_CORDON, 0)

    def new_member() -> dict:
        name = world.unique("m")
        world.gf.create_user(SYSTEM, UserCreate(name=name, role="member"))
        return {"user": name}

    def new_request(**body) -> str:
        created = world.gf.lifecycle.create_request(SYSTEM, RequestCreate(
            project="vision", count=1, models=["H100-80GB"], **body))
        return created.code

    def active_request() -> str:
        if caller not in MATRIX[route]:
            return world.vision_request  # refused before lookup: hold no GPU for it
        code = new_request()
        assert world.gf.lifecycle.approve(SYSTEM, code, None).state == "active"
        return code

    def held_by_vision() -> str:
        if caller not in MATRIX[route]:
            return gpu_self  # refused before lookup
        view = world.gf.lifecycle.show_request(SYSTEM, active_request())
        return view.units[0].gpu_uuid

    def quarantined(uuid: str = gpu_other) -> str:
        if caller in MATRIX[route]:
            world.gf.set_gpu_health(SYSTEM, uuid, GpuHealthChange(
                health="quarantined", reason="xid 79"))
        return uuid

    def new_pool() -> str:
        return world.gf.lifecycle.request_pool(SYSTEM, PoolCreate(
            project="vision", flavour="H100-80GB", count=1)).code

    def active_pool() -> str:
        if caller not in MATRIX[route]:
            return world.vision_pool  # refused before lookup: reserve nothing for it
        code = new_pool()
        assert world.gf.lifecycle.approve_pool(SYSTEM, code, None).state == "active"
        return code

    def reservation() -> str:
        """Approved for a day from now: it waits for its start and holds nothing."""
        start = world.clock.now() + timedelta(days=1)
        return new_request(starts_at=start, duration_hours=1)

    def reclaim_policy() -> str:
        """An environment's reclamation policy, there to be removed."""
        if caller in MATRIX[route]:
            world.gf.reclaim.set_policy(SYSTEM, Scope.ENVIRONMENT, "onprem-hpc",
                                        PolicySet(grace_minutes=10))
        return "onprem-hpc"

    def telemetry_batch() -> bytes:
        tick = NodeSnapshot(node="node-1", at=world.clock.now(), backend="sim", units=(
            UnitSnapshot(gpu_uuid=gpu_self, values={"gpu.sm_active": 50.0}),))
        return encode(columnar(world.unique("batch"), [tick]))

    def subscription() -> dict:
        return {"name": world.unique("sub"), "url": "https://hooks.example.org/x",
                "secret": "0123456789abcdef", "types": ["request.*"]}
    def stored_rule() -> str:
        name = world.unique("rule-")
        world.gf.put_alert_rule(SYSTEM, name, ALERT_RULE)
        return name

    def rate_body(flavour: str) -> dict:
        """A price from a later day each time: it ends the open rate before it."""
        start = world.clock.now() + timedelta(days=1 + next(world.serial))
        return {"flavour": flavour, "price_per_unit_hour": "2.45", "currency": "EUR",
                "effective_from": start.isoformat()}

    def open_rate() -> Request:
        """An open rate from a later day each time, ended an hour after its start."""
        rate = world.gf.set_billing_rate(SYSTEM, RateSet.model_validate(rate_body("A100-80GB")))
        return (template.format(rate_id=rate.id),
                {"at": (rate.effective_from + timedelta(hours=1)).isoformat()})

    def chat_user() -> ChatUser:
        return ChatUser("slack", "T1", world.unique("U"))

    def linked_chat_user() -> Request:
        who = chat_user()
        world.gf.chatops.link(SYSTEM, ChatIdentityLink(
            platform="slack", team_id=who.team_id, chat_user_id=who.chat_user_id, user="mia"))
        return template.format(platform=who.platform, team_id=who.team_id,
                               chat_user_id=who.chat_user_id), None

    def registration_body() -> dict:
        node = NODE_NEW if caller == "join" else NODE_SELF
        return registration(node, gpus=2 if node == NODE_SELF else 1)

    def fleet_alert() -> str:
        """A firing alert on a GPU nobody holds: fleet-wide, so every reader sees it."""
        rule = AlertRuleStub()
        seen = Observation(rule=rule.name, labels={"gpu": gpu_other}, at=world.clock.now())
        world.gf.record_alert_evaluation(AlertEvaluation([rule], frozenset([rule.name]),
                                                         [seen]))
        return seen.fingerprint

    def new_silence() -> str:
        return str(world.gf.create_silence(SYSTEM, SilenceCreate(
            matchers=["alertname=nothing"], duration="1h", comment="test")).id)

    builders: dict[tuple[str, str], Callable[[], Request]] = {
        ("GET", "/api/v1/alerts/{fingerprint}"): lambda: (
            template.format(fingerprint=fleet_alert()), None),
        ("POST", "/api/v1/alerts/{fingerprint}/ack"): lambda: (
            template.format(fingerprint=fleet_alert()), {"comment": "on it"}),
        ("POST", "/api/v1/silences"): lambda: (
            template, {"matchers": ["project=vision"], "duration": "1h", "comment": "m"}),
        ("DELETE", "/api/v1/silences/{silence_id}"): lambda: (
            template.format(silence_id=new_silence()), None),
        ("POST", "/api/v1/tokens"): lambda: (
            template, {"name": world.unique("t"), "role": "viewer"}),
        ("POST", "/api/v1/tokens/{token_id}/revoke"): lambda: (
            template.format(token_id=world.throwaway_token_id), None),
        ("POST", "/api/v1/join-tokens"): lambda: (template, {"environment": "onprem-hpc"}),
        ("POST", "/api/v1/users"): lambda: (
            template, {"name": world.unique("u"), "role": "viewer"}),
        ("POST", "/api/v1/projects"): lambda: (
            template, {"name": world.unique("p"), "organisation": "research"}),
        ("GET", "/api/v1/projects/{name}"): lambda: (template.format(name="vision"), None),
        ("POST", "/api/v1/projects/{name}/members"): lambda: (
            template.format(name="vision"), new_member()),
        ("GET", "/api/v1/gpus/{uuid}"): lambda: (template.format(uuid=gpu_self), None),
        ("GET", "/api/v1/gpus/{uuid}/bindings"): lambda: (template.format(uuid=gpu_self),
                                                          None),
        ("POST", "/api/v1/gpus/{uuid}/health"): lambda: (
            template.format(uuid=gpu_other), {"health": "healthy", "reason": "checked"}),
        ("GET", "/api/v1/gpus/{uuid}/health"): lambda: (
            template.format(uuid=held_by_vision()), None),
        ("POST", "/api/v1/gpus/{uuid}/clear"): lambda: (
            template.format(uuid=quarantined()), {"reason": "reseated"}),
        ("POST", "/api/v1/gpus/{uuid}/retire"): lambda: (
            template.format(uuid=quarantined(gpu_uuid(NODE_SPARE, ROLES.index(caller))
                                             if caller in ROLES else gpu_other)),
            {"reason": "RMA"}),
        ("POST", "/api/v1/gpus/{uuid}/move-approvals"): lambda: (
            template.format(uuid=gpu_other), {"to_node": "node-1", "reason": "rma"}),
        ("GET", "/api/v1/nodes/{name}"): lambda: (template.format(name="node-1"), None),
        ("POST", "/api/v1/nodes/{name}/cordon"): lambda: (template.format(name="node-2"), None),
        ("POST", "/api/v1/nodes/{name}/uncordon"): lambda: (
            template.format(name="node-2"), None),
        ("POST", "/api/v1/nodes/{name}/retire"): lambda: (template.format(name="node-3"), None),
        ("POST", "/api/v1/environments"): lambda: (
            template, {"name": world.unique("env"), "kind": "cloud"}),
        ("POST", "/api/v1/agent/register"): lambda: (template, registration_body()),
        ("POST", "/api/v1/agent/heartbeat"): lambda: (template, {}),
        ("POST", "/api/v1/telemetry/batches"): lambda: (template, telemetry_batch()),
        ("POST", "/api/v1/telemetry/remote-write"): lambda: (template, encode_write_request([(
            {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": gpu_self, "Hostname": "node-1"},
            [(int(world.clock.now().timestamp() * 1000), 50.0)])])),
        ("POST", "/api/v1/requests"): lambda: (
            template, {"project": "vision", "count": 1, "models": ["H100-80GB"]}),
        ("POST", "/api/v1/requests/preview"): lambda: (
            template, {"project": "vision", "count": 1, "models": ["H100-80GB"]}),
        ("GET", "/api/v1/requests/{code}"): lambda: (
            template.format(code=world.vision_request), None),
        ("GET", "/api/v1/requests/{code}/why"): lambda: (
            template.format(code=world.vision_request), None),
        ("GET", "/api/v1/requests/{code}/history"): lambda: (
            template.format(code=world.vision_request), None),
        ("POST", "/api/v1/requests/{code}/approve"): lambda: (
            template.format(code=reservation()), None),
        ("POST", "/api/v1/requests/{code}/reject"): lambda: (
            template.format(code=new_request()), {"reason": "no"}),
        ("POST", "/api/v1/requests/{code}/cancel"): lambda: (
            template.format(code=new_request()), None),
        ("POST", "/api/v1/requests/{code}/release"): lambda: (
            template.format(code=active_request()), None),
        ("POST", "/api/v1/requests/{code}/extend"): lambda: (
            template.format(code=new_request(duration_hours=2)), {"hours": 1}),
        ("POST", "/api/v1/pools"): lambda: (
            template, {"project": "vision", "flavour": "H100-80GB", "count": 1}),
        ("GET", "/api/v1/pools/{code}"): lambda: (template.format(code=world.vision_pool), None),
        ("POST", "/api/v1/pools/{code}/approve"): lambda: (
            template.format(code=new_pool()), None),
        ("POST", "/api/v1/pools/{code}/reject"): lambda: (
            template.format(code=new_pool()), {"reason": "no"}),
        ("POST", "/api/v1/pools/{code}/end"): lambda: (
            template.format(code=active_pool()), {"reason": "done"}),
        ("GET", "/api/v1/projects/{name}/quotas"): lambda: (
            template.format(name="vision"), None),
        ("PUT", "/api/v1/projects/{name}/quotas"): lambda: (
            template.format(name="vision"), {"flavour": "H100-80GB", "limit": 8}),
        ("DELETE", "/api/v1/projects/{name}/quotas/{flavour:path}"): lambda: (
            "/api/v1/projects/vision/quotas/H100-80GB", None),
        ("PUT", "/api/v1/projects/{name}/auto-approve"): lambda: (
            template.format(name="vision"), {"max_gpus": 1, "max_hours": 24}),
        ("DELETE", "/api/v1/projects/{name}/auto-approve"): lambda: (
            template.format(name="vision"), None),
        ("GET", "/api/v1/telemetry/query"): lambda: (f"{template}?metric=gpu.sm_active", None),
        # One event every caller may see (vision's request), then the stream ends.
        ("GET", "/api/v1/events/stream"): lambda: (
            f"{template}?after=0&limit=1&type=request.created", None),
        ("POST", "/api/v1/event-subscriptions"): lambda: (template, subscription()),
        ("DELETE", "/api/v1/event-subscriptions/{name}"): lambda: (
            template.format(name=world.gf.create_event_subscription(
                SYSTEM, EventSubscriptionCreate(**subscription())).name), None),
        ("GET", "/api/v1/reclaim/policies/effective"): lambda: (f"{template}?project=vision",
                                                                None),
        ("PUT", "/api/v1/reclaim/policies/{scope}/{name}"): lambda: (
            template.format(scope="project", name="vision"), {"grace_minutes": 30}),
        ("DELETE", "/api/v1/reclaim/policies/{scope}/{name}"): lambda: (
            template.format(scope="environment", name=reclaim_policy()), None),
        ("POST", "/api/v1/requests/{code}/exempt"): lambda: (
            template.format(code=new_request()), {"reason": "a demo", "hours": 1}),
        ("POST", "/api/v1/receivers"): lambda: (template, _webhook(world.unique("r"))),
        ("GET", "/api/v1/receivers/{name}"): lambda: (template.format(name="ops-hook"), None),
        ("DELETE", "/api/v1/receivers/{name}"): lambda: (template.format(
            name=world.gf.create_receiver(SYSTEM, ReceiverCreate.model_validate(
                _webhook(world.unique("r")))).name), None),
        ("POST", "/api/v1/receivers/{name}/test"): lambda: (
            template.format(name="ops-hook"), None),
        ("PATCH", "/api/v1/receivers/{name}"): lambda: (
            template.format(name="ops-hook"), {"min_severity": "warning"}),
        ("GET", "/api/v1/receivers/{name}/deliveries"): lambda: (
            template.format(name="ops-hook"), None),
        ("GET", "/api/v1/alert-rules/{name}"): lambda: (
            template.format(name="gpu-xid-error"), None),
        ("PUT", "/api/v1/alert-rules/{name}"): lambda: (
            template.format(name=world.unique("rule-")), ALERT_RULE),
        ("DELETE", "/api/v1/alert-rules/{name}"): lambda: (
            template.format(name=stored_rule()), None),
        ("POST", "/api/v1/alert-rules/test"): lambda: (
            template, {"rules": [{"name": "hot", **ALERT_RULE}]}),
        ("POST", "/api/v1/billing/rates"): lambda: (template, rate_body("H100-80GB")),
        ("POST", "/api/v1/billing/rates/{rate_id}/end"): open_rate,
        ("POST", "/api/v1/chatops/links"): lambda: (template, {
            "code": world.gf.chatops.issue_link_code(chat_user())}),
        ("POST", "/api/v1/chatops/identities"): lambda: (template, {
            "platform": "slack", "team_id": "T1", "chat_user_id": chat_user().chat_user_id,
            "user": "mia"}),
        ("DELETE", "/api/v1/chatops/identities/{platform}/{team_id}/{chat_user_id}"):
            linked_chat_user,
        ("GET", "/api/v1/billing/statements"): lambda: (f"{template}?month=2026-11", None),
    }
    return builders.get(route, lambda: (template, None))()


@pytest.mark.parametrize(("caller", "route"), CASES,
                         ids=[f"{c} => {m} {p}" for c, (m, p) in CASES])
def test_access(world, caller, route):
    path, body = _request_for(world, route, caller)
    token = world.tokens[caller]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    payload = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = world.client.request(route[0], path, headers=headers, **payload)
    expected = expected_status(caller, route)
    if expected is None:
        assert 200 <= response.status_code < 300, response.text
        return
    assert response.status_code == expected, response.text
    error = response.json()["error"]
    if expected == 403:
        assert error["code"] in ("forbidden", "wrong_token_kind"), error
    else:
        assert error["code"] in ("missing_token", "token_revoked", "token_expired",
                                 "wrong_token_kind"), error
        assert response.headers["www-authenticate"] == "Bearer"


def test_expected_401_codes_say_why(world):
    codes = {}
    for caller in NOT_AUTHENTICATED:
        token = world.tokens[caller]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        codes[caller] = world.client.get("/api/v1/gpus", headers=headers).json()["error"]["code"]
    assert codes == {"none": "missing_token", "revoked": "token_revoked",
                     "expired": "token_expired", "join": "wrong_token_kind"}


def _app_routes(routes, prefix: str = "") -> set[tuple[str, str]]:
    """(method, path) of every route, descending into included routers (recent FastAPI keeps
    an included router as one lazy entry instead of copying its routes)."""
    found = set()
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            found |= _app_routes(included.routes, prefix + route.include_context.prefix)
            continue
        methods = getattr(route, "methods", None)
        if not methods:
            found.add(("*", prefix + route.path))  # a mount or websocket: needs a row too
            continue
        found |= {(m, prefix + route.path) for m in methods if m != "HEAD"}
    return found


def test_every_route_is_in_the_matrix(world):
    routes = _app_routes(world.client.app.routes)
    pages = {route for route in routes if route[1].startswith("/ui/")}
    missing = routes - set(MATRIX) - PUBLIC - PUBLIC_MOUNTS - DASHBOARD - CHAT_PLATFORMS - pages
    assert not missing, f"routes without an access-matrix row: {sorted(missing)}"
    stale = (set(MATRIX) | PUBLIC | PUBLIC_MOUNTS | DASHBOARD | CHAT_PLATFORMS) - routes
    assert not stale, f"matrix rows for routes that do not exist: {sorted(stale)}"


@pytest.mark.parametrize("route", sorted(PUBLIC), ids=[f"{m} {p}" for m, p in sorted(PUBLIC)])
def test_public_routes_need_no_token(world, route):
    response = world.client.request(*route)
    assert response.status_code == 200, response.text


# --- scoping: members see their own projects; agents act as their own node -----------------


@pytest.fixture
def scoped(api, store, gf):
    """Two projects; `mia` is a member of `vision` only. GPUs of both carry allocation labels
    of their (pending) requests GR-1001 and GR-1002, stamped directly so each lands on the
    GPU a test expects."""
    create_environment(api)
    register(api, 1, gpus=3)
    api.post("/api/v1/users", json={"name": "mia", "role": "member"})
    for project in ("vision", "speech"):
        api.post("/api/v1/projects", json={"name": project, "organisation": "research"})
    api.post("/api/v1/projects/vision/members", json={"user": "mia"})
    member = api.post("/api/v1/tokens", json={"name": "mia", "user": "mia"}).json()["token"]
    viewer = api.post("/api/v1/tokens", json={"name": "v", "role": "viewer"}).json()["token"]
    stamps = {gpu_uuid(1, 0): ("vision", "GR-1001"), gpu_uuid(1, 1): ("speech", "GR-1002")}
    for project, allocation in stamps.values():
        made = gf.lifecycle.create_request(SYSTEM, RequestCreate(project=project, count=1))
        assert made.code == allocation
    with store.write() as session:
        for uuid, (project, allocation) in stamps.items():
            gpu = session.scalar(select(Gpu).where(Gpu.uuid == uuid))
            session.add(GpuLabel(gpu_id=gpu.id, key="project", value=project))
            session.add(GpuLabel(gpu_id=gpu.id, key="allocation", value=allocation))
            session.add(GpuLabel(gpu_id=gpu.id, key="team", value="ml"))
    return api.as_(member), api.as_(viewer)


def _labels_by_gpu(items: list[dict]) -> dict[str, dict]:
    return {g["uuid"]: g["labels"] for g in items}


def test_member_lists_only_their_projects(scoped, api):
    member, viewer = scoped
    def names(caller) -> list[str]:
        return [p["name"] for p in caller.get("/api/v1/projects").json()["items"]]

    assert names(member) == ["vision"]
    assert names(viewer) == names(api) == ["speech", "vision"]
    assert member.get("/api/v1/whoami").json()["projects"] == ["vision"]


def test_member_gets_404_for_another_project(scoped):
    member, viewer = scoped
    assert member.get("/api/v1/projects/vision").status_code == 200
    other = member.get("/api/v1/projects/speech")
    ghost = member.get("/api/v1/projects/ghost")
    assert other.status_code == ghost.status_code == 404
    # Indistinguishable from a project that does not exist, apart from the name asked for.
    assert other.json()["error"]["code"] == ghost.json()["error"]["code"] == "project_not_found"
    assert other.json()["error"]["message"].replace("speech", "X") == \
        ghost.json()["error"]["message"].replace("ghost", "X")
    assert viewer.get("/api/v1/projects/speech").status_code == 200


def test_member_does_not_see_other_projects_allocation_labels(scoped):
    member, viewer = scoped
    own, other, bare = gpu_uuid(1, 0), gpu_uuid(1, 1), gpu_uuid(1, 2)
    seen = _labels_by_gpu(member.get("/api/v1/gpus").json()["items"])
    assert seen[own] == {"project": "vision", "allocation": "GR-1001", "team": "ml"}
    assert seen[other] == {"team": "ml"}
    assert seen[bare] == {}
    assert member.get(f"/api/v1/gpus/{other}").json()["labels"] == {"team": "ml"}
    detail = _labels_by_gpu(member.get("/api/v1/nodes/node-1").json()["gpu_list"])
    assert detail == seen
    everything = _labels_by_gpu(viewer.get("/api/v1/gpus").json()["items"])
    assert everything[other] == {"project": "speech", "allocation": "GR-1002", "team": "ml"}


def test_member_cannot_find_other_projects_gpus_by_label(scoped):
    """Filtering on a withheld label must not reveal what the listing withholds."""
    member, viewer = scoped
    for selector in ("project=speech", "allocation=GR-1002"):
        assert member.get("/api/v1/gpus", params={"label": selector}).json()["items"] == []
        assert len(viewer.get("/api/v1/gpus", params={"label": selector}).json()["items"]) == 1
    own = member.get("/api/v1/gpus", params={"label": "project=vision"}).json()["items"]
    assert [g["uuid"] for g in own] == [gpu_uuid(1, 0)]
    assert len(member.get("/api/v1/gpus", params={"label": "team=ml"}).json()["items"]) == 2


def test_agent_heartbeats_only_as_its_own_node(api, store, clock):
    create_environment(api)
    first = register(api, 1, gpus=1)["credential"]
    register(api, 2, gpus=1)
    clock.advance(60)
    reply = api.as_(first).post("/api/v1/agent/heartbeat", json={})
    assert reply.status_code == 200
    assert reply.json()["node"] == "node-1"
    with store.read() as session:
        seen = dict(session.execute(select(Node.name, Node.last_seen_at)).all())
    assert seen["node-1"] == clock.now()
    assert seen["node-2"] < clock.now()
    # The heartbeat names no node: there is nothing to point at another one.
    smuggled = api.as_(first).post("/api/v1/agent/heartbeat", json={"node": "node-2"})
    assert smuggled.status_code == 422


def test_agent_cannot_reregister_as_another_machine(api, store):
    create_environment(api)
    first = register(api, 1, gpus=1)["credential"]
    register(api, 2, gpus=1)
    for body in (registration(2, gpus=1), registration(3, gpus=1),
                 {**registration(1, gpus=1), "machine_id": "machine-2"}):
        response = api.as_(first).post("/api/v1/agent/register", json=body)
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "machine_id_mismatch"
    with store.read() as session:
        nodes = dict(session.execute(select(Node.machine_id, Node.name)).all())
        gpus = dict(session.execute(select(Gpu.uuid, Gpu.node_id)).all())
    assert nodes == {"machine-1": "node-1", "machine-2": "node-2"}
    assert gpu_uuid(3, 0) not in gpus


def test_agent_reads_nothing_but_whoami(api):
    create_environment(api)
    agent = api.as_(register(api, 1, gpus=1)["credential"])
    who = agent.get("/api/v1/whoami").json()
    assert (who["role"], who["node"], who["actor"]) == ("agent", "node-1", "node:node-1")
    assert agent.get("/api/v1/gpus").status_code == 403


def test_join_token_is_no_bearer_even_before_use(api):
    create_environment(api)
    join = join_token(api)
    response = api.as_(join).get("/api/v1/whoami")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "wrong_token_kind"
    # ...and that failed use did not spend it.
    registered = api.as_(join).post("/api/v1/agent/register", json=registration(1, gpus=1))
    assert registered.status_code == 200



@pytest.fixture
def shared_gpu(api, gf):
    """One shared GPU held by vision (GR-1001, GR-1003) and speech (GR-1002) at once, as
    granting stamps it; `mia` is a member of vision only."""
    create_environment(api, "onprem-slicing", default_sharing_mode="shared")
    register(api, 1, "onprem-slicing", gpus=1)
    api.post("/api/v1/users", json={"name": "mia", "role": "member"})
    for project in ("vision", "speech"):
        api.post("/api/v1/projects", json={"name": project, "organisation": "research"})
    api.post("/api/v1/projects/vision/members", json={"user": "mia"})
    codes = []
    for project in ("vision", "speech", "vision"):
        view = gf.lifecycle.create_request(SYSTEM, RequestCreate(project=project, count=1,
                                                                fraction=0.25))
        assert gf.lifecycle.approve(SYSTEM, view.code, None).state == "active"
        codes.append(view.code)
    member = api.post("/api/v1/tokens", json={"name": "mia", "user": "mia"}).json()["token"]
    return api.as_(member), codes


def test_labels_of_a_gpu_held_by_several_allocations_keep_every_value(api, shared_gpu):
    """They collapsed to one `allocation` and one `project`, maybe of different allocations."""
    _, (vision_1, speech, vision_2) = shared_gpu
    (gpu,) = api.get("/api/v1/gpus").json()["items"]
    assert gpu["labels"] == {"allocation": ",".join(sorted([vision_1, speech, vision_2])),
                             "project": "speech,vision"}
    for code in (vision_1, speech, vision_2):
        found = api.get("/api/v1/gpus", params={"label": f"allocation={code}"}).json()
        assert [g["uuid"] for g in found["items"]] == [gpu_uuid(1, 0)], code


def test_a_member_sees_only_their_allocations_on_a_shared_gpu(api, shared_gpu):
    member, (vision_1, speech, vision_2) = shared_gpu
    (gpu,) = member.get("/api/v1/gpus").json()["items"]
    assert gpu["labels"] == {"allocation": ",".join(sorted([vision_1, vision_2])),
                             "project": "vision"}
    assert member.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()["labels"] == gpu["labels"]
    (listed,) = member.get("/api/v1/nodes/node-1").json()["gpu_list"]
    assert listed["labels"] == gpu["labels"]
    # Filtering on the other project's values finds nothing: that would reveal them.
    for selector in (f"allocation={speech}", "project=speech"):
        assert member.get("/api/v1/gpus", params={"label": selector}).json()["items"] == []
    for selector in (f"allocation={vision_2}", "project=vision"):
        assert len(member.get("/api/v1/gpus", params={"label": selector}).json()["items"]) == 1
