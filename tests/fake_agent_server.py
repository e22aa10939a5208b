"""A stand-in for the server's agent and operator endpoints, for tests of the clients.

It is not the server: it implements just enough of the documented protocol (docs/design.md,
"Architecture", the agent wire schemas) to drive the agent runner and the simulated fleet through
`httpx.MockTransport`, with switches for the failures the clients must survive.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field

import httpx

from gpufleet.wire import telemetry_batch
from gpufleet.wire.agent import Heartbeat, NodeRegistration
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH, TelemetryBatch


def _error(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message,
                                                  "details": {}}})


@dataclass
class FakeServer:
    operator_token: str = "operator-token"
    heartbeat_interval_s: float = 30.0
    desired_version: int = 0
    mig_plans: list = field(default_factory=list)
    environments: set[str] = field(default_factory=set)
    join_tokens: dict[str, str] = field(default_factory=dict)  # token -> environment
    credentials: dict[str, str] = field(default_factory=dict)  # credential -> machine id
    nodes: dict[str, NodeRegistration] = field(default_factory=dict)  # machine id -> last
    heartbeats: list[tuple[str, Heartbeat]] = field(default_factory=list)
    fail_next: int = 0  # answer this many requests with 503 first
    requests: list[str] = field(default_factory=list)
    # Telemetry: every batch stored, in arrival order, once per id (a replay is a duplicate).
    batches: list[TelemetryBatch] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    telemetry_fail_next: int = 0  # answer this many telemetry posts with 503 first
    refused_batches: dict[str, tuple[int, str]] = field(default_factory=dict)  # id -> status, code
    telemetry_status: int | None = None  # answer every telemetry post with this error
    # Answer telemetry with 409 foreign_gpus until the node has registered this many more
    # times: its registration lacks GPUs its batches name (a MIG layout changed since).
    stale_registrations: int = 0
    retired: set[str] = field(default_factory=set)  # hostnames an operator retired
    _ids: itertools.count = field(default_factory=itertools.count)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def desired_state(self) -> dict:
        return {"version": self.desired_version, "bindings": [], "mig_plans": self.mig_plans}

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request.url.path)
        if self.fail_next:
            self.fail_next -= 1
            return _error(503, "unavailable", "try later")
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if request.url.path == TELEMETRY_BATCHES_PATH:
            return self._telemetry(bearer, request)
        if request.url.path == "/api/v1/nodes":
            return self._nodes(bearer, request)
        body = json.loads(request.content or b"{}")
        route = {"/api/v1/environments": self._environment,
                 "/api/v1/join-tokens": self._join_tokens,
                 "/api/v1/agent/register": self._register,
                 "/api/v1/agent/heartbeat": self._heartbeat}.get(request.url.path)
        if route is None:
            return _error(404, "not_found", "no such route")
        return route(bearer, body)

    def _nodes(self, bearer: str, request: httpx.Request) -> httpx.Response:
        if bearer != self.operator_token:
            return _error(401, "unauthenticated", "bad token")
        wanted = request.url.params.get("status")
        names = sorted(self.retired) if wanted == "retired" else []
        return httpx.Response(200, json={"items": [{"name": n, "status": "retired"}
                                                   for n in names], "next_cursor": None})

    def _environment(self, bearer: str, body: dict) -> httpx.Response:
        if bearer != self.operator_token:
            return _error(401, "unauthenticated", "bad token")
        if body["name"] in self.environments:
            return _error(409, "environment_exists", "exists")
        self.environments.add(body["name"])
        return httpx.Response(201, json=body)

    def _join_tokens(self, bearer: str, body: dict) -> httpx.Response:
        if bearer != self.operator_token:
            return _error(401, "unauthenticated", "bad token")
        if body["environment"] not in self.environments or not 1 <= body["count"] <= 1000:
            return _error(400, "invalid_input", "bad join token request")
        tokens = []
        for _ in range(body["count"]):
            token = f"join-{next(self._ids)}"
            self.join_tokens[token] = body["environment"]
            tokens.append({"token": token, "environment": body["environment"],
                           "expires_at": "2030-01-01T00:00:00Z"})
        return httpx.Response(201, json={"tokens": tokens})

    def _register(self, bearer: str, body: dict) -> httpx.Response:
        registration = NodeRegistration.model_validate(body)
        self.stale_registrations = max(0, self.stale_registrations - 1)
        credential = None
        if bearer in self.join_tokens:
            environment = self.join_tokens.pop(bearer)
            credential = f"cred-{next(self._ids)}"
            self.credentials[credential] = registration.machine_id
        elif self.credentials.get(bearer) == registration.machine_id:
            environment = "known"
        else:
            return _error(401, "unauthenticated", "unknown, expired or used token")
        self.nodes[registration.machine_id] = registration
        return httpx.Response(201 if credential else 200, json={
            "node": registration.hostname, "node_status": "ready", "environment": environment,
            "credential": credential, "heartbeat_interval_s": self.heartbeat_interval_s,
            "desired_state": self.desired_state(), "gpus_registered": len(registration.gpus)})

    def _heartbeat(self, bearer: str, body: dict) -> httpx.Response:
        machine_id = self.credentials.get(bearer)
        if machine_id is None:
            return _error(401, "unauthenticated", "revoked")
        self.heartbeats.append((machine_id, Heartbeat.model_validate(body)))
        return httpx.Response(200, json={
            "node": self.nodes[machine_id].hostname, "node_status": "ready",
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "desired_state": self.desired_state()})

    def _telemetry(self, bearer: str, request: httpx.Request) -> httpx.Response:
        if self.telemetry_fail_next:
            self.telemetry_fail_next -= 1
            return _error(503, "unavailable", "telemetry store busy")
        if self.telemetry_status is not None:
            return _error(self.telemetry_status, "refused", "telemetry refused")
        if self.stale_registrations:
            return _error(409, "foreign_gpus", "the node does not hold GPU(s) MIG-new")
        machine_id = self.credentials.get(bearer)
        if machine_id is None:
            return _error(401, "unauthenticated", "revoked")
        if (request.headers.get("content-encoding") != "gzip"
                or request.headers.get("content-type") != "application/json"):
            return _error(415, "unsupported_media_type", "gzip JSON expected")
        try:
            batch = telemetry_batch.decode(request.content, max_bytes=64 * 1024**2)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            return _error(400, "invalid_batch", str(exc)[:200])
        if batch.batch_id in self.refused_batches:
            status, code = self.refused_batches[batch.batch_id]
            return _error(status, code, f"batch {batch.batch_id} refused")
        duplicate = any(b.batch_id == batch.batch_id for b in self.batches)
        if duplicate:
            self.duplicates.append(batch.batch_id)
        else:
            self.batches.append(batch)
        stored = 0 if duplicate else sum(v is not None for row in batch.values for v in row)
        return httpx.Response(200, json={"batch_id": batch.batch_id, "duplicate": duplicate,
                                         "samples_stored": stored, "dropped": {}})
