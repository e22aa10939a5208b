"""`ingest_batch`: an agent's telemetry upload, checked, stored, then acknowledged.

The order is what makes "nothing acknowledged is ever lost" and "a replay is never counted
twice" hold: the batch is decoded and checked as a whole (a 4xx names what is wrong and
nothing is stored), each sample is checked (bad ones are dropped and counted, the rest
stored), the samples are written with the batch's key in one store transaction (group
commit), and only then is the acknowledgement sent. A store that fails answers 503: the
agent keeps the batch in its spool and sends it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

from pydantic import ValidationError

from gpufleet.clock import Clock
from gpufleet.domain.access import Action, Role
from gpufleet.domain.errors import (
    Conflict,
    Forbidden,
    GpufleetError,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
)
from gpufleet.services.access.principal import Principal
from gpufleet.services.group_commit import GroupCommit
from gpufleet.services.inventory.node_units import (
    GpuOwnersMemo,
    NodeUnits,
    NodeUnitsMemo,
    read_gpu_owners,
    read_node_units,
)
from gpufleet.services.telemetry.batch_columns import TimeWindow, batch_columns, units_named
from gpufleet.services.telemetry.remote_write_plans import SeriesPlans
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb import SampleColumns, TelemetryStore
from gpufleet.tsdb.protocol import TelemetryStoreUnavailable, to_ms
from gpufleet.wire.base import BodyTooLarge
from gpufleet.wire.nul_text import NulCharacter
from gpufleet.wire.telemetry_batch import TelemetryAck, TelemetryBatch, decode
from gpufleet.wire.validation import field_error, summary

log = logging.getLogger(__name__)

DROP_LOG_INTERVAL_S = 60.0  # per node: a misconfigured fleet must not flood the log


class IngestCounters:
    """What ingest has done since the server started, for its `/metrics` (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: Counter[str] = Counter()  # stored, duplicate, refused
        self.refusals: Counter[str] = Counter()  # by error code
        self.samples_stored = 0
        self.samples_dropped: Counter[str] = Counter()  # by reason

    def stored(self, samples: int, dropped: Counter[str]) -> None:
        with self.lock:
            self.batches["stored"] += 1
            self.samples_stored += samples
            self.samples_dropped.update(dropped)

    def duplicate(self) -> None:
        with self.lock:
            self.batches["duplicate"] += 1

    def refused(self, code: str) -> None:
        with self.lock:
            self.batches["refused"] += 1
            self.refusals[code] += 1


class TelemetryIngest:
    def __init__(self, state: StateStore, telemetry: Callable[[], TelemetryStore],
                 settings: Settings, clock: Clock):
        self.state = state
        self.settings = settings
        self.clock = clock
        self.units = NodeUnitsMemo(settings.placement_cache_max_age_s)
        self.owners = GpuOwnersMemo(settings.placement_cache_max_age_s)
        self.commit = GroupCommit(lambda batches: telemetry().write_columns(batches))
        self.counters = IngestCounters()
        # What each remote-write series' labels say, kept across bodies (by label bytes).
        self.remote_write_plans = SeriesPlans()
        self._drop_logged: dict[str, float] = {}

    def ingest_batch(self, principal: Principal, payload: bytes) -> TelemetryAck:
        principal.require(Action.WRITE_TELEMETRY)
        with self.counting_refusals():
            batch = self._decode(payload)
            units = self._units_for(principal, batch)
            columns, dropped = batch_columns(batch, units, self.window())
            stored = self.store(f"{batch.node}:{batch.batch_id}", columns)
        if stored is None:
            self.counters.duplicate()
            return TelemetryAck(batch_id=batch.batch_id, duplicate=True, samples_stored=0)
        self.counters.stored(stored, dropped)
        if dropped:
            self._log_drops(batch, dropped)
        return TelemetryAck(batch_id=batch.batch_id, samples_stored=stored,
                            dropped=dict(dropped))

    @contextmanager
    def counting_refusals(self) -> Iterator[None]:
        """Count every refusal of an upload (by its error code) on the way out."""
        try:
            yield
        except GpufleetError as exc:
            self.counters.refused(exc.code)
            raise

    def units_of(self, node: str, named_gpus: set[str]) -> NodeUnits | None:
        """The node's GPUs as the inventory has them (None: no such node). Read again when
        the upload names a GPU the remembered reading lacks: it may have changed through
        another server process since."""
        units = self.units.get(node, self.read_units)
        if units is None or not named_gpus <= units.gpus.keys():
            self.units.forget(node)
            units = self.units.get(node, self.read_units)
        return units

    def owners_of(self, gpus: set[str]) -> dict[str, str]:
        """GPU UUID → its node's name, for the GPUs of `gpus` the inventory has."""
        return self.owners.get(gpus, self.read_owners)

    def read_owners(self, gpus: set[str]) -> dict[str, str]:
        with self.state.read() as session:
            return read_gpu_owners(session, gpus)

    def forget_node(self, node: str) -> None:
        """The node registered again: its GPUs are read afresh on its next upload."""
        self.units.forget(node)

    # -- steps ----------------------------------------------------------------------------

    def _decode(self, payload: bytes) -> TelemetryBatch:
        limit = self.settings.telemetry_max_batch_uncompressed_bytes
        try:
            return decode(payload, limit)
        except ValidationError as exc:
            errors = [field_error(e) for e in exc.errors()]
            raise InvalidInput(f"the telemetry batch is malformed: {summary(errors)}",
                               code="invalid_batch", details={"errors": errors}) from None
        except BodyTooLarge as exc:
            raise too_large(exc, limit) from None
        except NulCharacter as exc:
            raise InvalidInput(str(exc), code="nul_character",
                               details={"field": exc.field}) from None
        except ValueError as exc:
            raise InvalidInput(str(exc), code="malformed_batch") from None

    def _units_for(self, principal: Principal, batch: TelemetryBatch) -> NodeUnits:
        if principal.role is Role.AGENT and principal.node_name != batch.node:
            raise Forbidden(f"node {principal.node_name!r} may not write telemetry for node "
                            f"{batch.node!r}", code="foreign_node",
                            details={"node": principal.node_name, "batch_node": batch.node})
        named = units_named(batch)
        units = self.units_of(batch.node, named)
        if units is None:
            raise NotFound(f"node {batch.node!r} is not in the inventory", code="unknown_node",
                           details={"node": batch.node})
        foreign = named - units.gpus.keys()
        if foreign:
            named = sorted(foreign)
            raise Conflict(f"node {batch.node!r} does not hold GPU(s) "
                            f"{', '.join(named[:5])}{' …' if len(named) > 5 else ''}: a node "
                            "writes telemetry only for its own GPUs (if its GPUs changed, "
                            "the agent registers again first)", code="foreign_gpus",
                            details={"node": batch.node, "gpus": named[:50]})
        return units

    def read_units(self, node: str) -> NodeUnits | None:
        with self.state.read() as session:
            return read_node_units(session, node)

    def window(self) -> TimeWindow:
        """Sample times accepted now: not older than raw samples are kept, not ahead of
        the server's clock by more than the allowed skew."""
        now = self.clock.now()
        oldest = now - timedelta(seconds=self.settings.telemetry_max_sample_age_s)
        newest = now + timedelta(seconds=self.settings.telemetry_max_sample_future_s)
        return TimeWindow(to_ms(oldest), to_ms(newest))

    def store(self, key: str, columns: SampleColumns) -> int | None:
        """Write one keyed batch through the group commit; None for a stored key."""
        return self.store_all([(key, columns)])[0]

    def store_all(self, batches: Sequence[tuple[str, SampleColumns]]) -> list[int | None]:
        """`store` of several keyed batches in one group commit (one wait, one fsync)."""
        try:
            return self.commit.submit_all(batches)
        except GpufleetError:
            raise
        except Exception as exc:
            log.exception("the telemetry store failed to store a group of batches")
            raise TelemetryStoreUnavailable(
                "the telemetry store could not store the batch, so it was not acknowledged; "
                "send it again later") from exc

    def _log_drops(self, batch: TelemetryBatch, dropped: Counter[str]) -> None:
        now_s = time.monotonic()
        if now_s - self._drop_logged.get(batch.node, -DROP_LOG_INTERVAL_S) < \
                DROP_LOG_INTERVAL_S:
            return
        self._drop_logged[batch.node] = now_s
        log.warning("telemetry from node %s (batch %s): dropped %s (logged at most once a "
                    "minute per node)", batch.node, batch.batch_id,
                    ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items())))


def too_large(exc: BodyTooLarge, limit_bytes: int) -> PayloadTooLarge:
    """413 for an upload that inflates past `telemetry_max_batch_uncompressed_bytes`."""
    return PayloadTooLarge(str(exc), code="batch_too_large",
                           details={"max_uncompressed_bytes": limit_bytes})
