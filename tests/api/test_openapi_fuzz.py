"""Schemathesis over the OpenAPI document, against the real app on a seeded fleet.

Every operation the document lists is called with generated requests — valid ones and
invalid ones — as the admin and as a project member, on SQLite and PostgreSQL. Each answer
must not be a server error, must have a status the document declares for the operation,
and must match the schema (and media type) the document gives for that status. Examples
are bounded so the whole module stays well under a minute of CI time.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import hypothesis.strategies as st
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis import checks as sc

from gpufleet.api.app import create_app
from gpufleet.settings import Settings
from tests.helpers import create_environment, register
from tests.module_world import DATABASES, ModuleWorld, module_world

CHECKS = [sc.not_a_server_error, sc.status_code_conformance, sc.content_type_conformance,
          sc.response_schema_conformance]
EXAMPLES = {GenerationMode.POSITIVE: 3, GenerationMode.NEGATIVE: 2}
# Not JSON: schemathesis cannot build a protobuf body (test_telemetry_ingest.py covers it).
NOT_FUZZED = {"POST /api/v1/telemetry/remote-write",
              # An endless stream by design: test_event_stream.py covers it.
              "GET /api/v1/events/stream"}
# 5xx that belong to other items of issue 12, fixed on other branches: the lead removes
# each entry once that branch is merged.
ELSEWHERE: dict[str, str] = {}


def _operations() -> list[str]:
    """`METHOD /path` of every documented operation (the app is built only to list them)."""
    app = create_app(SimpleNamespace(settings=Settings()), background_loops=False)
    return sorted(f"{method.upper()} {path}"
                  for path, operations in app.openapi()["paths"].items()
                  for method in operations)


def _case(label: str):
    if label in ELSEWHERE:
        return pytest.param(label, marks=pytest.mark.xfail(reason=ELSEWHERE[label],
                                                           strict=False))
    return label


@pytest.fixture(scope="module", params=DATABASES)
def world(request, tmp_path_factory) -> Iterator[tuple[ModuleWorld, dict[str, str]]]:
    """Two registered nodes, a project with a member, an approved request."""
    with module_world(request, tmp_path_factory) as m:
        api = m.api
        create_environment(api)
        register(api, 1, gpus=2)
        register(api, 2, gpus=2)
        api.post("/api/v1/users", json={"name": "mia", "role": "member"})
        api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
        api.post("/api/v1/projects/vision/members", json={"user": "mia"})
        member = api.post("/api/v1/tokens", json={"name": "mia", "user": "mia"}).json()
        created = api.post("/api/v1/requests", json={"project": "vision", "count": 1,
                                                     "duration_hours": 4, "reason": "fuzz"})
        assert created.status_code == 201, created.text
        api.post(f"/api/v1/requests/{created.json()['code']}/approve")
        yield m, {"admin": api.token, "member": member["token"]}


@pytest.fixture(scope="module")
def schema(world):
    m, _ = world
    return schemathesis.openapi.from_asgi("/openapi.json", m.client.app)


@pytest.mark.parametrize("label", [_case(label) for label in _operations()
                                   if label not in NOT_FUZZED])
def test_every_answer_is_declared_and_matches_its_schema(schema, world, label):
    _, tokens = world
    method, path = label.split(" ", 1)
    operation = schema[path][method]
    for mode, examples in EXAMPLES.items():
        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode),
               token=st.sampled_from(sorted(tokens.values())))
        def run(case, token):
            case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)

        try:
            run()
        except Unsatisfiable:  # no parameters and no body: nothing to make invalid
            assert mode is GenerationMode.NEGATIVE
