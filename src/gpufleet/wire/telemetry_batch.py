"""The telemetry upload: several ticks of one node's snapshots, columnar and compressed.

An agent collects a `NodeSnapshot` per tick and uploads them in batches. Row by row, a batch
of 8 GPUs × 30 ticks would repeat every metric name and unit id 30 times; columnar, each
series (metric + unit + extra labels) is named once in `series`, the tick times once in
`times_ms`, and `values[s][t]` is series `s` at tick `t` — `None` where the source could
not say or the series was absent that tick. Processes and unit-level workload claims are
rows that name their tick. The JSON is gzip-compressed on the wire.

`batch_id` is chosen by the agent and kept across retries: the server counts a batch id
once, so a batch replayed from the spool after a lost acknowledgement is not counted twice.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field, StringConstraints, ValidationError, model_validator

from gpufleet.text_limits import BATCH_ID
from gpufleet.wire.base import BodyTooLarge, StrictModel
from gpufleet.wire.nul_text import refuse_nul_json
from gpufleet.wire.telemetry import (
    BackendName,
    LabelledValue,
    LabelText,
    MetricName,
    NodeSnapshot,
    ProcessSnapshot,
    UnitSnapshot,
)

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around a deflate stream
BatchId = Annotated[str, StringConstraints(pattern=rf"^{BATCH_ID}$")]
CLAIM_FIELDS = ("pod", "namespace", "container", "slurm_job")


class SeriesKey(StrictModel):
    metric: MetricName
    gpu_uuid: LabelText
    mig_uuid: LabelText | None = None
    mig_profile: LabelText | None = None
    gpu_instance_id: int | None = None
    labels: dict[LabelText, LabelText] = Field(default_factory=dict)


class ProcessRow(ProcessSnapshot):
    tick: int = Field(ge=0)
    gpu_uuid: LabelText
    mig_uuid: LabelText | None = None


class UnitClaimRow(StrictModel):
    """A unit's workload as the source names it (dcgm-exporter's pod / HPC job mapping)."""

    tick: int = Field(ge=0)
    gpu_uuid: LabelText
    mig_uuid: LabelText | None = None
    pod: LabelText | None = None
    namespace: LabelText | None = None
    container: LabelText | None = None
    slurm_job: LabelText | None = None


class TelemetryBatch(StrictModel):
    batch_id: BatchId
    node: LabelText
    backend: BackendName
    times_ms: list[int] = Field(min_length=1)  # Unix epoch milliseconds, one per tick
    series: list[SeriesKey]
    values: list[list[float | None]]
    processes: list[ProcessRow] = Field(default_factory=list)
    unit_claims: list[UnitClaimRow] = Field(default_factory=list)
    problems: list[LabelText] = Field(default_factory=list)

    @model_validator(mode="after")
    def _rectangular(self) -> TelemetryBatch:
        if len(self.values) != len(self.series):
            raise ValueError(f"values has {len(self.values)} rows for "
                             f"{len(self.series)} series")
        ticks = len(self.times_ms)
        for n, row in enumerate(self.values):
            if len(row) != ticks:
                raise ValueError(f"values[{n}] has {len(row)} entries for {ticks} ticks")
        for row in (*self.processes, *self.unit_claims):
            if row.tick >= ticks:
                raise ValueError(f"a row names tick {row.tick} of {ticks}")
        return self


def columnar(batch_id: str, snapshots: Sequence[NodeSnapshot]) -> TelemetryBatch:
    """One node's snapshots, oldest first, as one batch."""
    if not snapshots:
        raise ValueError("a batch holds at least one snapshot")
    first = snapshots[0]
    if any(s.node != first.node for s in snapshots):
        raise ValueError("a batch holds one node's snapshots")
    index: dict[tuple, int] = {}
    series: list[SeriesKey] = []
    columns: list[list[float | None]] = []
    processes: list[ProcessRow] = []
    claims: list[UnitClaimRow] = []
    ticks = len(snapshots)

    def put(key: SeriesKey, tick: int, value: float | None) -> None:
        identity = (key.metric, key.gpu_uuid, key.mig_uuid, tuple(sorted(key.labels.items())))
        row = index.get(identity)
        if row is None:
            row = index[identity] = len(series)
            series.append(key)
            columns.append([None] * ticks)
        columns[row][tick] = value

    for tick, snapshot in enumerate(snapshots):
        for unit in snapshot.units:
            for metric, value in unit.values.items():
                put(_key(unit, metric), tick, value)
            for labelled in unit.labelled:
                put(_key(unit, labelled.metric, labelled.labels), tick, labelled.value)
            processes += [ProcessRow(tick=tick, gpu_uuid=unit.gpu_uuid, mig_uuid=unit.mig_uuid,
                                     **p.model_dump()) for p in unit.processes]
            claim = {f: getattr(unit, f) for f in CLAIM_FIELDS if getattr(unit, f)}
            if claim:
                claims.append(UnitClaimRow(tick=tick, gpu_uuid=unit.gpu_uuid,
                                           mig_uuid=unit.mig_uuid, **claim))
    return TelemetryBatch(
        batch_id=batch_id, node=first.node, backend=first.backend,
        times_ms=[round(s.at.timestamp() * 1000) for s in snapshots], series=series,
        values=columns, processes=processes, unit_claims=claims,
        problems=sorted({p for s in snapshots for p in s.problems}))


def snapshots(batch: TelemetryBatch) -> list[NodeSnapshot]:
    """The batch's ticks as snapshots again (what `columnar` was given, less absent
    series: a series absent at a tick and one reported as None read the same)."""
    units: list[dict[tuple, dict]] = [{} for _ in batch.times_ms]

    def unit_of(tick: int, gpu_uuid: str, mig_uuid: str | None) -> dict:
        return units[tick].setdefault((gpu_uuid, mig_uuid), {
            "gpu_uuid": gpu_uuid, "mig_uuid": mig_uuid, "values": {}, "labelled": [],
            "processes": []})

    for key, row in zip(batch.series, batch.values, strict=True):
        for tick, value in enumerate(row):
            unit = unit_of(tick, key.gpu_uuid, key.mig_uuid)
            unit["mig_profile"], unit["gpu_instance_id"] = key.mig_profile, key.gpu_instance_id
            if key.labels:
                unit["labelled"].append(LabelledValue(metric=key.metric, labels=key.labels,
                                                      value=value))
            else:
                unit["values"][key.metric] = value
    for process in batch.processes:
        fields = process.model_dump(exclude={"tick", "gpu_uuid", "mig_uuid"})
        unit_of(process.tick, process.gpu_uuid, process.mig_uuid)["processes"].append(
            ProcessSnapshot(**fields))
    for claim in batch.unit_claims:
        unit_of(claim.tick, claim.gpu_uuid, claim.mig_uuid).update(
            claim.model_dump(include=set(CLAIM_FIELDS)))
    return [NodeSnapshot(node=batch.node, backend=batch.backend, problems=batch.problems,
                         at=datetime.fromtimestamp(ms / 1000, UTC),
                         units=tuple(UnitSnapshot(**unit) for unit in by_unit.values()))
            for ms, by_unit in zip(batch.times_ms, units, strict=True)]


def encode(batch: TelemetryBatch) -> bytes:
    return gzip.compress(batch.model_dump_json(exclude_defaults=True).encode(), mtime=0)


def decode(payload: bytes, max_bytes: int) -> TelemetryBatch:
    """A batch from its wire form. ValueError names what is wrong: not gzip, more than one
    gzip member, larger than `max_bytes` once decompressed (`BodyTooLarge`; a small body
    can inflate enormously: decompression stops at the limit), a NUL in any text
    (`NulCharacter`), not JSON; a pydantic ValidationError says which field is
    malformed."""
    inflate = zlib.decompressobj(wbits=_GZIP_WBITS)
    try:
        raw = inflate.decompress(payload, max_bytes + 1)
    except zlib.error as exc:
        raise ValueError(f"the body is not gzip-compressed JSON ({exc})") from None
    if len(raw) > max_bytes:
        raise BodyTooLarge(f"the batch is larger than {max_bytes} bytes uncompressed")
    if not inflate.eof:
        raise ValueError("the body is not gzip-compressed JSON (the gzip stream is cut short)")
    if inflate.unused_data:
        # A second gzip member (or bytes after the first) would be ignored by this decoder
        # and read by others: one body, one meaning.
        raise ValueError("the body holds bytes after its gzip stream (a second gzip member?): "
                         "send one batch as one gzip member")
    refuse_nul_json(raw)
    try:
        return TelemetryBatch.model_validate_json(raw)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise ValueError(f"the batch is not JSON ({exc.errors()[0]['msg']})") from None
        raise


def _key(unit: UnitSnapshot, metric: str, labels: dict[str, str] | None = None) -> SeriesKey:
    return SeriesKey(metric=metric, gpu_uuid=unit.gpu_uuid, mig_uuid=unit.mig_uuid,
                     mig_profile=unit.mig_profile, gpu_instance_id=unit.gpu_instance_id,
                     labels=labels or {})



TELEMETRY_BATCHES_PATH = "/api/v1/telemetry/batches"


class TelemetryAck(StrictModel):
    """The server's answer to a batch, sent only once its samples are durable.

    `duplicate`: the batch id was already stored (a replay); nothing was stored twice and
    the agent may forget the batch. `dropped` counts samples left out, by reason (an unknown
    metric, a non-finite value, a time outside the accepted window…); the rest was stored.
    """

    batch_id: BatchId
    duplicate: bool = False
    samples_stored: int = Field(ge=0)
    dropped: dict[str, int] = Field(default_factory=dict)
