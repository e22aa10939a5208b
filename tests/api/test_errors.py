"""Every error path answers `{"error": {"code", "message", "details"}}` and nothing else."""

from __future__ import annotations

import base64
import json

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.services.app import Gpufleet
from tests.helpers import create_environment, join_token, register, registration
from tests.module_world import shared_client


@pytest.fixture
def client(gf):
    """The conftest client, on one app shared by the session (tests.module_world)."""
    with shared_client(gf) as shared:
        yield shared


def assert_error(response, status: int, code: str | None = None) -> dict:
    """The canonical error body, exactly: returns its `error` object for further checks."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert isinstance(error["code"], str) and error["code"]
    assert error["code"] == error["code"].lower() and " " not in error["code"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["details"], dict)
    if code is not None:
        assert error["code"] == code, error
    assert "Traceback" not in response.text
    return error


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def cursor_of(values: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


@pytest.fixture
def fleet(api):
    create_environment(api)
    register(api, 1, gpus=2)
    return api


SQLITE_ONLY = pytest.mark.parametrize("store", ["sqlite"], indirect=True)


def check_all(cases, run) -> None:
    """Run every case; fail once, naming each case that went wrong (cheaper than a test each)."""
    failures = []
    for case in cases:
        try:
            run(*case)
        except AssertionError as exc:
            failures.append(f"{case!r}: {exc}")
    assert not failures, "\n".join(failures)


# --- 401 / 403 -------------------------------------------------------------------------


def test_unauthenticated(api):
    def run(headers, code):
        response = api.client.get("/api/v1/gpus", headers=headers)
        assert_error(response, 401, code)
        assert response.headers["www-authenticate"] == "Bearer"

    check_all([
        ({}, "missing_token"),
        (bearer("gfa_not-a-real-token"), "invalid_token"),
        (bearer("gfj_a-join-token-is-not-a-bearer"), "wrong_token_kind"),
        (bearer("garbage"), "invalid_token"),
        ({"Authorization": f"Basic {api.token}"}, "missing_token"),
        ({"Authorization": "Bearer"}, "missing_token"),
    ], run)


def test_forbidden(api):
    viewer = api.post("/api/v1/tokens", json={"name": "v", "role": "viewer"}).json()["token"]
    error = assert_error(api.as_(viewer).post("/api/v1/environments",
                                              json={"name": "x", "kind": "cloud"}), 403)
    assert error["code"] == "forbidden"
    assert error["details"] == {"role": "viewer", "action": "inventory:manage"}
    assert error["message"] == "role 'viewer' may not manage the inventory"  # in words


def test_an_unknown_audit_subject_kind_is_refused_with_the_kinds_there_are(api):
    response = api.get("/api/v1/audit-events", params={"subject_kind": "nodes"})
    assert 400 <= response.status_code < 500
    message = response.json()["error"]["message"]
    assert "subject_kind" in message and "node" in message and "gpu" in message


# --- 404 / 405 / 409 -------------------------------------------------------------------


@SQLITE_ONLY
def test_unknown_route_and_method(api):
    def unknown_route(path):
        assert_error(api.get(path), 404, "not_found")

    check_all([("/api/v1/nope",), ("/nope",), ("/api/v2/gpus",), ("/api/v1/gpus/x/y/z",)],
              unknown_route)

    def wrong_method(method, path):
        response = api.request(method, path)
        assert_error(response, 405, "method_not_allowed")
        assert response.headers["allow"]

    check_all([("DELETE", "/api/v1/gpus"), ("PUT", "/api/v1/environments"),
               ("POST", "/api/v1/fleet/summary"), ("GET", "/api/v1/agent/register"),
               ("PATCH", "/api/v1/nodes/node-1")], wrong_method)


def test_unknown_entity(fleet):
    ghost_gpu = "GPU-00000000-0000-4000-8000-000000000000"

    def run(method, path, body, code):
        error = assert_error(fleet.request(method, path, json=body), 404, code)
        assert error["details"], "a not-found names what was not found"

    check_all([
        ("GET", "/api/v1/nodes/ghost", None, "node_not_found"),
        ("GET", f"/api/v1/gpus/{ghost_gpu}", None, "gpu_not_found"),
        ("POST", f"/api/v1/gpus/{ghost_gpu}/health", {"health": "quarantined", "reason": "x"},
         "gpu_not_found"),
        ("POST", f"/api/v1/gpus/{ghost_gpu}/move-approvals", {"to_node": "node-2"},
         "gpu_not_found"),
        ("GET", "/api/v1/projects/ghost", None, "project_not_found"),
        ("POST", "/api/v1/projects/ghost/members", {"user": "admin"}, "project_not_found"),
        ("POST", "/api/v1/tokens/99999/revoke", None, "token_not_found"),
        ("POST", "/api/v1/nodes/ghost/cordon", None, "node_not_found"),
        ("POST", "/api/v1/nodes/ghost/retire", None, "node_not_found"),
        ("POST", "/api/v1/join-tokens", {"environment": "ghost"}, "environment_not_found"),
        ("POST", "/api/v1/tokens", {"name": "t", "user": "ghost"}, "user_not_found"),
    ], run)


def test_conflict(fleet):
    fleet.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    fleet.post("/api/v1/users", json={"name": "ann", "role": "viewer"})
    fleet.post("/api/v1/projects/vision/members", json={"user": "ann"})
    assert fleet.post("/api/v1/nodes/node-1/retire").status_code == 200

    def run(path, body, code):
        error = assert_error(fleet.post(path, json=body), 409, code)
        assert error["details"]

    check_all([
        ("/api/v1/environments", {"name": "onprem-hpc", "kind": "onprem"}, "environment_exists"),
        ("/api/v1/projects", {"name": "vision", "organisation": "research"}, "project_exists"),
        ("/api/v1/users", {"name": "ann", "role": "viewer"}, "user_exists"),
        ("/api/v1/projects/vision/members", {"user": "ann"}, "already_member"),
        ("/api/v1/nodes/node-1/cordon", None, "node_retired"),
    ], run)


# --- 413 -------------------------------------------------------------------------------


@SQLITE_ONLY
def test_oversized_body_with_content_length(api, settings):
    size = settings.max_request_body_bytes + 1
    response = api.client.post("/api/v1/environments", content=b" " * size,
                               headers={**bearer(api.token), "content-type": "application/json"})
    error = assert_error(response, 413, "payload_too_large")
    assert error["details"] == {"max_bytes": settings.max_request_body_bytes}


@SQLITE_ONLY
@pytest.mark.parametrize("path", ["/api/v1/environments", "/api/v1/agent/register"])
def test_oversized_chunked_body(api, settings, path):
    chunk = b" " * 65536
    chunks = settings.max_request_body_bytes // len(chunk) + 2

    def stream():
        for _ in range(chunks):
            yield chunk

    response = api.client.post(path, content=stream(),
                               headers={**bearer(api.token), "content-type": "application/json"})
    assert "content-length" not in response.request.headers
    error = assert_error(response, 413, "payload_too_large")
    assert error["details"] == {"max_bytes": settings.max_request_body_bytes}


@SQLITE_ONLY
def test_chunked_body_under_the_limit_is_served(api):
    payload = json.dumps({"name": "chunked-env", "kind": "cloud"}).encode()

    def stream():
        yield payload[:10]
        yield payload[10:]

    response = api.client.post("/api/v1/environments", content=stream(),
                               headers={**bearer(api.token), "content-type": "application/json"})
    assert response.status_code == 201, response.text


# --- 422 -------------------------------------------------------------------------------


@SQLITE_ONLY
def test_malformed_json(api):
    def run(content, problem):
        response = api.client.post(
            "/api/v1/environments", content=content,
            headers={**bearer(api.token), "content-type": "application/json"})
        error = assert_error(response, 422, "validation_failed")
        assert problem in error["message"].lower()
        assert error["details"]["errors"]

    check_all([(b"{not json", "json"), (b'{"name": "x", "kind": "onprem"', "json"),
               (b"", "required"), (b"[]", ""), (b'"a string"', ""), (b"\xff\xfe", "")], run)


@SQLITE_ONLY
def test_body_validation(api):
    def run(body, field):
        error = assert_error(api.post("/api/v1/environments", json=body), 422,
                             "validation_failed")
        assert field in [e["field"] for e in error["details"]["errors"]]
        assert all(set(e) == {"field", "problem", "type"} for e in error["details"]["errors"])

    check_all([
        ({"kind": "onprem"}, "name"),
        ({"name": "x", "kind": "moon"}, "kind"),
        ({"name": "Not Valid!", "kind": "onprem"}, "name"),
        ({"name": "x", "kind": "onprem", "colour": "blue"}, "colour"),
        ({"name": "x" * 64, "kind": "onprem"}, "name"),
    ], run)
    error = assert_error(api.post("/api/v1/environments", json={"name": "", "kind": "moon"}),
                         422, "validation_failed")
    assert len(error["details"]["errors"]) == 2
    assert "(and 1 more)" in error["message"]


@SQLITE_ONLY
def test_validation_messages_name_the_field_as_the_caller_wrote_it(fleet):
    """No "body." before every field, no "Value error, " before a validator's own sentence:
    the message is `field: problem`, and `details.errors` says the same."""
    registering = fleet.as_(join_token(fleet))
    duplicate = registration(2, gpus=2)
    duplicate["gpus"][1]["uuid"] = duplicate["gpus"][0]["uuid"]
    extra = registration(3, gpus=2)
    extra["gpus"][1]["colour"] = "blue"

    def run(response, message):
        error = assert_error(response, 422, "validation_failed")
        assert error["message"] == message, error
        first = error["details"]["errors"][0]
        assert f"{first['field']}: {first['problem']}" == message, error

    check_all([
        (fleet.post("/api/v1/requests", json={"project": "p", "count": 2, "fraction": 1.5}),
         "request body: fraction must be strictly between 0 and 1, not 1.5"),
        (fleet.post("/api/v1/requests", json={"project": "p", "count": 0}),
         "count: Input should be greater than or equal to 1"),
        (fleet.post("/api/v1/environments", json=[]),
         "request body: Input should be a valid dictionary or object to extract fields from"),
        (fleet.client.post("/api/v1/environments", content=b"{not json",
                           headers={**bearer(fleet.token), "content-type": "application/json"}),
         "request body: invalid JSON at character 1: "
         "Expecting property name enclosed in double quotes"),
        (registering.post("/api/v1/agent/register", json=duplicate),
         f"gpus: GPU {duplicate['gpus'][0]['uuid']} appears twice in one registration"),
        (registering.post("/api/v1/agent/register", json=extra),
         "gpus[1].colour: Extra inputs are not permitted"),
        (fleet.get("/api/v1/gpus?limit=ten"),
         "limit: Input should be a valid integer, unable to parse string as an integer"),
        (fleet.post("/api/v1/tokens/abc/revoke"),
         "token_id: Input should be a valid integer, unable to parse string as an integer"),
    ], run)


@SQLITE_ONLY
def test_query_and_path_validation(fleet):
    def run(method, path):
        assert_error(fleet.request(method, path), 422, "validation_failed")

    check_all([("GET", f"/api/v1/gpus?{q}") for q in (
        "status=bogus", "health=fine", "sharing_mode=half", "model_known=perhaps", "limit=ten")]
        + [("GET", "/api/v1/nodes?status=asleep"),
           ("POST", "/api/v1/tokens/abc/revoke"), ("POST", "/api/v1/tokens/1.5/revoke")], run)


# --- 400 -------------------------------------------------------------------------------


def test_bad_request(fleet):
    def run(path, code):
        assert_error(fleet.get(path), 400, code)

    check_all([
        ("/api/v1/gpus?sort=colour", "invalid_sort"),
        ("/api/v1/gpus?sort=-", "invalid_sort"),
        ("/api/v1/nodes?sort=-gpus", "invalid_sort"),
        ("/api/v1/gpus?cursor=%%%", "invalid_cursor"),
        ("/api/v1/gpus?cursor=bm90IGpzb24", "invalid_cursor"),  # "not json"
        (f"/api/v1/gpus?cursor={cursor_of(['a', 'b', 'c', 'd'])}", "invalid_cursor"),
        (f"/api/v1/gpus?cursor={cursor_of({'a': 1})}", "invalid_cursor"),
        (f"/api/v1/gpus?sort=memory&cursor={cursor_of(['abc', 'GPU-x'])}", "invalid_cursor"),
        (f"/api/v1/gpus?sort=memory&cursor={cursor_of([10**30, 'GPU-x'])}", "invalid_cursor"),
        (f"/api/v1/gpus?sort=uuid&cursor={cursor_of([{'a': 1}])}", "invalid_cursor"),
        (f"/api/v1/gpus?sort=uuid&cursor={cursor_of([None])}", "invalid_cursor"),
        (f"/api/v1/gpus?sort=uuid&cursor={cursor_of([7])}", "invalid_cursor"),
        (f"/api/v1/nodes?sort=cpu_cores&cursor={cursor_of([True, 'n'])}", "invalid_cursor"),
        (f"/api/v1/nodes?sort=cpu_cores&cursor={cursor_of([1.5, 'n'])}", "invalid_cursor"),
        ("/api/v1/gpus?limit=0", "invalid_limit"),
        ("/api/v1/gpus?limit=-1", "invalid_limit"),
        ("/api/v1/gpus?limit=1001", "invalid_limit"),
        ("/api/v1/nodes?limit=100000000000000000000000", "invalid_limit"),
        ("/api/v1/audit-events?limit=0", "invalid_limit"),
        ("/api/v1/audit-events?cursor=x", "invalid_cursor"),
        (f"/api/v1/audit-events?cursor={cursor_of(['7'])}", "invalid_cursor"),
        (f"/api/v1/audit-events?cursor={cursor_of([10**30])}", "invalid_cursor"),
        ("/api/v1/gpus?label=novalue", "invalid_label_selector"),
        ("/api/v1/gpus?label==value", "invalid_label_selector"),
        ("/api/v1/gpus?node_label=rack", "invalid_label_selector"),
        ("/api/v1/nodes?label=rack", "invalid_label_selector"),
    ], run)


def test_values_the_database_cannot_hold_are_never_a_server_error(fleet):
    """Huge integers and NUL characters are refused (4xx) or simply match nothing."""
    def run(method, path, body):
        response = fleet.request(method, path, json=body)
        assert response.status_code < 500, response.text
        if response.status_code >= 400:
            assert_error(response, response.status_code)

    check_all([
        ("POST", "/api/v1/tokens/99999999999999999999999/revoke", None),
        ("POST", "/api/v1/tokens/-1/revoke", None),
        ("GET", "/api/v1/audit-events?cursor=99999999999999999999999", None),
        ("GET", "/api/v1/nodes/a%00b", None),
        ("GET", "/api/v1/gpus?label=a%3Db%00c", None),
        ("GET", "/api/v1/gpus?environment=a%00c", None),
        ("POST", "/api/v1/environments",
         {"name": "nul", "kind": "onprem", "description": "a\x00b"}),
    ], run)


# --- 500 -------------------------------------------------------------------------------


@SQLITE_ONLY
def test_unexpected_exception_is_a_bare_500(gf, api, monkeypatch, caplog):
    def explode(self, principal):
        raise RuntimeError("secret detail: /var/lib/gpufleet password=hunter2")

    monkeypatch.setattr(Gpufleet, "fleet_summary", explode)
    with TestClient(create_app(gf, background_loops=False),
                    raise_server_exceptions=False) as client:
        response = client.get("/api/v1/fleet/summary", headers=bearer(api.token))
    error = assert_error(response, 500, "internal_error")
    assert error["details"] == {}
    for leak in ("secret", "hunter2", "RuntimeError", "Traceback", "File \"", "explode"):
        assert leak not in response.text
    # ...but the server log has it for the operator.
    assert "hunter2" in caplog.text


@SQLITE_ONLY
def test_health_endpoints_are_plain(api):
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert api.client.get("/readyz").json() == {"status": "ready"}


def test_no_token_is_refused_before_the_body_is_read(client):
    """A caller without a token learns nothing else, not even that its JSON was broken."""
    response = client.post("/api/v1/environments", content=b"{not json",
                           headers={"Content-Type": "application/json"})
    assert_error(response, 401, "missing_token")
    assert response.headers["www-authenticate"] == "Bearer"


def test_the_openapi_document_declares_the_one_error_body(client):
    """Every operation but the probes declares 400, 401, 403 and 503 as `ErrorBody`, and
    FastAPI's own 422 shape (never sent) is gone from the document."""
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert schemas["ErrorBody"]["required"] == ["error"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            expected = {"503"} if path == "/readyz" else set() if path == "/healthz" else {
                "400", "401", "403", "503"}
            assert expected <= set(responses), (method, path, sorted(responses))
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/ErrorBody"}, (method, path, status)


# --- NUL characters ------------------------------------------------------------------------

NUL_TEXT = "a\x00b"
UPLOAD_PATHS = ("/api/v1/telemetry/batches", "/api/v1/telemetry/remote-write")  # not JSON


def _resolve(document: dict, schema: dict) -> dict:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = document["components"]["schemas"][name]
    return schema


def _takes_text(document: dict, schema: dict) -> bool:
    schema = _resolve(document, schema)
    if schema.get("type") == "string" and "enum" not in schema:
        return True
    if schema.get("type") == "array":
        return _takes_text(document, schema.get("items", {}))
    return any(_takes_text(document, s) for s in schema.get("anyOf", []))


def _nul_cases(document: dict) -> list[tuple[str, str, dict, object]]:
    """(method, path, query, body) with a NUL in one text field, for every text field of
    every operation: query parameters, path parameters and the JSON body's properties."""
    cases = []
    for path, operations in document["paths"].items():
        if path in UPLOAD_PATHS:
            continue
        for method, operation in operations.items():
            concrete = path
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path":
                    concrete = concrete.replace(f"{{{parameter['name']}}}", "x")
            for parameter in operation.get("parameters", []):
                if not _takes_text(document, parameter["schema"]):
                    continue
                if parameter["in"] == "query":
                    cases.append((method, concrete, {parameter["name"]: NUL_TEXT}, None))
                elif parameter["in"] == "path":
                    cases.append((method, path.replace(f"{{{parameter['name']}}}", "a%00b")
                                  .replace("{", "").replace("}", ""), {}, None))
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content:
                body = _resolve(document, content["application/json"]["schema"])
                for name, prop in body.get("properties", {}).items():
                    if _takes_text(document, prop):
                        value = [NUL_TEXT] if _resolve(document, prop).get("type") == "array" \
                            else NUL_TEXT
                        cases.append((method, concrete, {}, {name: value}))
                    elif _resolve(document, prop).get("additionalProperties"):
                        cases.append((method, concrete, {}, {name: {"key": NUL_TEXT}}))
                        cases.append((method, concrete, {}, {name: {NUL_TEXT: "v"}}))
    return cases


def test_nul_characters_are_refused_in_every_text_field_of_the_openapi_document(fleet, store):
    """On SQLite (which would store them) and PostgreSQL (which cannot) alike: 400
    `nul_character` naming the field, for every text field the API document lists, and
    nothing is written."""
    document = fleet.get("/openapi.json").json()
    cases = _nul_cases(document)
    assert len(cases) > 60, cases  # the document was read: every route's text fields
    audit_before = fleet.get("/api/v1/audit-events?limit=1").json()["items"]

    def run(method, path, query, body):
        response = fleet.request(method.upper(), path, params=query, json=body)
        error = assert_error(response, 400, "nul_character")
        field = error["details"]["field"]
        expected = next(iter(query), None) or (next(iter(body)) if body else "URL path")
        assert expected in field, (field, expected)
        assert "\\u0000" in error["message"]

    check_all(cases, run)
    assert fleet.get("/api/v1/audit-events?limit=1").json()["items"] == audit_before
    # JSON that only spells the escape (a backslash, then "u0000") is text like any other.
    created = fleet.post("/api/v1/environments",
                         json={"name": "escaped", "kind": "onprem", "description": "\\u0000"})
    assert created.status_code == 201, created.text
    assert created.json()["description"] == "\\u0000"
