"""The reclaim round end to end on the real stores: telemetry minutes written into the
embedded store, judged by the telemetry's own idle query, acted on through the lifecycle's
release path — on SQLite and PostgreSQL, with a ManualClock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gpufleet.domain.operations.rule_files import default_rules
from gpufleet.services.operations.rule_evaluation import evaluate
from gpufleet.store.tables import AuditEvent, Binding, GpuLabel, OutboxMessage, Receiver
from gpufleet.tsdb import Sample, series
from tests.conftest import START
from tests.helpers import create_environment, register

GIB = 1024**3
ATTRS = {"node": "node-1", "environment": "onprem-hpc", "model": "H100-80GB"}
BUSY = {"gpu.gr_engine_active": 80.0, "gpu.memory_used_bytes": 30.0 * GIB}
IDLE = {"gpu.gr_engine_active": 1.0, "gpu.memory_used_bytes": 0.0}
HELD = {"gpu.gr_engine_active": 0.0, "gpu.memory_used_bytes": 4.0 * GIB}


class World:
    """One node of 4 H100s, project `vision` with member mia, operator olga, an inbox
    receiver that tells owners, and a clock the test moves minute by minute."""

    def __init__(self, api, gf, clock, member, operator):
        self.api, self.gf, self.clock = api, gf, clock
        self.member, self.operator = member, operator

    def allocate(self, count: int = 2, **extra) -> tuple[str, list[str]]:
        created = self.member.post("/api/v1/requests", json={
            "project": "vision", "count": count, "models": ["H100-80GB"], **extra})
        assert created.status_code == 201, created.text
        code = created.json()["code"]
        view = self.operator.post(f"/api/v1/requests/{code}/approve").json()
        assert view["state"] == "active", view
        return code, [u["gpu_uuid"] for u in view["units"]]

    def run(self, minutes: int, usage: dict[str, dict[str, float] | None]) -> None:
        """`minutes` minutes pass; each GPU in `usage` reports those values every minute
        (None: silent). The minutes are rolled up, as the server's upkeep loop does."""
        start = self.clock.now()
        self.gf.telemetry.write([
            Sample(series(metric, uuid, None, **ATTRS), start + timedelta(minutes=m, seconds=30),
                   value)
            for uuid, values in usage.items() if values
            for m in range(minutes) for metric, value in values.items()])
        self.clock.advance(minutes * 60)
        self.gf.telemetry.rollup(self.clock.now())

    def policy(self, expect: int = 200, scope: str = "project", name: str = "vision",
               **fields):
        response = self.api.request("PUT", f"/api/v1/reclaim/policies/{scope}/{name}",
                                    json=fields)
        assert response.status_code == expect, response.text
        return response.json()

    def tick(self):
        return self.gf.reclaim.tick()

    def request(self, code: str) -> dict:
        return self.api.get(f"/api/v1/requests/{code}").json()

    def warnings(self, code: str) -> list[dict]:
        response = self.api.get("/api/v1/reclaim/warnings", params={"allocation": code})
        assert response.status_code == 200, response.text
        return response.json()

    def messages(self, kind: str) -> list[OutboxMessage]:
        with self.gf.store.read() as s:
            rows = s.scalars(select(OutboxMessage).where(OutboxMessage.kind == kind)).all()
            return [(m.recipient, m.payload) for m in rows]

    def audit(self, code: str) -> list[tuple[str, str]]:
        with self.gf.store.read() as s:
            return [(e.actor, e.action) for e in s.scalars(
                select(AuditEvent).where(AuditEvent.subject == code).order_by(AuditEvent.id))]


@pytest.fixture
def world(api, gf, clock, people) -> World:
    create_environment(api)
    register(api, 1, gpus=4)
    with gf.store.write() as s:
        s.add(Receiver(name="inbox", kind="inbox", config={}, matchers=[], kinds=[],
                       min_severity="info", broadcast=False, tells_owners=True, enabled=True,
                       created_by="admin", created_at=START))
    member, operator = people
    w = World(api, gf, clock, member, operator)
    # A short policy, so a test writes an hour of minutes, not four.
    w.policy(idle_window_hours=1, grace_minutes=30, action="release", end_warning_lead_hours=0)
    return w


def test_idle_allocation_is_warned_then_released_after_its_grace(world):
    code, gpus = world.allocate(2)
    world.run(70, dict.fromkeys(gpus, IDLE))
    first = world.tick()
    assert [(s.allocation, s.step) for s in first.steps] == [(code, "warn")]
    [warning] = world.warnings(code)
    assert warning["outcome"] is None and warning["owner"] == "mia"
    assert warning["summary"].startswith(f"{code}: 2 × H100-80GB idle for 70 min; released at ")
    assert f"`gpufleet request exempt {code} --reason …`" in warning["summary"]
    [(recipient, payload)] = world.messages("reclaim.warning")
    assert recipient == "mia" and payload["severity"] == "warning"
    assert payload["labels"]["allocation"] == code
    assert payload["labels"]["project"] == "vision" and payload["labels"]["owner"] == "mia"
    assert set(payload["labels"]["gpu"].split(",")) == set(gpus)

    assert [s.step for s in world.tick().steps] == ["wait"]  # a second round: nothing new
    assert len(world.messages("reclaim.warning")) == 1
    world.run(31, dict.fromkeys(gpus, IDLE))
    acted = world.tick()
    assert [(s.allocation, s.step) for s in acted.steps] == [(code, "act")]
    assert world.request(code)["state"] == "released"
    [warning] = world.warnings(code)
    assert (warning["outcome"], warning["units_taken"]) == ("released", 2)
    with world.gf.store.read() as s:
        assert s.scalars(select(Binding).where(Binding.ended_at.is_(None))).all() == []
        assert s.scalars(select(GpuLabel).where(GpuLabel.key == "allocation")).all() == []
    assert ("system:reclaim", "request.released") in world.audit(code)
    assert ("system:reclaim", "reclaim.warned") in world.audit(code)
    assert len(world.messages("reclaim.released")) == 1
    assert world.tick().steps == []  # released: nothing left to judge


def test_used_during_the_grace_period_is_saved_by_use(world):
    code, gpus = world.allocate(2)
    world.run(70, dict.fromkeys(gpus, IDLE))
    world.tick()
    world.run(10, {gpus[0]: BUSY, gpus[1]: IDLE})
    assert [s.step for s in world.tick().steps] == ["saved_by_use"]
    world.run(30, {gpus[0]: IDLE, gpus[1]: IDLE})
    assert world.tick().steps == []  # used 30 min ago: not idle for the window
    assert world.request(code)["state"] == "active"
    assert [w["outcome"] for w in world.warnings(code)] == ["saved_by_use"]
    report = world.api.get("/api/v1/reclaim/report", params={"window": "1d"}).json()
    assert (report["total"]["warned"], report["total"]["saved_by_use"],
            report["total"]["released"]) == (1, 1, 0)


def test_an_exempted_allocation_is_untouched_until_its_exemption_ends(world):
    code, gpus = world.allocate(1)
    asked = world.member.post(f"/api/v1/requests/{code}/exempt",
                              json={"reason": "demo on Friday", "hours": 3})
    assert asked.status_code == 201 and asked.json()["state"] == "asked"
    granted = world.operator.post(f"/api/v1/requests/{code}/exempt",
                                  json={"reason": "demo on Friday", "hours": 3})
    assert granted.status_code == 201, granted.text
    assert granted.json()["state"] == "granted" and granted.json()["granted_by"] == "user:olga"
    world.run(70, dict.fromkeys(gpus, IDLE))
    assert world.tick().steps == []
    world.run(60, dict.fromkeys(gpus, IDLE))
    assert world.tick().steps == []
    world.run(60, dict.fromkeys(gpus, IDLE))  # 3 h 10 min: the exemption ended
    assert [s.step for s in world.tick().steps] == ["warn"]
    assert ("user:olga", "reclaim.exempted") in world.audit(code)
    assert ("user:mia", "reclaim.exemption_asked") in world.audit(code)


def test_an_exemption_granted_after_the_warning_closes_it(world):
    code, gpus = world.allocate(1)
    world.run(70, dict.fromkeys(gpus, IDLE))
    world.tick()
    world.operator.post(f"/api/v1/requests/{code}/exempt", json={"reason": "x", "hours": 5})
    world.run(40, dict.fromkeys(gpus, IDLE))
    assert [s.step for s in world.tick().steps] == ["exempted"]
    assert world.request(code)["state"] == "active"


def test_a_member_asking_protects_nothing(world):
    code, gpus = world.allocate(1)
    world.member.post(f"/api/v1/requests/{code}/exempt", json={"reason": "please", "hours": 5})
    world.run(70, dict.fromkeys(gpus, IDLE))
    assert [s.step for s in world.tick().steps] == ["warn"]


def test_unknown_minutes_are_never_idle(world):
    """A silent unit, and one that reported too few of the window's minutes: no verdict,
    no warning — however long they sit."""
    silent, _ = world.allocate(1)
    sparse, sparse_gpus = world.allocate(1)
    world.run(70, {})  # nobody reports
    world.run(20, dict.fromkeys(sparse_gpus, IDLE))  # 20 of the last 60 minutes known
    assert world.tick().steps == []
    assert world.request(silent)["state"] == world.request(sparse)["state"] == "active"


def test_shrink_releases_the_idle_units_and_keeps_the_used_ones(world):
    world.policy(action="shrink")
    code, gpus = world.allocate(3)
    usage = {gpus[0]: BUSY, gpus[1]: IDLE, gpus[2]: IDLE}
    world.run(70, usage)
    [step] = world.tick().steps
    assert (step.step, step.units, step.idle_units) == ("warn", 3, 2)
    assert "its 2 idle of 3 units are released at" in step.summary
    world.run(31, usage)
    world.tick()
    view = world.request(code)
    assert view["state"] == "active"
    assert [u["gpu_uuid"] for u in view["units"] if u["ended_at"] is None] == [gpus[0]]
    [warning] = world.warnings(code)
    assert (warning["outcome"], warning["units_taken"]) == ("shrunk", 2)
    assert ("system:reclaim", "request.shrunk") in world.audit(code)


def test_idle_held_units_are_spared_when_the_policy_says_so(world):
    world.policy(idle_held="spare")
    _code, gpus = world.allocate(1)
    world.run(70, dict.fromkeys(gpus, HELD))
    assert world.tick().steps == []
    world.policy(idle_held="reclaim")
    assert [s.step for s in world.tick().steps] == ["warn"]


def test_a_dry_run_policy_records_what_it_would_do_and_changes_nothing(world):
    world.policy(dry_run=True)
    code, gpus = world.allocate(2)
    world.run(70, dict.fromkeys(gpus, IDLE))
    assert [s.step for s in world.tick().steps] == ["warn"]
    assert world.messages("reclaim.warning") == []  # nobody is told
    world.run(31, dict.fromkeys(gpus, IDLE))
    assert [(s.step, s.dry_run) for s in world.tick().steps] == [("act", True)]
    assert world.request(code)["state"] == "active"
    [warning] = world.warnings(code)
    assert (warning["outcome"], warning["dry_run"]) == ("would_release", True)
    world.run(30, dict.fromkeys(gpus, IDLE))
    assert world.tick().steps == []  # the same idle stretch is not recorded twice
    report = world.api.get("/api/v1/reclaim/report").json()["total"]
    assert (report["would_act"], report["released"], report["gpu_hours_back"]) == (1, 0, 0)


def test_run_dry_run_shows_the_steps_and_writes_nothing(world):
    code, gpus = world.allocate(2)
    world.run(70, dict.fromkeys(gpus, IDLE))
    response = world.operator.post("/api/v1/reclaim/run", params={"dry_run": "true"})
    assert response.status_code == 200, response.text
    assert [(s["allocation"], s["step"]) for s in response.json()["steps"]] == [(code, "warn")]
    assert response.json()["dry_run"] is True
    assert world.warnings(code) == []
    assert world.messages("reclaim.warning") == []
    assert world.member.post("/api/v1/reclaim/run").status_code == 403


def test_a_disabled_policy_withdraws_an_open_warning(world):
    code, gpus = world.allocate(1)
    world.run(70, dict.fromkeys(gpus, IDLE))
    world.tick()
    world.policy(enabled=False)
    assert [s.step for s in world.tick().steps] == ["withdrawn"]
    world.run(60, dict.fromkeys(gpus, IDLE))
    assert world.tick().steps == []
    assert world.request(code)["state"] == "active"


def test_the_report_counts_the_gpu_hours_that_came_back(world):
    _code, gpus = world.allocate(2, duration_hours=10)
    world.run(70, dict.fromkeys(gpus, IDLE))
    world.tick()
    world.run(31, dict.fromkeys(gpus, IDLE))
    world.tick()  # released 1 h 41 min after start; planned to end at 10 h
    world.clock.advance(2 * 3600)
    report = world.api.get("/api/v1/reclaim/report", params={"window": "30d"}).json()
    [row] = report["rows"]
    assert (row["project"], row["environment"], row["released"], row["units_taken"]) == (
        "vision", "onprem-hpc", 1, 2)
    assert row["gpu_hours_back"] == pytest.approx(2 * 2, abs=0.01)  # 2 GPUs × 2 h so far
    world.clock.advance(30 * 3600)
    later = world.api.get("/api/v1/reclaim/report", params={"window": "30d"}).json()
    assert later["total"]["gpu_hours_back"] == pytest.approx(2 * (10 - 101 / 60), abs=0.01)


def test_the_owner_is_warned_before_the_allocation_ends(world):
    world.policy(end_warning_lead_hours=2)
    code, gpus = world.allocate(1, duration_hours=3)
    world.run(50, dict.fromkeys(gpus, BUSY))
    assert world.tick().ending_warned == []
    world.run(20, dict.fromkeys(gpus, BUSY))  # 1 h 50 min left
    assert world.tick().ending_warned == [code]
    assert world.tick().ending_warned == []  # once per end
    [(recipient, payload)] = world.messages("request.ending")
    assert recipient == "mia" and payload["summary"].startswith(f"{code}: 1 × H100-80GB ends at")
    world.api.post(f"/api/v1/requests/{code}/extend", json={"hours": 5})
    world.run(5 * 60, dict.fromkeys(gpus, BUSY))
    assert world.tick().ending_warned == [code]  # the new end is warned of too


def test_an_allocation_released_by_its_owner_during_grace_closes_its_warning(world):
    code, gpus = world.allocate(1)
    world.run(70, dict.fromkeys(gpus, IDLE))
    world.tick()
    world.member.post(f"/api/v1/requests/{code}/release")
    world.run(31, dict.fromkeys(gpus, IDLE))
    assert world.tick().steps == []
    [warning] = world.warnings(code)
    assert warning["outcome"] == "ended"
    assert world.api.get("/api/v1/reclaim/warnings", params={"open": "true"}).json() == []


def test_a_notify_policy_takes_nothing_and_tells_once_per_idle_stretch(world):
    world.policy(action="notify")
    code, gpus = world.allocate(1)
    world.run(70, dict.fromkeys(gpus, IDLE))
    world.tick()
    world.run(31, dict.fromkeys(gpus, IDLE))
    assert [s.step for s in world.tick().steps] == ["act"]
    assert world.request(code)["state"] == "active"
    assert [w["outcome"] for w in world.warnings(code)] == ["notified"]
    assert [r for r, _ in world.messages("reclaim.notified")] == ["mia"]
    world.run(12 * 60, dict.fromkeys(gpus, IDLE))
    assert world.tick().steps == []  # the same idle stretch: told already
    world.run(14 * 60, dict.fromkeys(gpus, IDLE))  # a day after the warning: a reminder
    assert [s.step for s in world.tick().steps] == ["warn"]


def test_the_idle_allocation_alert_is_one_per_allocation_not_per_gpu(world):
    code, gpus = world.allocate(2)
    world.run(4 * 60 + 5, dict.fromkeys(gpus, IDLE) | {gpus[1]: HELD})  # the idle window
    rule = next(r for r in default_rules() if r.name == "idle-allocation")
    [o] = evaluate(world.gf.queries, [rule], world.clock.now()).observations
    assert dict(o.labels) == {"environment": "onprem-hpc", "allocation": code,
                              "project": "vision"}
    assert set(o.annotations["gpus"].split(",")) == set(gpus)
    assert (o.annotations["owner"], o.annotations["state"]) == ("mia", "idle_held")
    assert o.annotations["summary"] == f"{code} (vision): 2 × H100-80GB idle"
