"""The people and fleet most lifecycle tests start from, and the calls they make.

conftest.py loads this module as a plugin, so its fixtures need no import.
"""

from __future__ import annotations

import pytest

from tests.helpers import create_environment, register


@pytest.fixture
def people(api):
    """Projects `vision` and `speech`; member `mia` (vision) and operator `olga`."""
    api.post("/api/v1/users", json={"name": "mia", "role": "member"})
    api.post("/api/v1/users", json={"name": "olga", "role": "operator"})
    for project in ("vision", "speech"):
        api.post("/api/v1/projects", json={"name": project, "organisation": "research"})
    api.post("/api/v1/projects/vision/members", json={"user": "mia"})
    member = api.post("/api/v1/tokens", json={"name": "mia", "user": "mia"}).json()["token"]
    operator = api.post("/api/v1/tokens", json={"name": "olga", "user": "olga"}).json()["token"]
    return api.as_(member), api.as_(operator)


@pytest.fixture
def h100s(api, people):
    """Two ready nodes of 8 × H100 each."""
    create_environment(api)
    register(api, 1)
    register(api, 2)
    return people


@pytest.fixture
def two_nodes(api):
    """Two ready nodes of 4 GPUs each; projects `vision` and `speech` (no members)."""
    create_environment(api)
    register(api, 1, gpus=4)
    register(api, 2, gpus=4)
    for project in ("vision", "speech"):
        api.post("/api/v1/projects", json={"name": project, "organisation": "research"})


def create(api, expect: int = 201, **body):
    response = api.post("/api/v1/requests", json={"project": "vision", **body})
    assert response.status_code == expect, response.text
    return response.json()


def act(api, code: str, action: str, expect: int = 200, **body):
    response = api.post(f"/api/v1/requests/{code}/{action}", json=body or None)
    assert response.status_code == expect, response.text
    return response.json()
