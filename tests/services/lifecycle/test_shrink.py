"""Shrinking an active allocation: some units end through the release path, the rest stay."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.requests import request_id_from_code
from gpufleet.services.lifecycle.shrink import release_units
from gpufleet.store.tables import AuditEvent, Gpu, GpuLabel, GpuRequest
from tests.lifecycle_world import act, create


def _allocation(api, count=3):
    code = create(api, count=count, models=["H100-80GB"], same_node=True)["code"]
    view = act(api, code, "approve")
    assert view["state"] == "active"
    return code, [u["gpu_uuid"] for u in view["units"]]


def _shrink(gf, code, uuids, clock):
    with gf.store.write() as s:
        request = s.get(GpuRequest, request_id_from_code(code))
        ids = s.scalars(select(Gpu.id).where(Gpu.uuid.in_(uuids))).all()
        return len(release_units(s, request, ids, "system:reclaim", clock.now(), "idle"))


def test_shrink_ends_the_named_units_and_keeps_the_rest(api, gf, clock, h100s):
    code, gpus = _allocation(api)
    assert _shrink(gf, code, gpus[1:], clock) == 2
    view = api.get(f"/api/v1/requests/{code}").json()
    assert view["state"] == "active"
    assert [u["gpu_uuid"] for u in view["units"] if u["ended_at"] is None] == gpus[:1]
    with gf.store.read() as s:
        labelled = s.scalars(select(Gpu.uuid).join(GpuLabel).where(
            GpuLabel.key == "allocation", GpuLabel.value == code)).all()
        event = s.scalars(select(AuditEvent).where(AuditEvent.action == "request.shrunk")).one()
    assert labelled == gpus[:1]
    assert (event.actor, event.details["units_released"], event.details["units_left"]) == (
        "system:reclaim", 2, 1)
    freed = api.get("/api/v1/gpus/" + gpus[1]).json()
    assert freed["status"] == "free"


def test_shrinking_by_every_unit_is_refused_as_a_release(api, gf, clock, h100s):
    code, gpus = _allocation(api, count=2)
    with pytest.raises(InvalidInput) as refused:
        _shrink(gf, code, gpus, clock)
    assert refused.value.code == "shrink_to_nothing"


def test_only_an_active_allocation_shrinks(api, gf, clock, h100s):
    code, gpus = _allocation(api, count=2)
    act(api, code, "release")
    with pytest.raises(InvalidInput) as refused:
        _shrink(gf, code, gpus[:1], clock)
    assert refused.value.code == "invalid_transition"
