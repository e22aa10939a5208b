"""MIG on nodes whose backend cannot change MIG layouts (`nvml`, `dcgm-exporter`: read
only): placement uses the instances the node has and plans none it would have to create
or destroy, so a request is never `active` on units that do not exist (docs/mig.md)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from gpufleet.agent.dcgm_inventory import registration_from_page
from gpufleet.agent.host import HostFacts
from gpufleet.store.tables import MigPlan, Node
from tests.helpers import create_environment, gpu, join_token, registration
from tests.lifecycle_world import act, create, people  # noqa: F401 (a fixture)
from tests.paths import DATA_DIR

ONE_G, THREE_G = 19, 9  # H100-80GB: 1g.10gb, 3g.40gb


def join_mig_node(api, backend: str | None, **extra) -> None:
    """node-7: one H100 in MIG mode with 1g.10gb at slice 0 and 3g.40gb at slice 4."""
    create_environment(api, "onprem-slicing")
    body = {**registration(7, gpus=0), "gpus": [gpu(7, 0, mig_enabled=True, mig_instances=[
        {"profile_id": ONE_G, "placement_start": 0, "mig_uuid": "MIG-1g-at-0"},
        {"profile_id": THREE_G, "placement_start": 4, "mig_uuid": "MIG-3g-at-4"}])],
        **extra}
    if backend is not None:
        body["backend"] = backend
    reply = api.as_(join_token(api, "onprem-slicing")).post("/api/v1/agent/register",
                                                            json=body)
    assert reply.status_code == 200, reply.text


def plans(store) -> int:
    with store.read() as session:
        return session.scalar(select(func.count()).select_from(MigPlan))


@pytest.mark.parametrize("backend", ["nvml", "dcgm-exporter"])
def test_an_existing_instance_is_granted_as_it_is(api, people, store, backend):  # noqa: F811
    member, operator = people
    join_mig_node(api, backend)
    code = create(member, count=1, mig_profile="1g.10gb")["code"]
    granted = act(operator, code, "approve")
    assert granted["state"] == "active"
    (unit,) = granted["units"]
    assert (unit["mig_profile"], unit["mig_start"]) == ("1g.10gb", 0)
    assert granted["exports"]["CUDA_VISIBLE_DEVICES"] == "MIG-1g-at-0"
    assert plans(store) == 0


@pytest.mark.parametrize("backend", ["nvml", "dcgm-exporter"])
@pytest.mark.parametrize("profile", ["2g.20gb", "7g.80gb"])
def test_no_instance_is_planned_on_a_read_only_node(api, people, store,  # noqa: F811
                                                    backend, profile):
    """2g.20gb fits at slice 2 only as a new instance, 7g.80gb only by dropping both unbound
    instances: plans the node cannot apply. The request waits for capacity instead of
    going active on `pending:` units, and the node's instances stay as they are."""
    member, operator = people
    join_mig_node(api, backend)
    code = create(member, count=1, mig_profile=profile)["code"]
    waiting = act(operator, code, "approve")
    assert waiting["state"] == "approved"
    assert waiting["units"] == []
    assert "pending:" not in str(waiting.get("exports"))
    assert plans(store) == 0
    node = api.get("/api/v1/nodes/node-7").json()
    (mig_gpu,) = node["gpu_list"]
    assert len(api.get(f"/api/v1/gpus/{mig_gpu['uuid']}").json()["mig_instances"]) == 2


@pytest.mark.parametrize(("backend", "says", "stored"), [
    ("sim", False, False), ("nvml", True, True),  # what the node says wins
    ("dcgm-exporter", None, False), ("nvml", None, False),  # older agents: their backend
    ("sim", None, True), (None, None, True)])
def test_the_node_says_what_it_can_do_and_old_agents_are_read_by_their_backend(
        api, store, backend, says, stored):
    join_mig_node(api, backend, **({} if says is None else {"applies_mig_plans": says}))
    with store.read() as session:
        assert session.scalar(select(Node.applies_mig_plans)) is stored


def test_a_node_that_applies_plans_still_gets_them(api, people, store):  # noqa: F811
    member, operator = people
    join_mig_node(api, "sim")
    code = create(member, count=1, mig_profile="2g.20gb")["code"]
    granted = act(operator, code, "approve")
    assert granted["state"] == "active"
    assert plans(store) == 1


def test_instances_a_dcgm_exporter_page_shows_without_placements_are_never_planned_over(
        api, people, store):  # noqa: F811
    """The real page: its A100 has 3g.20gb, 2g.10gb and two 1g.5gb, with no placements (the
    page has none). Placement cannot bind them (a binding names its instance by placement)
    and must not plan new ones into memory they hold."""
    member, operator = people
    create_environment(api, "onprem-slicing")
    page = (DATA_DIR / "dcgm_exporter" / "a100_mig.txt").read_text()
    host = HostFacts("machine-a100", "a100-mig-03", 64, 512 * 1024**3)
    body = registration_from_page(page, host).model_dump(mode="json", exclude_none=True)
    reply = api.as_(join_token(api, "onprem-slicing")).post("/api/v1/agent/register",
                                                            json=body)
    assert reply.status_code == 200, reply.text
    code = create(member, count=1, mig_profile="1g.5gb")["code"]
    assert act(operator, code, "approve")["state"] == "approved"
    assert plans(store) == 0
