"""The agent's own /metrics, in dcgm-exporter's names, labels and units, so a Prometheus and
the Grafana dashboards built for dcgm-exporter can read a gpufleet node as they read one
running dcgm-exporter (docs/agent-backends.md).

One custom prometheus-client Collector renders the last snapshot at scrape time (nothing is
kept per series between scrapes). Each value goes back from the catalogue's unit to its
DCGM field's: the name is the row's DCGM field (`DCGM_FI_DEV_FB_USED`, per-link NVLink as
`DCGM_FI_PROF_NVLINK_L3_TX_BYTES`), the value is divided by the source's scale (bytes →
MiB, percent → 0–1 ratio, J → mJ). A row without a DCGM field keeps its Prometheus name in
catalogue units (`DCGM_EXP_XID_ERRORS_TOTAL{xid}`, `gpufleet_gpu_graphics_clock_mhz`).
A `None` (the source could not say) is left out, as dcgm-exporter leaves out blanks.
Process series are not exposed: dcgm-exporter has none, and a pid label would make
cardinality explode.

Labels are dcgm-exporter's: `gpu` (index), `UUID`, `pci_bus_id`, `device` (`nvidia<i>`),
`modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`; `GPU_I_PROFILE` and `GPU_I_ID` on a MIG
instance's series; `pod`, `namespace`, `container` and `hpc_job` where the snapshot knows the
unit's workload. Every series is typed gauge: prometheus-client would rename a counter to
`<name>_total`, and the dashboards look series up by name, not by type.

The agent's own health is beside it as `gpufleet_agent_*` (collections, batches, spool).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import fields

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry import dcgm_mapping as dcgm
from gpufleet.domain.telemetry.catalogue import metric as catalogue_metric
from gpufleet.domain.telemetry.metric import Metric as CatalogueRow
from gpufleet.wire.agent import GpuReport, NodeRegistration
from gpufleet.wire.telemetry import NodeSnapshot, UnitSnapshot

from .telemetry_uploader import TelemetryCounters

log = logging.getLogger(__name__)

DEFAULT_METRICS_PORT = 9400  # dcgm-exporter's
# (snapshot field, label written): the spelling dcgm-exporter writes today.
WORKLOAD_LABELS = tuple((field, names[0]) for field, names in dcgm.WORKLOAD_LABELS.items())


def exposition(row: CatalogueRow, labels: dict[str, str]) -> tuple[str, float] | None:
    """(series name, scale) of a catalogue row as dcgm-exporter exposes it; None for a
    per-link row whose link is not one of the DCGM field's."""
    if row.dcgm is None:
        return row.prometheus.name, row.prometheus.scale
    if "link" not in row.labels:
        return row.dcgm.field, row.dcgm.scale
    link = labels.get("link", "")
    name = next((n for n, _, number in row.dcgm.fields() if str(number) == link), None)
    return None if name is None else (name, row.dcgm.scale)


class SnapshotCollector(Collector):
    """Renders the last snapshot handed to `update` (an agent's `on_snapshot`). `update`
    and `use_inventory` swap one reference, so a scrape from the HTTP thread always sees
    one whole snapshot."""

    def __init__(self, hostname: str, counters: TelemetryCounters | None = None,
                 spooled_batches: Callable[[], int] | None = None):
        self.hostname = hostname
        self.counters = counters
        self.spooled_batches = spooled_batches
        self._snapshot: NodeSnapshot | None = None
        self._gpus: dict[str, GpuReport] = {}
        self._driver: str | None = None

    def update(self, snapshot: NodeSnapshot) -> None:
        self._snapshot = snapshot

    def use_inventory(self, registration: NodeRegistration) -> None:
        """GPU index, model name, PCI bus id and driver for the labels (after discovery)."""
        self._gpus = {gpu.uuid.lower(): gpu for gpu in registration.gpus}
        self._driver = registration.driver_version

    def describe(self) -> list[Metric]:
        return []  # the series depend on the snapshot: no check at registration

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot
        if snapshot is not None:
            yield from self._gpu_series(snapshot)
        yield from self._agent_series()

    def _gpu_series(self, snapshot: NodeSnapshot) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for unit in snapshot.units:
            labels = self._unit_labels(unit)
            for name, value in unit.values.items():
                self._add(families, name, {}, labels, value)
            for labelled in unit.labelled:
                self._add(families, labelled.metric, labelled.labels, labels, labelled.value)
        yield from families.values()

    def _add(self, families: dict[str, Metric], metric: str, own: dict[str, str],
             labels: dict[str, str], value: float | None) -> None:
        if value is None:
            return
        try:
            row = catalogue_metric(metric)
        except InvalidInput:
            return
        named = exposition(row, own)
        if named is None:
            return
        name, scale = named
        family = families.get(name)
        if family is None:
            family = families[name] = Metric(name, row.description, "gauge")
        extra = {k: v for k, v in own.items() if k != "link"}
        family.add_sample(name, {**labels, **extra}, value / scale)

    def _unit_labels(self, unit: UnitSnapshot) -> dict[str, str]:
        gpu = self._gpus.get(unit.gpu_uuid.lower())
        labels = {dcgm.GPU_INDEX: "" if gpu is None else str(gpu.index),
                  dcgm.UUID_LABELS[0]: unit.gpu_uuid,
                  dcgm.PCI_BUS_ID: (gpu.pci_bus_id or "") if gpu else "",
                  dcgm.DEVICE: "" if gpu is None else f"nvidia{gpu.index}",
                  dcgm.MODEL_NAME: gpu.name if gpu else ""}
        if unit.is_mig:
            labels[dcgm.GPU_INSTANCE_PROFILE] = unit.mig_profile or ""
            labels[dcgm.GPU_INSTANCE_ID] = "" if unit.gpu_instance_id is None \
                else str(unit.gpu_instance_id)
        labels[dcgm.HOSTNAME] = self.hostname
        if self._driver:
            labels[dcgm.DRIVER_VERSION] = self._driver
        for field, label in WORKLOAD_LABELS:
            value = getattr(unit, field) or _agreed(unit, field)
            if value:
                labels[label] = value
        return labels

    def _agent_series(self) -> Iterator[Metric]:
        if self.counters is not None:
            for field in fields(self.counters):
                family = CounterMetricFamily(
                    f"gpufleet_agent_{field.name}", f"Telemetry {field.name.replace('_', ' ')} "
                    "since the agent started.")
                family.add_metric([], getattr(self.counters, field.name))
                yield family
        if self.spooled_batches is not None:
            try:
                count = self.spooled_batches()
            except OSError:
                return
            yield GaugeMetricFamily("gpufleet_agent_spooled_batches",
                                    "Telemetry batches waiting in the spool for an ack.",
                                    value=count)


def _agreed(unit: UnitSnapshot, field: str) -> str | None:
    """The workload field every process of the unit names alike, else None."""
    seen = {getattr(p, field) for p in unit.processes}
    return seen.pop() if len(seen) == 1 else None


class MetricsServer:
    """prometheus-client's HTTP server on a daemon thread, over one collector."""

    def __init__(self, collector: SnapshotCollector, port: int = DEFAULT_METRICS_PORT,
                 address: str = "0.0.0.0"):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._server, self._thread = start_http_server(port, addr=address,
                                                       registry=self.registry)
        self.port = self._server.server_port
        log.info("serving the agent's metrics on http://%s:%d/metrics", address, self.port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        thread: threading.Thread = self._thread
        thread.join(timeout=5)
