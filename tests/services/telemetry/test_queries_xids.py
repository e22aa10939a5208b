"""An XID code's counter is born at its first XID (its reader counts from zero): a range
query counts a series first seen inside its window from 0, so the first XID shows in the
step of its first sample; a series seen before the window and an agent restart (a counter
reset) count as a store's increase does (services/telemetry/first_values.py). Same world as
test_queries.py; test_queries_xids_vm.py runs these on VictoriaMetrics."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.tsdb import Sample, series
from tests.services.telemetry.test_queries import ATTRS, HOURS, fleet, get, grant

__all__ = ["fleet"]

XID = "gpu.xid_errors_total"


def xids(gf, start, gpu: str, code: str, values: dict[int, float]) -> None:
    """One sample a minute, at start + minute + 30 s, of each {minute: value}."""
    gf.telemetry.write([Sample(series(XID, gpu, labels={"xid": code}, **ATTRS),
                               start + timedelta(minutes=m, seconds=30), v)
                        for m, v in values.items()])


def hourly(api, **params) -> dict[tuple, list[float]]:
    """{(gpu, xid): the count in each hour of the last HOURS}, every hour answered."""
    result = get(api, "query", metric=XID, since=f"{HOURS}h", step="1h", **params)
    out = {}
    for s in result["series"]:
        points = dict((at, v) for at, v in s["points"])
        hours = sorted(points)
        key = tuple(s["labels"].values())
        out[key] = [points[at] for at in hours]
        assert len(hours) <= HOURS
    return out


def written(gf, clock, fleet):
    """Five more hours from now, rolled up (a store rolls up a minute once). busy: XID 79
    born at 2 h 10 min (1), again at 3 h 30 min (2). idle: XID 31 at 5 from the first
    minute, 6 from 4 h 30 min. free: XID 13 born at 1 h 5 min (1), 3 from 1 h 30 min; its
    agent restarts at 2 h: born again at 3 h 15 min (1)."""
    start = clock.now()
    xids(gf, start, fleet["busy"], "79",
         {m: 1.0 if m < 210 else 2.0 for m in range(130, HOURS * 60)})
    xids(gf, start, fleet["idle"], "31",
         {m: 5.0 if m < 270 else 6.0 for m in range(0, HOURS * 60)})
    xids(gf, start, fleet["free"], "13",
         {**{m: 1.0 if m < 90 else 3.0 for m in range(65, 120)},
          **{m: 1.0 for m in range(195, HOURS * 60)}})
    clock.advance(HOURS * 3600)
    gf.telemetry.rollup(clock.now())


def test_a_codes_first_xid_counts_in_the_step_it_arrived(api, gf, clock, fleet):
    written(gf, clock, fleet)
    counts = hourly(api, by="gpu_uuid,xid")
    assert counts[(fleet["busy"], "79")] == [1.0, 1.0, 0.0]  # hours 2, 3, 4
    # Born at 1 h 5 min: 1 then 3; the restart's new series (from 0 again) counts 1.
    assert counts[(fleet["free"], "13")] == [3.0, 1.0, 0.0]  # hours 1, 3, 4
    assert counts[(fleet["idle"], "31")][0] == 5.0  # born with the window's first minute
    whole = get(api, "query", metric=XID, since=f"{HOURS}h", step=f"{HOURS}h", by="xid",
                filter=["xid=79", "xid=31"])
    assert {s["labels"]["xid"]: s["points"][0][1] for s in whole["series"]} == \
        {"79": 2.0, "31": 6.0}


def test_a_series_seen_before_the_window_counts_only_what_it_rose(api, gf, clock, fleet):
    written(gf, clock, fleet)
    result = get(api, "query", metric=XID, since="2h", step="1h", by="gpu_uuid,xid",
                 filter=f"gpu_uuid={fleet['idle']}")
    assert [[v for _, v in s["points"]] for s in result["series"]] == [[0.0, 1.0]]
    later = get(api, "query", metric=XID, since="90m", step="30m", by="gpu_uuid,xid",
                filter=f"gpu_uuid={fleet['busy']}")  # seen from 2 h 10 min: 1 h 20 before
    assert [[v for _, v in s["points"]] for s in later["series"]] == [[0.0, 0.0, 0.0]]


def test_a_member_counts_first_xids_on_their_projects_gpus_only(api, gf, clock, fleet):
    written(gf, clock, fleet)
    assert hourly(fleet["member"], by="gpu_uuid,xid") == {(fleet["busy"], "79"): [1.0, 1.0, 0.0]}
    by_project = hourly(api, by="project")
    assert by_project[("vision",)] == [1.0, 1.0, 0.0]
    assert by_project[("speech",)][0] == 5.0  # idle's XID 31, born with the window


def test_a_first_xid_before_its_gpu_was_granted_is_not_the_holders(api, gf, clock, fleet):
    """XID 44 came to the unbound GPUs 10 minutes in; vision got them an hour in: over
    those hours the GPUs show it; vision's member, who sees vision's time only, not."""
    start = clock.now()
    for gpu in (fleet["free"], fleet["silent"]):
        xids(gf, start, gpu, "44", {m: 1.0 for m in range(10, HOURS * 60)})
    clock.advance(3600)
    grant(gf, "vision"), grant(gf, "vision")
    clock.advance((HOURS - 1) * 3600)
    gf.telemetry.rollup(clock.now())
    ask = {"metric": XID, "since": f"{HOURS}h", "step": "1h", "filter": "xid=44"}
    gpus = get(api, "query", by="xid", **ask)
    assert [v for s in gpus["series"] for _, v in s["points"]] == [2.0] + [0.0] * (HOURS - 1)
    member = get(fleet["member"], "query", by="xid", **ask)
    assert [v for s in member["series"] for _, v in s["points"]] == [0.0] * (HOURS - 1)
