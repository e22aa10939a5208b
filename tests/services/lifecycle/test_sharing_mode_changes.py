"""A GPU's sharing mode never changes under its open bindings (docs/lifecycle.md,
"Sharing-mode changes under open bindings").

One invariant, for every pair of binding kinds: while a GPU holds open bindings of one kind,
no binding of another kind opens on it. Registration keeps the GPU in the mode its bindings
were made in (the reported mode waits, flagged, and the GPU drains until the last binding
ends), and the store refuses a binding of another kind on a held GPU whatever the placement
believed.
"""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import update

from gpufleet.store.tables import Gpu
from tests.helpers import create_environment, gpu, gpu_uuid, join_token, registration
from tests.lifecycle_world import act, create

KINDS = ("whole", "mig", "shared")
MODE = {"whole": "exclusive", "mig": "mig", "shared": "shared"}
ASK = {"whole": {"count": 1}, "mig": {"count": 1, "mig_profile": "1g.10gb"},
       "shared": {"count": 1, "fraction": 0.5}}
PAIRS = [(held, other) for held, other in itertools.product(KINDS, KINDS) if held != other]
IDS = [f"{held} held, {other} asked" for held, other in PAIRS]


def _gpu_in(number: int, kind: str) -> dict:
    mode = MODE[kind]
    return gpu(number, 0, sharing_mode=mode, mig_enabled=mode == "mig")


def _register(api, number: int, kind: str, credential: str | None = None) -> dict:
    """Register node `number` with one H100 in the mode of `kind` (again, with its own
    credential, when given)."""
    body = registration(number, gpus=0)
    body["gpus"] = [_gpu_in(number, kind)]
    token = credential or join_token(api)
    response = api.as_(token).post("/api/v1/agent/register", json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def held_world(api, people):
    """node-1's one GPU is held by an active request of the `held` kind; node-2 (cordoned)
    has a GPU of the `other` kind, so a request of that kind is possible but has nowhere
    legitimate to go."""
    create_environment(api)

    def build(held: str, other: str):
        member, operator = people
        credential = _register(api, 1, held)["credential"]
        _register(api, 2, other)
        assert api.post("/api/v1/nodes/node-2/cordon",
                        json={"reason": "kept out of the way"}).status_code == 200
        holder = act(operator, create(member, **ASK[held])["code"], "approve")
        assert holder["state"] == "active"
        assert {u["gpu_uuid"] for u in holder["units"]} == {gpu_uuid(1, 0)}
        return member, operator, credential, holder["code"]

    return build


@pytest.mark.parametrize(("held", "other"), PAIRS, ids=IDS)
def test_a_mode_change_under_open_bindings_waits_for_them_to_end(api, held_world, held,
                                                                  other):
    member, operator, credential, holder = held_world(held, other)
    _register(api, 1, other, credential=credential)  # the agent now reports another mode

    shown = api.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()
    assert shown["sharing_mode"] == MODE[held]  # placement keeps the bindings' mode
    assert shown["pending_sharing_mode"] == MODE[other]  # flagged for the operator
    second = act(operator, create(member, **ASK[other])["code"], "approve")
    assert second["state"] == "approved", second  # never granted on the held GPU
    assert second["units"] == []
    third = act(operator, create(member, **ASK[held])["code"], "approve")
    assert third["state"] == "approved", third  # the GPU drains: no new holder either

    act(member, holder, "release")  # the last binding ends: the reported mode applies
    shown = api.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()
    assert (shown["sharing_mode"], shown["pending_sharing_mode"]) == (MODE[other], None)
    granted = member.get(f"/api/v1/requests/{second['code']}").json()
    assert granted["state"] == "active"
    assert {u["gpu_uuid"] for u in granted["units"]} == {gpu_uuid(1, 0)}
    changes = api.get("/api/v1/audit-events",
                      params={"action": "gpu.sharing_mode_changed"}).json()["items"]
    assert [(e["subject"], e["details"]["to"]) for e in changes] == \
        [(gpu_uuid(1, 0), MODE[other])]


def test_reporting_the_bindings_mode_again_cancels_the_pending_change(api, held_world):
    member, _, credential, holder = held_world("whole", "shared")
    _register(api, 1, "shared", credential=credential)
    _register(api, 1, "whole", credential=credential)  # the operator turned it back
    shown = api.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()
    assert (shown["sharing_mode"], shown["pending_sharing_mode"]) == ("exclusive", None)
    act(member, holder, "release")
    assert api.get(f"/api/v1/gpus/{gpu_uuid(1, 0)}").json()["sharing_mode"] == "exclusive"


@pytest.mark.parametrize(("held", "other"), PAIRS, ids=IDS)
def test_the_store_refuses_a_binding_of_another_kind_on_a_held_gpu(api, store, gf,
                                                                   held_world, held, other):
    """Whatever changed the mode under the bindings (a path that forgot the rule, rows
    from before it), the binding insert itself refuses to double-book the GPU."""
    member, operator, _, _ = held_world(held, other)
    with store.write() as session:
        session.execute(update(Gpu).where(Gpu.uuid == gpu_uuid(1, 0))
                        .values(sharing_mode=MODE[other], allocated=False))
    gf.lifecycle.placement.mark_all_stale()  # the placement now believes the GPU free
    second = act(operator, create(member, **ASK[other])["code"], "approve")
    assert second["state"] == "approved", second
    assert second["units"] == []
