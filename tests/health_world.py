"""A simulated node whose telemetry reaches the real app, for the GPU health tests: the
node registers and uploads batches through the API as its agent would, and a fault is put
on one of its GPUs on a schedule (`NodeTelemetry.strike`)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from gpufleet.sim.backend import SimBackend, standalone_backend
from gpufleet.sim.faults import FaultKind
from gpufleet.sim.workloads import WorkloadKind
from gpufleet.store.tables import OutboxMessage, Receiver
from gpufleet.wire import telemetry_batch
from gpufleet.wire.agent import DesiredState
from tests.conftest import START
from tests.helpers import create_environment, join_token
from tests.lifecycle_world import act, create

HOSTNAME = "dgx-health-1"


class SimNode:
    def __init__(self, api, clock, shape: str = "dgx-h100"):
        self.api, self.clock = api, clock
        self.backend: SimBackend = standalone_backend(shape, HOSTNAME, seed=11)
        self.backend.clock = clock
        self.batches = 0
        body = self.backend.discover().model_dump(mode="json")
        reply = api.as_(join_token(api)).post("/api/v1/agent/register", json=body)
        assert reply.status_code == 200, reply.text
        self.agent = api.as_(reply.json()["credential"])
        self.gpus = [g.uuid for g in self.backend.discover().gpus]

    def upload(self, ticks: int = 1, every: timedelta = timedelta(minutes=1)) -> None:
        """Take `ticks` snapshots, `every` apart on the test clock, and upload them."""
        snapshots = []
        for n in range(ticks):
            if n:
                self.clock.advance(every.total_seconds())
            snapshots.append(self.backend.collect(self.clock.now()))
        self.batches += 1
        batch = telemetry_batch.columnar(f"health-{self.batches}", snapshots)
        reply = self.agent.post(telemetry_batch.TELEMETRY_BATCHES_PATH,
                                content=telemetry_batch.encode(batch),
                                headers={"Content-Encoding": "gzip",
                                         "Content-Type": "application/json"})
        assert reply.status_code == 200, reply.text

    def sync(self) -> None:
        """Heartbeat and apply the desired state: the node runs what is allocated on it."""
        reply = self.agent.post("/api/v1/agent/heartbeat",
                                json={"applied_desired_state_version":
                                      self.backend.applied_version})
        assert reply.status_code == 200, reply.text
        self.backend.apply_desired_state(DesiredState.model_validate(
            reply.json()["desired_state"]))

    def train(self, code: str) -> None:
        """Allocation `code` runs a training job (busy, hot) on the node."""
        self.backend.telemetry.force_workload(code, WorkloadKind.TRAINING)

    def strike(self, uuid: str, kind: FaultKind, mig_uuid: str | None = None) -> None:
        self.backend.telemetry.strike(uuid, [kind], self.clock.now(), mig_uuid=mig_uuid)


def sim_world(api, clock):
    """The simulated node, with `mia` (member of vision) holding 2 of its GPUs."""
    assert clock.now() == START
    create_environment(api)
    node = SimNode(api, clock)
    return node


def allocate(member, operator, count: int = 2) -> dict:
    code = act(operator, create(member, count=count, duration_hours=24)["code"],
               "approve")["code"]
    return member.get(f"/api/v1/requests/{code}").json()


def add_receiver(gf, name: str = "inbox", **fields) -> None:
    values = dict(kind="inbox", config={}, matchers=[], kinds=[], min_severity="info",
                  broadcast=False, tells_owners=True, enabled=True, created_by="admin",
                  created_at=START)
    values.update(fields)
    with gf.store.write() as s:
        s.add(Receiver(name=name, **values))


def outbox(gf) -> list[tuple[str, str | None, str, str]]:
    """(receiver, recipient, kind, summary) of every queued message, oldest first."""
    with gf.store.read() as s:
        return [(m.receiver.name, m.recipient, m.kind, m.payload["summary"])
                for m in s.scalars(select(OutboxMessage).order_by(OutboxMessage.id))]
