"""The token cache: a hit within the TTL, never past the token's own expiry, and a revocation
through this process is seen at once."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.domain.access import Role
from gpufleet.services.access.principal import Principal
from gpufleet.services.access.principal_cache import PrincipalCache
from tests.conftest import START

AGENT = Principal(role=Role.AGENT, node_name="node-1")


def test_a_valid_token_is_remembered_for_the_ttl_and_not_past_its_expiry():
    cache = PrincipalCache(timedelta(seconds=5))
    cache.put("tok", AGENT, START, token_expires_at=START + timedelta(seconds=2))
    assert cache.get("tok", START + timedelta(seconds=1)) == AGENT
    assert cache.get("tok", START + timedelta(seconds=2)) is None  # the token expired
    cache.put("tok", AGENT, START, token_expires_at=None)
    assert cache.get("tok", START + timedelta(seconds=4.9)) == AGENT
    assert cache.get("tok", START + timedelta(seconds=5)) is None
    assert cache.get("other", START) is None


def test_a_zero_ttl_remembers_nothing():
    cache = PrincipalCache(timedelta(0))
    cache.put("tok", AGENT, START, token_expires_at=None)
    assert cache.get("tok", START) is None


def test_a_revoked_token_is_refused_at_once(api, gf):
    created = api.post("/api/v1/tokens", json={"name": "ci", "role": "viewer"}).json()
    viewer = api.as_(created["token"])
    assert viewer.get("/api/v1/whoami").status_code == 200  # now cached
    assert api.post(f"/api/v1/tokens/{created['id']}/revoke").status_code == 200
    assert viewer.get("/api/v1/whoami").status_code == 401


def test_a_new_project_member_sees_the_project_at_once(api):
    assert api.post("/api/v1/users", json={"name": "nia", "role": "member"}).status_code == 201
    assert api.post("/api/v1/projects", json={"name": "vision", "organisation": "r"}
                    ).status_code == 201
    token = api.post("/api/v1/tokens", json={"name": "nia", "user": "nia"}).json()["token"]
    member = api.as_(token)
    assert member.get("/api/v1/whoami").json()["projects"] == []  # now remembered
    assert api.post("/api/v1/projects/vision/members", json={"user": "nia"}).status_code == 201
    assert member.get("/api/v1/whoami").json()["projects"] == ["vision"]
