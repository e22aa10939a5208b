"""On a GPU shared by two projects, a member sees their own allocations' workloads only:
not the other project's processes (pid, pod, namespace, claimed allocation) through
`/telemetry/latest`, `/unattributed` or `/zombies`, and not its allocations."""

from __future__ import annotations

import pytest

from gpufleet.services.access.principal import SYSTEM
from gpufleet.wire.requests import RequestCreate
from tests.helpers import create_environment, gpu_uuid, register
from tests.services.telemetry.test_queries import minutes

GIB = 1024**3
MINUTES = 5 * 60  # longer than the idle window (4 h): the idle processes are zombies


def share(gf, project: str) -> str:
    view = gf.lifecycle.create_request(SYSTEM, RequestCreate(project=project, count=1,
                                                            fraction=0.5))
    view = gf.lifecycle.approve(SYSTEM, view.code, None)
    assert view.state == "active", view
    return view.code


@pytest.fixture
def shared(api, gf, clock):
    """One shared H100 held half by vision (GR of mia's project), half by speech; each
    runs a process claiming its allocation; one more process claims nothing."""
    create_environment(api, "onprem-slicing", default_sharing_mode="shared")
    register(api, 1, "onprem-slicing", gpus=1)
    for project in ("vision", "speech"):
        api.post("/api/v1/projects", json={"name": project, "organisation": "research"})
    api.post("/api/v1/users", json={"name": "mia", "role": "member"})
    api.post("/api/v1/projects/vision/members", json={"user": "mia"})
    vision, speech = share(gf, "vision"), share(gf, "speech")
    uuid = gpu_uuid(1, 0)
    start = clock.now()
    minutes(gf, start, uuid, {"gpu.gr_engine_active": 40.0, "gpu.memory_used_bytes": 9 * GIB},
            count=MINUTES)
    for pid, labels in ((101, {"claimed_allocation": vision, "pod": "vision-train"}),
                        (202, {"claimed_allocation": speech, "pod": "speech-asr",
                               "namespace": "speech-secret"}),
                        (303, {"pod": "who-knows"}),
                        (404, {"claimed_allocation": "GR-9999", "pod": "stray"})):
        minutes(gf, start, uuid, {"process.memory_used_bytes": 3 * GIB,
                                  "process.sm_utilization": 0.0},
                labels={"pid": str(pid), "process_name": "python", **labels}, count=MINUTES)
    clock.advance(MINUTES * 60)
    gf.telemetry.rollup(clock.now())
    member = api.post("/api/v1/tokens", json={"name": "mia", "user": "mia"}).json()["token"]
    return {"member": api.as_(member), "vision": vision, "speech": speech, "uuid": uuid}


def get(api, path: str, **params):
    response = api.get(f"/api/v1/telemetry/{path}", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_member_sees_only_their_own_processes_on_a_shared_gpu(api, shared):
    member = shared["member"]
    (unit,) = get(member, "latest")["items"]
    assert [c["allocation"] for c in unit["charged_to"]] == [shared["vision"]]
    assert [(p["pid"], p["pod"], p["claim"]) for p in unit["processes"]] == \
        [(101, "vision-train", "matches")]
    assert shared["speech"] not in str(unit) and "speech-secret" not in str(unit)
    (everything,) = get(api, "latest")["items"]  # an operator sees them all
    assert [(p["pid"], p["claim"]) for p in everything["processes"]] == \
        [(101, "matches"), (202, "matches"), (303, "no_claim"), (404, "mismatch")]


def test_a_member_finds_no_other_projects_workloads_in_the_problem_lists(api, shared):
    member = shared["member"]
    for path in ("unattributed", "zombies"):
        listed = get(member, path)
        assert all(z["pid"] == 101 for z in listed), (path, listed)
        assert shared["speech"] not in str(listed) and "stray" not in str(listed)
    assert {z["pid"] for z in get(member, "zombies")} == {101}
    assert {z["pid"] for z in get(api, "zombies")} == {101, 202, 303, 404}
    (stray,) = get(api, "unattributed")
    assert (stray["pid"], stray["reason"]) == (404, "mismatch")
    assert sorted(stray["bound_allocations"]) == [shared["vision"], shared["speech"]]
