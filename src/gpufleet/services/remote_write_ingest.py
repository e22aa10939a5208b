"""Prometheus remote-write in: dcgm-exporter series a site's Prometheus or vmagent already
scrapes, pushed to gpufleet with an `ingest` token and mapped into the catalogue.

The series are read exactly as the dcgm-exporter backend reads a page (the same mapping,
scale and sentinels), grouped by the node their `Hostname` label names and by sample time,
and then stored through the same checks and group commit as an agent's batch. What cannot
be used is dropped and counted, never refused as a whole: a remote-write sender drops a
body it gets a 4xx for, so one unknown node must not cost the others their samples.

  no_node       a series without a `Hostname` label (dcgm-exporter always sets it)
  unknown_node  a `Hostname` the inventory has no node of
  foreign_gpu   a GPU the inventory places on another node
  not_dcgm      a series that is not one of dcgm-exporter's (counted, not stored)

A body is keyed by its digest, so a sender's retry of the same body is not counted twice.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from datetime import UTC, datetime

from gpufleet.agent.dcgm_exporter import UUID_LABELS, snapshot_from_samples
from gpufleet.agent.prometheus_text import Sample
from gpufleet.domain.access import Action, Role
from gpufleet.domain.errors import Forbidden, GpufleetError, InvalidInput, PayloadTooLarge
from gpufleet.services.batch_columns import batch_columns
from gpufleet.services.principal import Principal
from gpufleet.services.telemetry_ingest import TelemetryIngest
from gpufleet.wire.remote_write import RemoteSeries, decode_write_request
from gpufleet.wire.telemetry_batch import columnar

HOSTNAME = "Hostname"


def ingest_remote_write(ingest: TelemetryIngest, principal: Principal,
                        body: bytes) -> Counter[str]:
    """Store a remote-write body; what was dropped, by reason (stored samples under
    `stored`). Raises only for a body that is not remote-write at all."""
    principal.require(Action.WRITE_TELEMETRY)
    if principal.role is not Role.INGEST:
        raise Forbidden("remote-write is for ingest tokens; agents upload batches",
                        code="forbidden", details={"role": principal.role.value})
    try:
        series = _decode(body, ingest.settings.telemetry_max_batch_uncompressed_bytes)
    except GpufleetError as exc:
        ingest.counters.refused(exc.code)
        raise
    outcome: Counter[str] = Counter()
    by_node = _group_by_node(series, outcome)
    digest = hashlib.sha256(body).hexdigest()[:32]
    window = ingest.window()
    for node, by_time in sorted(by_node.items()):
        units = ingest.units.get(node, ingest.read_units)
        if units is None:
            outcome["unknown_node"] += sum(len(samples) for samples in by_time.values())
            continue
        snapshots = [snapshot_from_samples(samples, node, datetime.fromtimestamp(ms / 1000, UTC))
                     for ms, samples in sorted(by_time.items())]
        batch = columnar(f"rw-{digest}", snapshots)
        foreign = {key.gpu_uuid for key in batch.series} - units.gpus.keys()
        if foreign:
            kept = [(key, row) for key, row in zip(batch.series, batch.values, strict=True)
                    if key.gpu_uuid not in foreign]
            outcome["foreign_gpu"] += sum(1 for key, row in zip(
                batch.series, batch.values, strict=True) if key.gpu_uuid in foreign
                for v in row if v is not None)
            batch = batch.model_copy(update={
                "series": [k for k, _ in kept], "values": [r for _, r in kept],
                "unit_claims": [c for c in batch.unit_claims if c.gpu_uuid not in foreign]})
        columns, dropped = batch_columns(batch, units, window)
        outcome.update(dropped)
        stored = ingest.store(f"{node}:rw-{digest}", columns)
        if stored is None:
            ingest.counters.duplicate()
        else:
            ingest.counters.stored(stored, dropped)
            outcome["stored"] += stored
    return outcome


def _decode(body: bytes, max_bytes: int) -> list[RemoteSeries]:
    try:
        return decode_write_request(body, max_bytes)
    except ValueError as exc:
        if "over the limit" in str(exc):
            raise PayloadTooLarge(str(exc), code="batch_too_large",
                                  details={"max_uncompressed_bytes": max_bytes}) from None
        raise InvalidInput(str(exc), code="malformed_remote_write") from None


NodeSamples = dict[str, dict[int, list[Sample]]]  # node → sample time (ms) → samples


def _group_by_node(series: list[RemoteSeries], outcome: Counter[str]) -> NodeSamples:
    by_node: NodeSamples = defaultdict(lambda: defaultdict(list))
    for one in series:
        name = one.name or ""
        if not name.startswith("DCGM_") or not any(one.labels.get(k) for k in UUID_LABELS):
            outcome["not_dcgm"] += len(one.samples)
            continue
        node = one.labels.get(HOSTNAME)
        if not node:
            outcome["no_node"] += len(one.samples)
            continue
        for ms, value in one.samples:
            by_node[node][ms].append(Sample(name, one.labels, value))
    return by_node

