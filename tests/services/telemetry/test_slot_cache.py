"""The slot cache (services/telemetry/ownership.py, `SlotCache`): bindings are re-read only
when the binding table changed; a MIG instance recreated under its binding (a new MIG UUID,
no binding written) is seen after `max_age_s` by reading the MIG UUIDs alone."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.telemetry.ownership import SlotCache
from gpufleet.wire.requests import RequestCreate
from tests.helpers import create_environment, gpu, join_token, registration


def register_mig_node(api, mig_uuid: str, credential: str | None) -> str:
    """node-7: a MIG GPU with one 1g.10gb instance named `mig_uuid`, and a whole GPU;
    returns the node's credential."""
    body = registration(7, gpus=0)
    body["gpus"] = [gpu(7, 0, mig_enabled=True, mig_instances=[
        {"profile_id": 19, "placement_start": 0, "mig_uuid": mig_uuid}]), gpu(7, 1)]
    response = api.as_(credential or join_token(api)).post("/api/v1/agent/register", json=body)
    assert response.status_code == 200, response.text
    return response.json()["credential"]


def test_a_recreated_mig_instance_is_seen_without_reading_every_binding(api, gf, clock):
    create_environment(api)
    credential = register_mig_node(api, "MIG-first", None)
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    for profile in ("1g.10gb", None):
        gf.lifecycle.approve(SYSTEM, gf.lifecycle.create_request(SYSTEM, RequestCreate(
            project="vision", count=1, models=["H100-80GB"], mig_profile=profile)).code, None)
    cache = SlotCache(timedelta(days=1), clock, max_age_s=0.0)  # re-check MIG UUIDs each time
    with gf.store.read() as session:
        first = cache.slots(session)
    assert sorted(s.unit[1] or "" for s in first) == ["", "MIG-first"]
    register_mig_node(api, "MIG-second", credential)  # recreated: same binding, new UUID
    with gf.store.read() as session:
        second = cache.slots(session)
    assert sorted(s.unit[1] or "" for s in second) == ["", "MIG-second"]
    whole = next(s for s in first if s.kind != "mig")
    assert next(s for s in second if s.kind != "mig") is whole  # the bindings not read again
