"""Snapshots → batches → spool → server: the part of the telemetry upload that every agent
shares, the real one (`telemetry_loop.py`) and each agent of the simulated fleet.

A batch is spooled BEFORE it is sent and forgotten only on a `TelemetryAck` (the server
sends one once the samples are durable; `duplicate` is an ack too), so a crash or an
outage loses nothing the spool's bound keeps, and a replay is never counted twice (the
batch id). Pending batches go oldest first and an upload stops at the first one the server
cannot take now, so the store receives each node's samples in order (docs/design.md, "Reliability").

What the server answers decides each batch's fate:

- `ServerUnavailable` (no answer, 5xx, 429) and 404 / 405 (a server without the endpoint,
  e.g. older than the agent): keep everything, the caller backs off and tries again;
- another 4xx (a malformed or refused batch): it can never be accepted — it is dropped,
  counted and logged with the server's message, so it cannot block the spool forever;
- 409 `foreign_gpus`: the batch names GPUs (MIG instances) the node's registration does not
  hold — the MIG layout changed after the node last registered. `on_inventory_stale` (once
  per upload) asks the agent to register again, and the batch waits at the head of the
  spool until it has (`UploadOutcome.REGISTERING`), then goes once more. A batch sealed
  before the node's latest registration cannot be healed that way (the registration
  already told the server what the node holds, so those units are gone): it is dropped as
  refused, as is one refused again after the new registration;
- 403 (`Forbidden`): the server will not take this batch from this credential (another
  node's name, a role that may not write). The batch is dropped like any refused one and
  the agent registers again, which heals a node renamed by the server; a credential that is
  really wrong is refused on the heartbeat too, and the runner reports it there;
- 401 (`Unauthorized`): the credential is revoked: raised to the caller, which stops.

Snapshots are buffered under the node name the server gave at registration (`node_name`),
whatever the backend calls the host, since the server takes a node's telemetry only under
its own name. The loops that drive an uploader (the agent's `TelemetryLoop`, the simulated
fleet's) only schedule: what a collection, a seal and an upload do is here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gpufleet.wire import telemetry_batch
from gpufleet.wire.telemetry import NodeSnapshot

from .backend import SourceUnavailable
from .client import AgentClient, ApiError, Forbidden, ServerUnavailable, Unauthorized
from .options import TelemetryOptions

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_BYTES = TelemetryOptions.max_batch_bytes
ENDPOINT_MISSING = (404, 405)
UNREGISTERED_GPUS = (409, "foreign_gpus")  # status and code of the server's refusal
INVENTORY_STALE = ("the server refused telemetry naming GPUs this node's registration does "
                   "not hold")


def new_batch_id() -> str:
    """32 hex digits: unique per batch, within the wire's [A-Za-z0-9_-]{1,64}."""
    return uuid.uuid4().hex


class PendingBatch(Protocol):
    batch_id: str

    def read(self) -> bytes: ...


class BatchSpool(Protocol):
    """`spool.Spool` (on disk) or `memory_spool.MemorySpool`."""

    dropped_batches: int

    def put(self, batch_id: str, payload: bytes) -> PendingBatch: ...

    def pending(self) -> Sequence[PendingBatch]: ...

    def ack(self, batch) -> None: ...


class UploadOutcome(StrEnum):
    DONE = "done"  # nothing left in the spool
    MORE = "more"  # the server takes batches; the slice ended with some left
    UNAVAILABLE = "unavailable"  # the server cannot take them now: back off
    REGISTERING = "registering"  # the head batch waits for the node to register again


@dataclass
class TelemetryCounters:
    """Since the agent started; the agent's own /metrics exposes them."""

    collections: int = 0
    collections_failed: int = 0
    batches_spooled: int = 0
    batches_acknowledged: int = 0
    batches_duplicate: int = 0  # acknowledged as already stored (a replay)
    batches_refused: int = 0  # a 4xx: dropped, never to be accepted
    batches_unspoolable: int = 0  # could not be written to the spool: lost
    uploads_failed: int = 0  # attempts that found the server unavailable
    samples_stored: int = 0
    samples_dropped_by_server: int = 0


class TelemetryUploader:
    """Buffers one node's snapshots, seals them into spooled batches, uploads the spool.

    Not thread-safe: one loop owns it (`seal` may run in a worker thread between awaits).
    """

    def __init__(self, client: AgentClient, spool: BatchSpool, *, ticks_per_batch: int = 3,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 max_samples_per_batch: int = 100_000,
                 batch_id: Callable[[], str] = new_batch_id,
                 counters: TelemetryCounters | None = None,
                 node_name: Callable[[], str | None] = lambda: None,
                 on_inventory_stale: Callable[[str], None] = lambda why: None,
                 registrations: Callable[[], int] | None = None):
        if ticks_per_batch < 1:
            raise ValueError("a batch holds at least one tick")
        self.client = client
        self.spool = spool
        self.ticks_per_batch = ticks_per_batch
        self.max_batch_bytes = max_batch_bytes
        self.max_samples_per_batch = max_samples_per_batch
        self.counters = counters or TelemetryCounters()
        self._batch_id = batch_id
        self._buffer: list[NodeSnapshot] = []
        self._buffered_samples = 0
        self.node_name = node_name
        self.on_inventory_stale = on_inventory_stale  # gets why: register again
        self._inventory_stale = False  # a 403 / 409 during this upload
        # How many times the node has registered (AgentSession.registrations). Without it a
        # batch naming unregistered GPUs is dropped at once instead of waiting for one.
        self.registrations = registrations
        self._sealed_at: dict[str, int] = {}  # batch id -> registrations when sealed
        self._held: tuple[str, int] | None = None  # (batch id, registrations when refused)

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def collected(self, result: NodeSnapshot | SourceUnavailable) -> NodeSnapshot | None:
        """Count one collection and buffer its snapshot (`add`); the snapshot as buffered,
        or None for a failed collection (logged)."""
        if isinstance(result, SourceUnavailable):
            self.counters.collections_failed += 1
            log.warning("telemetry not collected this tick: %s", result)
            return None
        self.counters.collections += 1
        snapshot = self._named(result)
        self.add(snapshot)
        return snapshot

    def _named(self, snapshot: NodeSnapshot) -> NodeSnapshot:
        node = self.node_name()
        if node and node != snapshot.node:
            return snapshot.model_copy(update={"node": node})
        return snapshot

    def add(self, snapshot: NodeSnapshot) -> bool:
        """Buffer one tick under the server's node name; True when the buffer should be
        sealed now (ticks or size)."""
        snapshot = self._named(snapshot)
        if self._buffer and snapshot.node != self._buffer[0].node:
            self.seal()  # a batch holds one node's snapshots
        self._buffer.append(snapshot)
        self._buffered_samples += _samples(snapshot)
        return self.full

    @property
    def full(self) -> bool:
        """The buffer holds a batch's ticks, or enough samples to seal early."""
        return (len(self._buffer) >= self.ticks_per_batch
                or self._buffered_samples >= self.max_samples_per_batch)

    def seal(self) -> int:
        """Write the buffered ticks to the spool as batches; how many were written."""
        snapshots, self._buffer, self._buffered_samples = self._buffer, [], 0
        return sum(self._spool(part) for part in self._within_size(snapshots))

    def _within_size(self, snapshots: list[NodeSnapshot]) -> list[tuple[str, bytes]]:
        """(batch id, payload) pairs, halving the ticks until each fits max_batch_bytes."""
        if not snapshots:
            return []
        batch_id = self._batch_id()
        payload = telemetry_batch.encode(telemetry_batch.columnar(batch_id, snapshots))
        if len(payload) <= self.max_batch_bytes or len(snapshots) == 1:
            if len(payload) > self.max_batch_bytes:
                log.warning("one tick of node %s is %d bytes compressed, over the %d-byte "
                            "batch size; sent as it is", snapshots[0].node, len(payload),
                            self.max_batch_bytes)
            return [(batch_id, payload)]
        half = len(snapshots) // 2
        return self._within_size(snapshots[:half]) + self._within_size(snapshots[half:])

    def _spool(self, part: tuple[str, bytes]) -> int:
        batch_id, payload = part
        try:
            self.spool.put(batch_id, payload)
        except (OSError, ValueError) as exc:
            self.counters.batches_unspoolable += 1
            log.error("telemetry batch %s (%d bytes) could not be spooled and is lost: %s",
                      batch_id, len(payload), exc)
            return 0
        self._remember_seal(batch_id)
        self.counters.batches_spooled += 1
        return 1

    def _remember_seal(self, batch_id: str) -> None:
        if self.registrations is None:
            return
        self._sealed_at[batch_id] = self.registrations()
        if len(self._sealed_at) > 64 + 2 * self.pending():  # the spool dropped some
            spooled = {batch.batch_id for batch in self.spool.pending()}
            self._sealed_at = {k: v for k, v in self._sealed_at.items() if k in spooled}

    def pending(self) -> int:
        return len(self.spool.pending())

    async def upload(self, credential: str, max_batches: int | None = None) -> UploadOutcome:
        """Send pending batches oldest first, at most `max_batches` of them;
        `on_inventory_stale` once when a batch was refused with 403 or 409 `foreign_gpus`.
        Raises Unauthorized (401)."""
        outcome = await self._upload(credential, max_batches)
        if self._inventory_stale:
            self._inventory_stale = False
            self.on_inventory_stale(INVENTORY_STALE)
        return outcome

    async def _upload(self, credential: str, max_batches: int | None) -> UploadOutcome:
        for sent, batch in enumerate(self.spool.pending()):
            if max_batches is not None and sent >= max_batches:
                return UploadOutcome.MORE
            if self._waits_for_registration(batch):
                return UploadOutcome.REGISTERING
            stopped = await self._send(credential, batch)
            if stopped is UploadOutcome.UNAVAILABLE:
                self.counters.uploads_failed += 1
            if stopped is not None:
                return stopped
        return UploadOutcome.DONE

    async def _send(self, credential: str, batch: PendingBatch) -> UploadOutcome | None:
        """One batch; None when it is off the spool (acknowledged or refused for good),
        else why the upload stops with it at the head of the spool."""
        try:
            payload = batch.read()
        except OSError as exc:
            log.error("spooled telemetry batch %s cannot be read and is dropped: %s",
                      batch.batch_id, exc)
            self._forget(batch)
            self.counters.batches_refused += 1
            return None
        try:
            ack = await self.client.upload_telemetry(credential, payload)
        except Unauthorized:
            raise
        except Forbidden as exc:
            self._inventory_stale = True
            self._refused(batch, exc)
            return None
        except ServerUnavailable as exc:
            log.warning("telemetry upload: server unavailable (%s); %d batch(es) kept in the "
                        "spool", exc, self.pending())
            return UploadOutcome.UNAVAILABLE
        except ApiError as exc:
            if exc.status_code in ENDPOINT_MISSING:
                log.warning("telemetry upload: the server has no telemetry endpoint (%s); "
                            "batches are kept in the spool until it does", exc)
                return UploadOutcome.UNAVAILABLE
            if (exc.status_code, exc.code) == UNREGISTERED_GPUS:
                self._inventory_stale = True
                if self._may_wait_for_registration(batch):
                    log.warning("telemetry batch %s names GPUs the node's registration does "
                                "not hold (%s); it is kept until the node has registered "
                                "again", batch.batch_id, exc)
                    return UploadOutcome.REGISTERING
            self._refused(batch, exc)
            return None
        self._forget(batch)
        self.counters.batches_acknowledged += 1
        self.counters.batches_duplicate += ack.duplicate
        self.counters.samples_stored += ack.samples_stored
        self.counters.samples_dropped_by_server += sum(ack.dropped.values())
        if ack.dropped:
            log.info("telemetry batch %s: the server left out samples %s", ack.batch_id,
                     ack.dropped)
        return None

    def _may_wait_for_registration(self, batch: PendingBatch) -> bool:
        """Hold `batch` for a registration when none has happened since it was sealed (one
        since then already told the server what the node holds); remembers the hold."""
        if self.registrations is None:
            return False
        now = self.registrations()
        if self._sealed_at.get(batch.batch_id) != now:
            return False  # sealed before the latest registration, or by an earlier process
        self._held = (batch.batch_id, now)
        return True

    def _waits_for_registration(self, batch: PendingBatch) -> bool:
        return (self._held is not None and self.registrations is not None
                and self._held == (batch.batch_id, self.registrations()))

    def _forget(self, batch: PendingBatch) -> None:
        """Take `batch` off the spool, acknowledged or refused for good."""
        self.spool.ack(batch)
        self._sealed_at.pop(batch.batch_id, None)
        if self._held is not None and self._held[0] == batch.batch_id:
            self._held = None

    def _refused(self, batch: PendingBatch, exc: ApiError) -> None:
        self._forget(batch)
        self.counters.batches_refused += 1
        log.error("telemetry batch %s refused by the server and dropped (it can never be "
                  "accepted): %s", batch.batch_id, exc)


def _samples(snapshot: NodeSnapshot) -> int:
    return sum(len(u.values) + len(u.labelled) + sum(len(p.values) for p in u.processes)
               for u in snapshot.units)
