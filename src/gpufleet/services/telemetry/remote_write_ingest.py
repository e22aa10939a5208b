"""Prometheus remote-write in: dcgm-exporter series a site's Prometheus or vmagent already
scrapes, pushed to gpufleet with an `ingest` token and mapped into the catalogue.

The series are read by the rules the dcgm-exporter backend reads a page by
(`domain.telemetry.dcgm_mapping`: the same mapping, scale and sentinels), grouped by the node
the inventory places their GPU on (`UUID` label; GPU UUIDs are unique fleet-wide), and
stored through the same per-sample checks (`batch_columns`' pieces) and group commit as an
agent's batch. dcgm-exporter's `Hostname` label is not used: in Kubernetes it is the
exporter pod's name unless NODE_NAME is set. They go straight into store columns: no
snapshot or batch objects, each series name routed once (cached), each unit's labels read
once per distinct set in the body. The body is decoded into columns
(`wire.remote_write_columns`) and each series' labels are read through `SeriesPlans`: once
per series the server has seen, not once per body.

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
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter, itemgetter

import numpy as np

from gpufleet.domain.access import Action, Role
from gpufleet.domain.errors import Forbidden, InvalidInput
from gpufleet.domain.telemetry.catalogue import metric as catalogue_metric
from gpufleet.domain.telemetry.dcgm_mapping import (
    Workload,
    agreed_workload,
    derived_mig_uuid,
)
from gpufleet.domain.telemetry.metric import Metric
from gpufleet.services.access.principal import Principal
from gpufleet.services.inventory.node_units import NodeUnits
from gpufleet.services.telemetry.batch_columns import (
    CLAIMED_METRIC,
    ColumnsBuilder,
    TimeWindow,
    node_series_labels,
    node_series_labels_keyed,
    range_of,
)
from gpufleet.services.telemetry.ingest import TelemetryIngest, too_large
from gpufleet.services.telemetry.remote_write_plans import RowKey, SeriesPlan, SeriesPlans
from gpufleet.services.telemetry.remote_write_values import (
    catalogue_columns,
    catalogue_values,
)
from gpufleet.tsdb import SampleColumns, SeriesLabels
from gpufleet.wire.base import BodyTooLarge
from gpufleet.wire.remote_write_columns import WriteColumns, decode_write_columns


def ingest_remote_write(ingest: TelemetryIngest, principal: Principal,
                        body: bytes) -> Counter[str]:
    """Store a remote-write body; what was dropped, by reason (stored samples under
    `stored`). Raises only for a body that is not remote-write at all."""
    principal.require(Action.WRITE_TELEMETRY)
    with ingest.counting_refusals():
        if principal.role is not Role.INGEST:
            raise Forbidden("remote-write is for ingest tokens; agents upload batches",
                            code="forbidden", details={"role": principal.role.value})
        columns, plans = _decode(ingest.remote_write_plans, body,
                                 ingest.settings.telemetry_max_batch_uncompressed_bytes)
        owners = ingest.owners_of(set(map(_GPU, plans)) - {None})
        units = {node: _units(ingest, node, gpus) for node, gpus in _by_owner(owners)}
        by_node, outcome = remote_write_columns(columns, plans, owners, units.get,
                                                ingest.window())
        digest = hashlib.sha256(body).hexdigest()[:32]
        nodes = sorted(by_node.items())
        # Every node's columns in one group commit: a body holds many nodes' series, and
        # each store call has a key check and an fsync to wait for.
        answers = ingest.store_all([(f"{node}:rw-{digest}", node_columns)
                                    for node, (node_columns, _) in nodes])
        for (_, (_, dropped)), stored in zip(nodes, answers, strict=True):
            outcome.update(dropped)
            if stored is None:
                ingest.counters.duplicate()
            else:
                ingest.counters.stored(stored, dropped)
                outcome["stored"] += stored
    return outcome


def _decode(plans: SeriesPlans, body: bytes,
            max_bytes: int) -> tuple[WriteColumns, list[SeriesPlan]]:
    try:
        columns = decode_write_columns(body, max_bytes, plans.known_blocks)
        return columns, plans.plans_of(columns.label_blocks)
    except BodyTooLarge as exc:
        raise too_large(exc, max_bytes) from None
    except ValueError as exc:
        raise InvalidInput(str(exc), code="malformed_remote_write") from None


def _by_owner(owners: Mapping[str, str]) -> list[tuple[str, set[str]]]:
    gpus_of: dict[str, set[str]] = {}
    for gpu, node in owners.items():
        gpus_of.setdefault(node, set()).add(gpu)
    return list(gpus_of.items())


def _units(ingest: TelemetryIngest, node: str, gpus: set[str]) -> NodeUnits | None:
    """The node's inventory, read again when it lacks a GPU the owners said it holds, as
    for an agent's batch; owners it still lacks were moved since: asked again next time."""
    units = ingest.units_of(node, gpus)
    if units is not None and not gpus <= units.gpus.keys():
        ingest.owners.forget(gpus - units.gpus.keys())
    return units


NodeColumns = dict[str, tuple[SampleColumns, Counter[str]]]


def remote_write_columns(columns: WriteColumns, plans: Sequence[SeriesPlan],
                         owners: Mapping[str, str],
                         units_of: Callable[[str], NodeUnits | None],
                         window: TimeWindow) -> tuple[NodeColumns, Counter[str]]:
    """Each known node's storable samples and per-sample drops, and what the body lost
    before that (unknown_gpu, not_dcgm, foreign_gpu): pure but for `units_of`, the
    inventory's GPUs of a node (None for a node it does not know); `owners` maps each GPU
    the inventory has to its node; `plans` are the plans of `columns.label_blocks`."""
    outcome: Counter[str] = Counter()
    readings: dict[str, _NodeReading | None] = {}
    codes = np.fromiter(map(_ENCODING_CODE, plans), np.int8, len(plans))
    scales = np.fromiter(map(_SCALE, plans), np.float64, len(plans))
    singles = len(columns) == len(plans) and np.array_equal(columns.series_index,
                                                            np.arange(len(plans)))
    if singles:
        steady = steady_columns(columns, plans, owners, units_of, window, codes, scales)
        if steady is not None:
            return steady, outcome
    times = columns.times_ms.tolist()
    if singles:
        ends = range(1, len(times) + 1)  # one sample a series: what a Prometheus sends
    else:
        ends = _ends(columns.series_index.tolist(), len(plans))
        codes, scales = codes[columns.series_index], scales[columns.series_index]
    # Catalogue units (None: a sentinel, NaN or ±inf), the whole body at once.
    values = catalogue_values(columns.values, codes, scales)
    start = 0
    for plan, end in zip(plans, ends, strict=True):
        first, start = start, end
        if not plan.dcgm:
            outcome["not_dcgm"] += end - first
            continue
        node = owners.get(plan.gpu)
        if node is None:
            outcome["unknown_gpu"] += end - first
            continue
        if end == first:
            continue
        reading = readings.get(node, False)
        if reading is False:
            units = units_of(node)
            reading = readings[node] = None if units is None else _NodeReading(units)
        if reading is None:  # the node left the inventory since its GPUs were looked up
            outcome["unknown_gpu"] += end - first
            continue
        if plan.address is None:
            continue  # not in the catalogue, or its unit cannot be told: ignored
        if end - first == 1:
            reading.add_one(plan, times[first], values[first])
        else:
            reading.add(plan, times[first:end], values[first:end])
    return {node: reading.columns(window, outcome)
            for node, reading in readings.items() if reading is not None}, outcome


_ENCODING_CODE, _SCALE, _PLAIN, _GPU, _LABELS_KEY, _LOW, _HIGH = (attrgetter(name) for name in (
    "encoding_code", "scale", "plain", "gpu", "labels_key", "low", "high"))


def steady_columns(columns: WriteColumns, plans: Sequence[SeriesPlan],
                   owners: Mapping[str, str], units_of: Callable[[str], NodeUnits | None],
                   window: TimeWindow, codes: np.ndarray,
                   scales: np.ndarray) -> NodeColumns | None:
    """`remote_write_columns`' answer for a body of one sample a series whose every series
    is `plain`, a distinct row, on a GPU its node holds, with every value storable or "no
    value": a Prometheus' steady state. Built as whole columns (numpy passes and C-level
    maps, no Python call per series); None for any other body, which the general path
    then reads series by series for the same answer."""
    count = len(plans)
    if not all(map(_PLAIN, plans)):
        return None
    keys = list(map(_LABELS_KEY, plans))
    if len(set(keys)) != count:  # two series of one row: the first value present wins
        return None
    nodes = list(map(owners.get, map(_GPU, plans)))
    if None in nodes:
        return None
    values, missing = catalogue_columns(columns.values, codes, scales)
    times = columns.times_ms
    lows = np.fromiter(map(_LOW, plans), np.float64, count)
    highs = np.fromiter(map(_HIGH, plans), np.float64, count)
    with np.errstate(invalid="ignore"):
        storable = (np.isfinite(values) & (values >= lows) & (values <= highs)
                    & (times >= window.oldest_ms) & (times <= window.newest_ms))
    if not (storable | missing).all():
        return None  # a sample to drop and count: the general path does that
    # The body's series by node, each node's in the order they came, as lists sliced per
    # node (blanks, "no value", left out first).
    node_names = list(dict.fromkeys(nodes))
    number_of = {node: n for n, node in enumerate(node_names)}
    node_numbers = np.fromiter(map(number_of.get, nodes), np.int64, count)
    order = np.argsort(node_numbers, kind="stable")
    if missing.any():
        order = order[~missing[order]]
    bounds = np.searchsorted(node_numbers[order], np.arange(len(node_names) + 1)).tolist()
    keys_by_node = np.fromiter(keys, dtype=object, count=count)[order].tolist()
    # Times and values stay numpy columns to the store's journal (packed whole there).
    times_by_node, values_by_node = times[order], values[order]
    answer: NodeColumns = {}
    for n, node in enumerate(node_names):
        units = units_of(node)
        first, end = bounds[n], bounds[n + 1]
        node_keys = keys_by_node[first:end]
        if units is None or not units.gpus.keys() >= set(map(itemgetter(1), node_keys)):
            return None  # the node left the inventory, or no longer holds a GPU
        labels = list(map(units.series_labels.get, node_keys))
        if not all(labels):  # a series new to the node's cache
            labels = [labels_ or _store_labels(units, key, plans[index])
                      for labels_, key, index in zip(labels, node_keys,
                                                     order[first:end].tolist(), strict=True)]
        answer[node] = (SampleColumns(labels, range(len(labels)),
                                      times_by_node[first:end], values_by_node[first:end]),
                        Counter())
    return answer


def _store_labels(units: NodeUnits, key: tuple, plan: SeriesPlan) -> SeriesLabels:
    """The store's labels of `plan`'s series on the node of `units` (kept there by key)."""
    return node_series_labels_keyed(units, key, plan.route.metric.name, plan.address.gpu_uuid,
                                    plan.mig_uuid, plan.extra)


def _ends(series_index: list[int], count: int) -> list[int]:
    """Where each series' samples end in the columns (they come series by series)."""
    ends = [0] * count
    for at, index in enumerate(series_index, 1):
        ends[index] = at
    for index in range(1, count):  # a series without samples ends where the one before did
        ends[index] = max(ends[index], ends[index - 1])
    return ends


class _NodeReading:
    """One node's samples of a body: a value per (series, time), the first number seen
    winning as in the agent's backend (a series repeated per pod on a shared GPU, a device
    metric on each MIG instance), and the workload each unit's series name at each time."""

    def __init__(self, units: NodeUnits):
        self.units = units
        self.rows: dict[RowKey, tuple[SeriesPlan, dict[int, float | None]]] = {}
        self.votes: dict[tuple[str, int | None, int], set[Workload]] = {}

    def add_one(self, plan: SeriesPlan, ms: int, value: float | None) -> None:
        """`add` of a series' only sample."""
        if plan.workload is not None:
            address = plan.address
            self.votes.setdefault((address.gpu_uuid, address.gpu_instance_id, ms),
                                  set()).add(plan.workload)
        if plan.row is None:
            return
        held = self.rows.get(plan.row)
        if held is None:
            self.rows[plan.row] = (plan, {ms: value})
        elif held[1].get(ms) is None:
            held[1][ms] = value

    def add(self, plan: SeriesPlan, times_ms: list[int],
            values: list[float | None]) -> None:
        """A series' samples, in catalogue units (None: the source cannot say)."""
        if plan.workload is not None:
            address = plan.address
            for ms in times_ms:
                self.votes.setdefault((address.gpu_uuid, address.gpu_instance_id, ms),
                                      set()).add(plan.workload)
        if plan.row is None:
            return
        held = self.rows.get(plan.row)
        if held is None:
            held = self.rows[plan.row] = (plan, {})
        row = held[1]
        for ms, value in zip(times_ms, values, strict=True):
            if row.get(ms) is None:
                row[ms] = value

    def columns(self, window: TimeWindow,
                outcome: Counter[str]) -> tuple[SampleColumns, Counter[str]]:
        """The node's store columns and per-sample drops; samples of GPUs the inventory
        places on another node are counted in `outcome` as foreign_gpu."""
        units, out = self.units, ColumnsBuilder()
        gpus, known = units.gpus, units.series_labels
        # Rows of one sample (a body `steady_columns` turned down: workload labels, drops)
        # are gathered in a run and handed to the builder together
        # (`ColumnsBuilder.firsts`), in the order they came: a row of several samples ends
        # the run first.
        run = _SinglesRun()
        for plan, row in self.rows.values():
            metric: Metric = plan.route.metric
            gpu = plan.address.gpu_uuid
            if gpu not in gpus:
                outcome["foreign_gpu"] += sum(1 for v in row.values() if v is not None)
                continue
            if plan.problem is not None:
                out.drop(plan.problem, row.values())
                continue
            labels = known.get(plan.labels_key) or _store_labels(units, plan.labels_key, plan)
            if len(row) == 1:
                [(t, v)] = row.items()
                if v is not None:
                    run.add(labels, range_of(metric), t, v)
            else:
                run.flush(out, window)
                times = sorted(row)
                out.row(labels, metric, times, [row[t] for t in times], window)
        run.flush(out, window)
        claimed = catalogue_metric(CLAIMED_METRIC)
        for (gpu, instance, ms), workloads in self.votes.items():
            extra = {f: v for f, v in agreed_workload(workloads).items() if v}
            if extra and gpu in gpus:
                mig = None if instance is None else derived_mig_uuid(gpu, instance)
                out.one(node_series_labels(units, CLAIMED_METRIC, gpu, mig, extra), claimed,
                        ms, 1.0, window)
        return out.result(), out.dropped


class _SinglesRun:
    """Rows of one sample waiting to go to a `ColumnsBuilder` together, in order."""

    def __init__(self) -> None:
        self.labels: list[SeriesLabels] = []
        self.ranges: list[tuple[float, float]] = []
        self.times_ms: list[int] = []
        self.values: list[float] = []

    def add(self, labels: SeriesLabels, value_range: tuple[float, float], ms: int,
            value: float) -> None:
        self.labels.append(labels)
        self.ranges.append(value_range)
        self.times_ms.append(ms)
        self.values.append(value)

    def flush(self, out: ColumnsBuilder, window: TimeWindow) -> None:
        if self.labels:
            out.firsts(self.labels, self.ranges, self.times_ms, self.values, window)
            self.labels, self.ranges, self.times_ms, self.values = [], [], [], []
