"""Telemetry queries through the API: the funnel, idle lists, range queries, latest
snapshots, zombies and unattributed usage, on samples written straight into the store
(the embedded one here; tests/services/telemetry/test_queries_vm.py runs the same tests on
VictoriaMetrics)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.services.access.principal import SYSTEM
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.prometheus_store import PrometheusTelemetryStore
from gpufleet.wire.requests import RequestCreate
from tests.helpers import create_environment, gpu, gpu_uuid, join_token, register, registration

GIB = 1024**3
HOURS = 5
ATTRS = {"node": "node-1", "environment": "onprem-hpc", "model": "H100-80GB"}


def grant(gf, project: str) -> tuple[str, str]:
    view = gf.lifecycle.create_request(SYSTEM, RequestCreate(project=project, count=1,
                                                            models=["H100-80GB"]))
    view = gf.lifecycle.approve(SYSTEM, view.code, None)
    assert view.state == "active"
    return view.code, view.units[0].gpu_uuid


def minutes(gf, start, uuid: str, values: dict[str, float], *, labels=None,
            count: int = HOURS * 60, mig: str | None = None) -> None:
    gf.telemetry.write([
        Sample(series(metric, uuid, mig, labels=labels, **ATTRS),
               start + timedelta(minutes=m, seconds=30), value)
        for m in range(count) for metric, value in values.items()])


@pytest.fixture
def fleet(api, gf, clock):
    """node-1 with 4 H100s: vision's GPU busy (effective), speech's idle holding 2 GiB, one
    unbound GPU running a process, one silent. Five hours of minutes, rolled up."""
    create_environment(api)
    register(api, 1, gpus=4)
    for project in ("vision", "speech"):
        api.post("/api/v1/projects", json={"name": project, "organisation": "research"})
    api.post("/api/v1/users", json={"name": "mia", "role": "member"})
    api.post("/api/v1/projects/vision/members", json={"user": "mia"})
    start = clock.now()
    vision, busy = grant(gf, "vision")
    speech, idle = grant(gf, "speech")
    free = next(gpu_uuid(1, i) for i in range(4) if gpu_uuid(1, i) not in (busy, idle))
    silent = next(gpu_uuid(1, i) for i in range(4) if gpu_uuid(1, i) not in (busy, idle, free))
    minutes(gf, start, busy, {"gpu.gr_engine_active": 80.0, "gpu.sm_active": 60.0,
                              "gpu.memory_used_bytes": 40.0 * GIB})
    minutes(gf, start, idle, {"gpu.gr_engine_active": 1.0, "gpu.sm_active": 0.0,
                              "gpu.memory_used_bytes": 2.0 * GIB})
    minutes(gf, start, free, {"gpu.gr_engine_active": 30.0, "gpu.memory_used_bytes": GIB})
    minutes(gf, start, busy, {"process.memory_used_bytes": 30.0 * GIB,
                              "process.sm_utilization": 55.0},
            labels={"pid": "101", "process_name": "python", "claimed_allocation": vision})
    minutes(gf, start, idle, {"process.memory_used_bytes": 2.0 * GIB,
                              "process.sm_utilization": 0.0},
            labels={"pid": "202", "process_name": "jupyter", "claimed_allocation": vision})
    minutes(gf, start, free, {"process.memory_used_bytes": GIB,
                              "process.sm_utilization": 30.0},
            labels={"pid": "303", "process_name": "miner"})
    clock.advance(HOURS * 3600)
    gf.telemetry.rollup(clock.now())
    member = api.post("/api/v1/tokens", json={"name": "mia", "user": "mia"}).json()["token"]
    return {"vision": vision, "speech": speech, "busy": busy, "idle": idle, "free": free,
            "silent": silent, "member": api.as_(member), "start": start}


def get(api, path: str, expect: int = 200, **params):
    response = api.get(f"/api/v1/telemetry/{path}", params=params)
    assert response.status_code == expect, response.text
    return response.json()


def test_funnel_of_the_fleet_and_by_project(api, fleet):
    view = get(api, "funnel", window="24h")
    whole = view["fleet"]
    assert whole["total_gpu_hours"] == pytest.approx(4 * HOURS)
    assert whole["reporting_gpu_hours"] == pytest.approx(3 * HOURS)
    assert whole["silent_gpu_hours"] == pytest.approx(HOURS)
    assert whole["allocated_gpu_hours"] == pytest.approx(2 * HOURS)
    assert whole["active_gpu_hours"] == pytest.approx(HOURS)
    assert whole["effective_gpu_hours"] == pytest.approx(HOURS)
    assert whole["unknown_gpu_hours"] == pytest.approx(0)
    assert whole["efficiency_percent"] == pytest.approx(30.0)  # 60 % on half the hours
    rows = {r["group"]["project"]: r for r in get(api, "funnel", by="project")["rows"]}
    assert rows["vision"]["active_gpu_hours"] == pytest.approx(HOURS)
    assert rows["speech"]["active_gpu_hours"] == 0
    assert rows["speech"]["allocated_gpu_hours"] == pytest.approx(HOURS)
    assert rows["vision"]["total_gpu_hours"] is None  # projects own no inventory
    by_env = get(api, "funnel", by="environment,model")["rows"]
    assert [(r["group"], r["total_gpu_hours"]) for r in by_env] == [
        ({"environment": "onprem-hpc", "model": "H100-80GB"}, pytest.approx(4 * HOURS))]


def test_funnel_counts_only_the_window(api, fleet, clock):
    view = get(api, "funnel", window="1h")
    assert view["fleet"]["allocated_gpu_hours"] == pytest.approx(2)
    assert view["fleet"]["active_gpu_hours"] == pytest.approx(1)
    old = get(api, "funnel", window="2h", end=(fleet["start"] + timedelta(hours=1)).isoformat())
    assert old["fleet"]["allocated_gpu_hours"] == pytest.approx(2)  # bound for 1 h of 2


def test_idle_and_idle_held(api, fleet):
    idle = get(api, "idle")
    assert [(i["allocation"], i["state"]) for i in idle["items"]] == \
        [(fleet["speech"], "idle_held")]
    item = idle["items"][0]
    assert item["memory_held_bytes"] == 2 * GIB
    assert item["idle_since"].startswith(fleet["start"].isoformat()[:16])
    assert get(api, "idle", held_only="true")["items"] == idle["items"]


def test_idle_memory_is_read_as_of_the_judged_minutes(api, fleet, clock):
    """The activity is judged up to the last rolled-up minute; the memory that splits idle
    from idle-held is read as of that same end, on every store — not as of now, which a
    late rollup leaves minutes ahead of it (here 8: the memory, 5 minutes fresh, is still
    the judged minutes' own)."""
    clock.advance(8 * 60)
    item = only_item(get(api, "idle"))
    assert (item["allocation"], item["state"], item["memory_held_bytes"]) == \
        (fleet["speech"], "idle_held", 2 * GIB)


def only_item(view: dict) -> dict:
    assert len(view["items"]) == 1, view["items"]
    return view["items"][0]


def test_members_see_only_their_projects(api, fleet):
    member = fleet["member"]
    rows = get(member, "funnel", by="project")["rows"]
    assert [r["group"]["project"] for r in rows] == ["vision"]
    assert get(member, "idle")["items"] == []
    snapshots = get(member, "latest")["items"]
    assert {s["gpu_uuid"] for s in snapshots} == {fleet["busy"]}
    query = get(member, "query", metric="gpu.sm_active", by="project", since="5h", step="1h")
    assert [s["labels"]["project"] for s in query["series"]] == ["vision"]


def test_range_query_by_project_and_environment(api, fleet):
    result = get(api, "query", metric="gpu.sm_active", by="project", since="5h", step="1h")
    means = {s["labels"]["project"]: [v for _, v in s["points"]] for s in result["series"]}
    assert means == {"vision": [60.0] * 5, "speech": [0.0] * 5}
    memory = get(api, "query", metric="gpu.memory_used_bytes", by="environment", since="1h",
                 step="1h")
    assert memory["series"][0]["points"][0][1] == pytest.approx(43 * GIB)  # absolute: summed
    assert memory["unit"] == "bytes"
    filtered = get(api, "query", metric="gpu.gr_engine_active", since="1h", step="1h",
                   filter=f"gpu_uuid={fleet['free']}")
    assert filtered["series"][0]["points"][0][1] == pytest.approx(30.0)


def test_a_repeated_range_query_follows_who_asks(api, fleet):
    """The same question asked in turn by an admin and a member: each gets their own
    bindings' answer, though the last bindings and slots are reused while unchanged."""
    def projects(who):
        result = get(who, "query", metric="gpu.sm_active", by="project", since="5h", step="1h")
        return {s["labels"]["project"]: [v for _, v in s["points"]] for s in result["series"]}

    everyone = {"vision": [60.0] * 5, "speech": [0.0] * 5}
    assert projects(api) == everyone
    assert projects(api) == everyone
    assert projects(fleet["member"]) == {"vision": [60.0] * 5}
    assert projects(api) == everyone


@pytest.mark.parametrize(("params", "code"), [
    ({"metric": "gpu.nope"}, "unknown_metric"),
    ({"metric": "gpu.sm_active", "since": "6 hours"}, "invalid_duration"),
    ({"metric": "gpu.sm_active", "since": "7d", "step": "1s"}, "step_too_small"),
    ({"metric": "gpu.sm_active", "by": "colour"}, "unknown_label"),
    ({"metric": "gpu.sm_active", "filter": "colour"}, "invalid_label_selector"),
    ({"metric": "gpu.sm_active", "since": "90d"}, "window_too_long"),
])
def test_bad_queries_are_400s_naming_the_problem(api, fleet, params, code):
    error = get(api, "query", 400, **params)["error"]
    assert error["code"] == code, error


def test_bad_funnel_input_is_a_400(api, fleet):
    assert get(api, "funnel", 400, by="colour")["error"]["code"] == "unknown_label"
    assert get(api, "funnel", 400, window="soon")["error"]["code"] == "invalid_duration"


@pytest.mark.parametrize(("path", "params", "code"), [
    ("query", {"since": "99999999999999999999d"}, "invalid_duration"),
    ("query", {"step": "99999999999999999999d"}, "invalid_duration"),
    ("query", {"since": "9" * 400 + "s"}, "invalid_duration"),
    ("query", {"end": "0001-01-01T00:30:00Z"}, "time_out_of_range"),
    ("query", {"start": "0001-01-01T00:00:00Z", "end": "0001-01-01T00:30:00Z"},
     "time_out_of_range"),
    ("query", {"start": "9999-12-31T23:00:00Z", "end": "9999-12-31T23:59:59Z"},
     "time_out_of_range"),
    ("query", {"end": "2026-11-02T09:00:00"}, "naive_time"),
    ("funnel", {"window": "3000000w"}, "invalid_duration"),
    ("funnel", {"window": "99999999999999999999d"}, "invalid_duration"),
    ("funnel", {"end": "0001-01-01T00:30:00Z"}, "time_out_of_range"),
    ("funnel", {"end": "9999-12-31T23:59:59Z"}, "time_out_of_range"),
])
def test_out_of_range_durations_and_times_are_400s(api, fleet, path, params, code):
    """Each of these overflowed Python's timedelta / datetime: a 500, and the client's next
    request on that keep-alive connection was reset."""
    if path == "query":
        params = {"metric": "gpu.sm_active", **params}
    error = get(api, path, 400, **params)["error"]
    assert error["code"] == code, error
    assert get(api, "funnel", window="1h")["fleet"]["allocated_gpu_hours"] > 0  # still serving


def test_the_funnel_never_counts_hours_after_now(api, fleet, clock):
    """A window reaching past now is cut at now: no GPU-hours that have not happened."""
    now = clock.now()
    ahead = get(api, "funnel", window="2h", end=(now + timedelta(hours=1)).isoformat())
    assert ahead["window_end"] == get(api, "funnel", window="1h")["window_end"]
    assert ahead["window_start"] == (now - timedelta(hours=1)).isoformat().replace("+00:00",
                                                                                   "Z")
    assert ahead["fleet"]["total_gpu_hours"] == pytest.approx(4)  # 4 GPUs × the past 1 h
    assert ahead["fleet"]["allocated_gpu_hours"] == pytest.approx(2)
    future = get(api, "funnel", 400, window="1h", end=(now + timedelta(hours=2)).isoformat())
    assert future["error"]["code"] == "window_in_future"


def test_latest_snapshots_charge_processes_to_the_binding(api, fleet):
    items = {s["gpu_uuid"]: s for s in get(api, "latest")["items"]}
    assert set(items) == {gpu_uuid(1, i) for i in range(4)}
    busy = items[fleet["busy"]]
    assert busy["activity_percent"] == 80.0 and busy["activity_source"] == "gr_engine_active"
    assert [c["allocation"] for c in busy["charged_to"]] == [fleet["vision"]]
    assert [(p["pid"], p["claim"]) for p in busy["processes"]] == [(101, "matches")]
    idle = items[fleet["idle"]]
    assert [(p["pid"], p["claim"]) for p in idle["processes"]] == [(202, "mismatch")]
    assert items[fleet["silent"]]["at"] is None
    first = get(api, "latest", limit=3)
    assert len(first["items"]) == 3 and first["next_cursor"]
    rest = get(api, "latest", limit=3, cursor=first["next_cursor"])
    assert len(rest["items"]) == 1 and rest["next_cursor"] is None


def test_unattributed_usage(api, fleet):
    found = {(u["gpu_uuid"], u["kind"], u["reason"]) for u in get(api, "unattributed")}
    assert found == {(fleet["idle"], "process", "mismatch"),
                     (fleet["free"], "process", "unbound")}


def test_zombies(api, fleet, gf, clock):
    zombies = {(z["pid"], z["reason"]) for z in get(api, "zombies")}
    # 303 holds memory on an unbound GPU; 202 has done nothing for the whole idle window.
    assert zombies == {(303, "no_binding"), (202, "no_sm_activity")}


def test_top(api, fleet):
    view = get(api, "top", limit=2)
    assert view["fleet"]["units"] == 3
    assert [u["gpu_uuid"] for u in view["busiest"]] == [fleet["busy"], fleet["free"]]
    assert [u["gpu_uuid"] for u in view["idlest_allocated"]] == [fleet["idle"], fleet["busy"]]
    projects = {g["group"]["project"]: g for g in view["by_project"]}
    assert projects["vision"]["allocated_gpus"] == 1.0


def test_metrics_carry_the_funnel_by_environment(api, fleet):
    response = api.get("/metrics")
    families = {f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
                for f in text_string_to_metric_families(response.text)}
    key = (("environment", "onprem-hpc"),)
    assert families["gpufleet_funnel_total_gpu_hours"][key] == pytest.approx(4 * HOURS)
    assert families["gpufleet_funnel_allocated_gpu_hours"][key] == pytest.approx(2 * HOURS)
    assert families["gpufleet_funnel_active_gpu_hours"][key] == pytest.approx(HOURS)
    assert families["gpufleet_funnel_effective_gpu_hours"][key] == pytest.approx(HOURS)


def test_an_old_window_keeps_its_bindings(api, fleet, gf, clock):
    """Bindings that ended long ago (beyond the binding cache's keep) still attribute
    the window they held."""
    for code in (fleet["vision"], fleet["speech"]):
        gf.lifecycle.release(SYSTEM, code, None)
    clock.advance(40 * 86400)
    end = (fleet["start"] + timedelta(hours=HOURS)).isoformat()
    rows = {r["group"]["project"]: r
            for r in get(api, "funnel", by="project", window=f"{HOURS}h", end=end)["rows"]}
    assert rows["vision"]["allocated_gpu_hours"] == pytest.approx(HOURS)
    assert rows["speech"]["allocated_gpu_hours"] == pytest.approx(HOURS)


@pytest.fixture
def migs(api, gf, clock):
    """A 1g.10gb instance on an A100 (no gr_engine_active without DCGM) and one on an H100
    (GPM gives it gr_engine_active; this one does not send it), each bound and running a
    process for an hour."""
    create_environment(api, name="onprem-slicing")
    body = registration(7, gpus=0)
    body["gpus"] = [
        gpu(7, 0, name="NVIDIA A100-SXM4-80GB", pci_device_id=0x20B210DE, mig_enabled=True,
            mig_instances=[{"profile_id": 19, "placement_start": 0, "mig_uuid": "MIG-amp"}]),
        gpu(7, 1, mig_enabled=True,
            mig_instances=[{"profile_id": 19, "placement_start": 0, "mig_uuid": "MIG-hop"}])]
    response = api.as_(join_token(api, "onprem-slicing")).post("/api/v1/agent/register",
                                                                json=body)
    assert response.status_code == 200, response.text
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    start = clock.now()
    for model, mig in (("A100-80GB", "MIG-amp"), ("H100-80GB", "MIG-hop")):
        view = gf.lifecycle.approve(SYSTEM, gf.lifecycle.create_request(SYSTEM, RequestCreate(
            project="vision", count=1, models=[model], mig_profile="1g.10gb")).code, None)
        assert view.units[0].mig_uuid == mig
        attrs = {"node": "node-7", "environment": "onprem-slicing", "model": model}
        gf.telemetry.write([
            Sample(series(metric, view.units[0].gpu_uuid, mig, labels=labels, **attrs),
                   start + timedelta(minutes=m, seconds=30), value)
            for m in range(60) for metric, labels, value in (
                ("gpu.memory_used_bytes", None, 4.0 * GIB),
                ("process.memory_used_bytes", {"pid": "7", "process_name": "python"}, 4 * GIB))])
    clock.advance(3600)
    gf.telemetry.rollup(clock.now())
    return {"amp": (gpu_uuid(7, 0), "MIG-amp"), "hop": (gpu_uuid(7, 1), "MIG-hop")}


def test_mig_activity_is_one_rule_in_latest_top_and_the_funnel(api, migs):
    """An Ampere instance with a process running is active everywhere; a Hopper instance
    without gr_engine_active is unknown everywhere (not judged by its processes)."""
    latest = {(s["gpu_uuid"], s["mig_uuid"]): s
              for s in get(api, "latest", environment="onprem-slicing")["items"]}
    assert (latest[migs["amp"]]["activity_percent"],
            latest[migs["amp"]]["activity_source"]) == (100.0, "processes")
    assert (latest[migs["hop"]]["activity_percent"],
            latest[migs["hop"]]["activity_source"]) == (None, "unknown")
    top = {(u["gpu_uuid"], u["mig_uuid"]): u for u in get(api, "top")["busiest"]}
    assert top[migs["amp"]]["activity_percent"] == 100.0
    assert migs["hop"] not in top
    rows = {r["group"]["model"]: r for r in get(api, "funnel", by="model", window="1h")["rows"]}
    weight = 0.143  # 1g.10gb: 1 of 7 compute slices, held as 143 milli
    assert rows["A100-80GB"]["active_gpu_hours"] == pytest.approx(weight)
    assert rows["A100-80GB"]["unknown_gpu_hours"] == pytest.approx(0)
    assert rows["H100-80GB"]["active_gpu_hours"] == 0
    assert rows["H100-80GB"]["unknown_gpu_hours"] == pytest.approx(weight)


def test_a_mig_gpus_own_unit_is_never_unbound(api, migs, gf, clock):
    """The H100 is in MIG mode and its one instance is held. Its whole-GPU unit reports
    what its instances do (engine activity, memory, a process the source could not place):
    that is no one's usage of its own — not unattributed, not a zombie, not a unit in
    `top`. An instance nobody holds is still judged: it is a unit."""
    gpu_hop = migs["hop"][0]
    attrs = {"node": "node-7", "environment": "onprem-slicing", "model": "H100-80GB"}
    at = clock.now() - timedelta(seconds=30)
    gf.telemetry.write([
        Sample(series("gpu.gr_engine_active", gpu_hop, None, **attrs), at, 60.0),
        Sample(series("gpu.memory_used_bytes", gpu_hop, None, **attrs), at, 4.0 * GIB),
        Sample(series("process.memory_used_bytes", gpu_hop, None,
                      labels={"pid": "8", "process_name": "python"}, **attrs), at, GIB),
        Sample(series("gpu.gr_engine_active", gpu_hop, "MIG-stray", **attrs), at, 40.0)])
    found = {(u["gpu_uuid"], u["mig_uuid"], u["kind"]) for u in get(api, "unattributed")}
    assert found == {(gpu_hop, "MIG-stray", "activity")}
    assert [z["pid"] for z in get(api, "zombies")] == []
    busiest = {(u["gpu_uuid"], u["mig_uuid"]) for u in get(api, "top")["busiest"]}
    assert (gpu_hop, None) not in busiest and (gpu_hop, "MIG-stray") in busiest


def test_a_member_without_projects_pages_over_nothing(api, fleet, gf):
    grant(gf, "vision")  # vision holds two GPUs now: two pages of one for those who see it
    api.post("/api/v1/users", json={"name": "noah", "role": "member"})
    token = api.post("/api/v1/tokens", json={"name": "noah", "user": "noah"}).json()["token"]
    page = get(api.as_(token), "latest", project="vision", limit=1)
    assert page == {"items": [], "next_cursor": None}
    first = get(api, "latest", project="vision", limit=1)
    assert len(first["items"]) == 1 and first["next_cursor"]
    assert len(get(api, "latest", project="vision", limit=1,
                   cursor=first["next_cursor"])["items"]) == 1
    assert get(api, "latest", 400, cursor="bm9wZQ")["error"]["code"] == "invalid_cursor"


def test_mask_backed_routes_say_503_when_the_engine_is_down(api, fleet, gf, monkeypatch):
    """On the Prometheus-compatible store the funnel, idle list and zombies ask the engine
    (tests/services/telemetry/test_queries_vm.py runs them on a real one); an engine that cannot be
    reached is a 503 naming it, never a 500."""
    store = PrometheusTelemetryStore("http://127.0.0.1:9", timeout_s=2)  # never reached
    store.rollup(fleet["start"] + timedelta(hours=HOURS))
    monkeypatch.setattr(type(gf), "telemetry", property(lambda self: store))
    for path in ("funnel", "idle", "zombies"):
        error = get(api, path, 503)["error"]
        assert error["code"] == "telemetry_store_unavailable", path
        assert "could not be reached" in error["message"], path


def test_a_top_group_without_memory_values_says_null_not_zero():
    from gpufleet.services.telemetry.live import _group
    from gpufleet.wire.telemetry_queries import TopUnit
    unit = TopUnit(gpu_uuid="GPU-1", mig_uuid=None, node="n", environment="e", model="m",
                   activity_percent=10.0, sm_active_percent=None, memory_used_bytes=None,
                   charged_to=[])
    assert _group({}, [unit], 0.0).memory_used_bytes is None
    assert _group({}, [unit, unit.model_copy(update={"memory_used_bytes": 2.0})],
                  0.0).memory_used_bytes == 2.0


def test_the_idle_list_says_why_allocated_units_are_not_on_it(api, gf, clock):
    """A unit reporting 100 of the 240 minutes it needs, one silent, one bound just now:
    none is judged, and the list says why (how many minutes known of how many needed)."""
    create_environment(api)
    register(api, 1, gpus=4)
    api.post("/api/v1/projects", json={"name": "speech", "organisation": "research"})
    start = clock.now()
    _, partial = grant(gf, "speech")
    grant(gf, "speech")  # silent all window
    minutes(gf, start + timedelta(minutes=HOURS * 60 - 100), partial,
            {"gpu.gr_engine_active": 1.0}, count=100)
    clock.advance(HOURS * 3600)
    gf.telemetry.rollup(clock.now())
    grant(gf, "speech")  # bound a minute ago: not judged yet
    clock.advance(60)
    idle = get(api, "idle")
    assert idle["items"] == []
    assert (idle["unknown"], idle["too_new"], idle["known_minutes_needed"]) == (2, 1, 216)
    assert 95 <= idle["unknown_best_known_minutes"] <= 100  # the last minutes not rolled up

    from gpufleet.cli.commands.telemetry import _idle_caption
    caption = _idle_caption(idle)
    assert "2 allocated units with activity unknown (a unit needs 216 of the window's " \
           "240 minutes known, at best" in caption
    assert "1 allocated unit bound for less than the window: not judged yet" in caption


def test_top_lists_the_projects_holding_the_most_first(api, gf, clock):
    create_environment(api)
    register(api, 1, gpus=4)
    for project in ("alpha", "zulu"):
        api.post("/api/v1/projects", json={"name": project, "organisation": "research"})
    grant(gf, "alpha")
    grant(gf, "zulu")
    grant(gf, "zulu")
    clock.advance(60)
    top = get(api, "top")
    assert [(g["group"]["project"], g["allocated_gpus"]) for g in top["by_project"]] == [
        ("zulu", 2.0), ("alpha", 1.0)]
