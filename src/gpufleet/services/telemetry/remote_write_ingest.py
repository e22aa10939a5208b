"""Prometheus remote-write in: dcgm-exporter series a site's Prometheus or vmagent already
scrapes, pushed to gpufleet with an `ingest` token and mapped into the catalogue.

The series are read by the rules the dcgm-exporter backend reads a page by
(`domain.telemetry.dcgm_mapping`: the same mapping, scale and sentinels), grouped by the node
the inventory places their GPU on (`UUID` label; GPU UUIDs are unique fleet-wide), and
stored through the same per-sample checks (`batch_columns`' pieces) and group commit as an
agent's batch. dcgm-exporter's `Hostname` label is not used: in Kubernetes it is the
exporter pod's name unless NODE_NAME is set. They go straight into store columns: no
snapshot or batch objects, each series name routed once (cached), each unit's labels read
once per distinct set in the body.

What cannot be used is dropped and counted, never refused as a whole: a remote-write sender
drops a body it gets a 4xx for, so one unknown GPU must not cost the others their samples.

  unknown_gpu   a GPU the inventory does not have (its node has not registered)
  foreign_gpu   the inventory moved the GPU to another node while the body was read
  not_dcgm      a series that is not one of dcgm-exporter's (counted, not stored)

A body is keyed by its digest, so a sender's retry of the same body is not counted twice.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from gpufleet.domain.access import Action, Role
from gpufleet.domain.errors import Forbidden, InvalidInput
from gpufleet.domain.telemetry.catalogue import metric as catalogue_metric
from gpufleet.domain.telemetry.dcgm_mapping import (
    GPU_INSTANCE_ID,
    UUID_LABELS,
    Address,
    Route,
    Unaddressable,
    Workload,
    address_of,
    agreed_workload,
    derived_mig_uuid,
    own_labels,
    route,
    stored_instance,
    workload_of,
)
from gpufleet.domain.telemetry.metric import Metric
from gpufleet.services.access.principal import Principal
from gpufleet.services.inventory.node_units import NodeUnits
from gpufleet.services.telemetry.batch_columns import (
    CLAIMED_METRIC,
    ColumnsBuilder,
    TimeWindow,
    node_series_labels,
    unit_series_problem,
)
from gpufleet.services.telemetry.ingest import TelemetryIngest, too_large
from gpufleet.tsdb import SampleColumns
from gpufleet.wire.base import BodyTooLarge
from gpufleet.wire.remote_write import RemoteSeries, decode_write_request

_UUID, _OLD_UUID = UUID_LABELS


def ingest_remote_write(ingest: TelemetryIngest, principal: Principal,
                        body: bytes) -> Counter[str]:
    """Store a remote-write body; what was dropped, by reason (stored samples under
    `stored`). Raises only for a body that is not remote-write at all."""
    principal.require(Action.WRITE_TELEMETRY)
    with ingest.counting_refusals():
        if principal.role is not Role.INGEST:
            raise Forbidden("remote-write is for ingest tokens; agents upload batches",
                            code="forbidden", details={"role": principal.role.value})
        series = _decode(body, ingest.settings.telemetry_max_batch_uncompressed_bytes)
        owners = ingest.owners_of(_gpus_named(series))
        units = {node: _units(ingest, node, gpus) for node, gpus in _by_owner(owners)}
        by_node, outcome = remote_write_columns(series, owners, units.get, ingest.window())
        digest = hashlib.sha256(body).hexdigest()[:32]
        for node, (columns, dropped) in sorted(by_node.items()):
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
    except BodyTooLarge as exc:
        raise too_large(exc, max_bytes) from None
    except ValueError as exc:
        raise InvalidInput(str(exc), code="malformed_remote_write") from None


def _gpus_named(series: Iterable[RemoteSeries]) -> set[str]:
    return {gpu for one in series if (gpu := _gpu_of(one.labels))}


def _gpu_of(labels: Mapping[str, str]) -> str | None:
    return labels.get(_UUID) or labels.get(_OLD_UUID)


def _by_owner(owners: Mapping[str, str]) -> Iterable[tuple[str, set[str]]]:
    gpus_of: dict[str, set[str]] = {}
    for gpu, node in owners.items():
        gpus_of.setdefault(node, set()).add(gpu)
    return gpus_of.items()


def _units(ingest: TelemetryIngest, node: str, gpus: set[str]) -> NodeUnits | None:
    """The node's inventory, read again when it lacks a GPU the owners said it holds, as
    for an agent's batch; owners it still lacks were moved since: asked again next time."""
    units = ingest.units_of(node, gpus)
    if units is not None and not gpus <= units.gpus.keys():
        ingest.owners.forget(gpus - units.gpus.keys())
    return units


NodeColumns = dict[str, tuple[SampleColumns, Counter[str]]]


def remote_write_columns(series: Iterable[RemoteSeries], owners: Mapping[str, str],
                         units_of: Callable[[str], NodeUnits | None],
                         window: TimeWindow) -> tuple[NodeColumns, Counter[str]]:
    """Each known node's storable samples and per-sample drops, and what the body lost
    before that (unknown_gpu, not_dcgm, foreign_gpu): pure but for `units_of`, the
    inventory's GPUs of a node (None for a node it does not know); `owners` maps each GPU
    the inventory has to its node."""
    outcome: Counter[str] = Counter()
    readings: dict[str, _NodeReading | None] = {}
    addresses: dict[tuple[str | None, ...], Address | Unaddressable] = {}
    for one in series:
        labels, samples = one.labels, one.samples
        name = one.name or ""
        gpu = _gpu_of(labels)
        if not name.startswith("DCGM_") or not gpu:
            outcome["not_dcgm"] += len(samples)
            continue
        node = owners.get(gpu)
        if node is None:
            outcome["unknown_gpu"] += len(samples)
            continue
        if not samples:
            continue
        if node in readings:
            reading = readings[node]
        else:
            units = units_of(node)
            reading = readings[node] = None if units is None else _NodeReading(units)
        if reading is None:  # the node left the inventory since its GPUs were looked up
            outcome["unknown_gpu"] += len(samples)
            continue
        to = route(name)
        if to is None:
            continue  # not in the catalogue: the agent's backend ignores it too
        # The unit is the same for every metric of a GPU: read its labels once per body.
        unit_key = (labels.get(_UUID), labels.get(_OLD_UUID), labels.get(GPU_INSTANCE_ID))
        address = addresses.get(unit_key)
        if address is None:
            address = addresses[unit_key] = address_of(name, labels)
        if isinstance(address, Address):
            reading.add(to, address, labels, samples)
    return {node: reading.columns(window, outcome)
            for node, reading in readings.items() if reading is not None}, outcome


# (catalogue metric, GPU, GPU instance id, own labels): a store series of the node.
RowKey = tuple[str, str, int | None, tuple[tuple[str, str], ...]]


class _NodeReading:
    """One node's samples of a body: a value per (series, time), the first number seen
    winning as in the agent's backend (a series repeated per pod on a shared GPU, a device
    metric on each MIG instance), and the workload each unit's series name at each time."""

    def __init__(self, units: NodeUnits):
        self.units = units
        self.rows: dict[RowKey, tuple[Metric, dict[int, float | None]]] = {}
        self.votes: dict[tuple[str, int | None, int], set[Workload]] = {}

    def add(self, to: Route, address: Address, labels: Mapping[str, str],
            samples: list[tuple[int, float]]) -> None:
        gpu, instance = address.gpu_uuid, address.gpu_instance_id
        workload = workload_of(labels)
        if workload is not None:
            for ms, _ in samples:
                self.votes.setdefault((gpu, instance, ms), set()).add(workload)
        own = own_labels(to, labels)
        if own is None:
            return
        metric = to.metric
        key = (metric.name, gpu, stored_instance(to, instance), own)
        held = self.rows.get(key)
        if held is None:
            held = self.rows[key] = (metric, {})
        row = held[1]
        convert = to.source.to_catalogue_value  # Route's own, a call less per sample
        for ms, raw in samples:
            if row.get(ms) is None:
                row[ms] = convert(raw)

    def columns(self, window: TimeWindow,
                outcome: Counter[str]) -> tuple[SampleColumns, Counter[str]]:
        """The node's store columns and per-sample drops; samples of GPUs the inventory
        places on another node are counted in `outcome` as foreign_gpu."""
        units, out = self.units, ColumnsBuilder()
        for (name, gpu, instance, own), (metric, row) in self.rows.items():
            if gpu not in units.gpus:
                outcome["foreign_gpu"] += sum(1 for v in row.values() if v is not None)
                continue
            mig = None if instance is None else derived_mig_uuid(gpu, instance)
            extra = dict(own)
            reason = unit_series_problem(metric, mig, extra)
            if reason is not None:
                out.drop(reason, row.values())
                continue
            labels = node_series_labels(units, name, gpu, mig, extra)
            if len(row) == 1:
                [(t, v)] = row.items()
                out.one(labels, metric, t, v, window)
            else:
                times = sorted(row)
                out.row(labels, metric, times, [row[t] for t in times], window)
        claimed = catalogue_metric(CLAIMED_METRIC)
        for (gpu, instance, ms), workloads in self.votes.items():
            extra = {f: v for f, v in agreed_workload(workloads).items() if v}
            if extra and gpu in units.gpus:
                mig = None if instance is None else derived_mig_uuid(gpu, instance)
                out.one(node_series_labels(units, CLAIMED_METRIC, gpu, mig, extra), claimed,
                        ms, 1.0, window)
        return out.result(), out.dropped
