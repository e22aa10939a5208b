"""The `dcgm-exporter` backend: read a node's telemetry from the NVIDIA dcgm-exporter that already
runs there (GPU Operator), instead of from NVML (docs/design.md, "Architecture",
docs/agent-backends.md).

One collection tick is one GET of the exporter's /metrics page, mapped into a
`NodeSnapshot` through the metric catalogue: every DCGM_FI_* series by its DCGM field
(`by_dcgm_field`: per-link NVLink names and older aliases included), dcgm-exporter's own
series by their exposition name (DCGM_EXP_XID_ERRORS_TOTAL, one series per `xid`). The
catalogue's scale and sentinels apply: profiling ratios become percent, MiB become bytes,
DCGM blanks and NaN / inf become None. Series the catalogue does not know are ignored and
named once per tick in the snapshot's `problems`.

Units come from the labels: `UUID` is the GPU; `GPU_I_ID` / `GPU_I_PROFILE` make a series a
MIG instance's. A device-only metric (the catalogue's `per_mig` false) seen on an instance's
series belongs to the parent GPU's unit. dcgm-exporter does not say a MIG instance's UUID:
it is looked up in the agent's own inventory by (GPU UUID, GPU instance id) when given, and
otherwise derived (`derived_mig_uuid`). Kubernetes pod mapping (`pod`, `namespace`,
`container`) and HPC job mapping (`hpc_job`, kept as `slurm_job`) become the unit's
workload claim; dcgm-exporter lists no processes, so units carry none. These rules live in
`domain.telemetry.dcgm_mapping`, shared with the server's remote-write receiver.

Failures are values for the agent, never tracebacks: an exporter that cannot be reached,
answers with an error, times out, or serves something that is not a metrics page raises
`DcgmExporterUnavailable` (a `SourceUnavailable`) with a message naming the URL and the
problem; a page with some bad lines is read as far as it goes and says so in `problems`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import httpx

from gpufleet.agent.backend import SourceUnavailable
from gpufleet.agent.prometheus_text import Page, Sample, parse_page
from gpufleet.clock import Clock, SystemClock
from gpufleet.domain.telemetry.dcgm_mapping import (
    GPU_INSTANCE_ID,
    GPU_INSTANCE_PROFILE,
    HOSTNAME,
    UUID_LABELS,
    WORKLOAD_LABELS,
    Address,
    Workload,
    address_of,
    agreed_workload,
    derived_mig_uuid,
    instance_profile,
    own_labels,
    route,
    stored_instance,
    workload_of,
)
from gpufleet.text_limits import clip
from gpufleet.wire.agent import NodeRegistration
from gpufleet.wire.telemetry import LabelledValue, NodeSnapshot, UnitSnapshot

BACKEND = "dcgm-exporter"
DEFAULT_PATH = "/metrics"
# Re-exported: the dcgm-exporter label names are the agent's vocabulary too.
__all__ = ["GPU_INSTANCE_ID", "GPU_INSTANCE_PROFILE", "HOSTNAME", "UUID_LABELS",
           "WORKLOAD_LABELS", "DcgmExporterBackend", "DcgmExporterUnavailable",
           "MalformedPage", "derived_mig_uuid", "metrics_page", "mig_uuids_of",
           "snapshot_from_samples",
           "snapshot_from_text"]

# (GPU UUID lower-cased, GPU instance id) -> the MIG instance's UUID, from the inventory.
MigUuids = Mapping[tuple[str, int], str]


class MalformedPage(ValueError):
    """The text is not a Prometheus exposition at all: not one sample line could be read."""


class DcgmExporterUnavailable(SourceUnavailable):
    """The exporter could not be read this tick; `problem` says why, `url` where."""

    def __init__(self, url: str, problem: str, hint: str = ""):
        self.url = url
        self.problem = problem
        super().__init__(f"dcgm-exporter at {url}: {problem}" + (f". {hint}" if hint else ""))


def mig_uuids_of(registration: NodeRegistration) -> dict[tuple[str, int], str]:
    """The MIG UUIDs the node's own inventory knows, keyed as `snapshot_from_text` asks."""
    return {(gpu.uuid.lower(), m.gpu_instance_id): m.mig_uuid
            for gpu in registration.gpus for m in gpu.mig_instances
            if m.mig_uuid and m.gpu_instance_id is not None}


class DcgmExporterBackend:
    """A `TelemetrySource` that scrapes one dcgm-exporter, normally the node's own
    (http://localhost:9400/metrics). A URL without a path gets /metrics."""

    name = BACKEND

    def __init__(self, url: str, node: str, *, timeout_s: float = 5.0,
                 client: httpx.Client | None = None,
                 clock: Clock | None = None,
                 mig_uuids: MigUuids | None = None):
        self.url = _metrics_url(url)
        self.node = node
        self.timeout_s = timeout_s
        self.mig_uuids: MigUuids = dict(mig_uuids or {})
        self._clock = clock or SystemClock()
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client()

    def use_inventory(self, registration: NodeRegistration) -> None:
        """Name MIG instances by the UUIDs the agent discovered (call after each discovery)."""
        self.mig_uuids = mig_uuids_of(registration)

    def collect(self) -> NodeSnapshot:
        """One scrape, mapped; DcgmExporterUnavailable when the exporter cannot be read."""
        page = self.scrape()
        return snapshot_from_samples(page.samples, self.node, self._clock.now(), self.mig_uuids,
                                     page=page)

    def scrape(self) -> Page:
        """One GET of the page, parsed: what the telemetry and the inventory
        (`dcgm_inventory`) read. DcgmExporterUnavailable when it cannot be had or is not a
        metrics page."""
        text = self._fetch()
        try:
            return metrics_page(text)
        except MalformedPage as exc:
            raise DcgmExporterUnavailable(
                self.url, f"the page is not Prometheus metrics ({exc})",
                "Check that --dcgm-exporter-url names dcgm-exporter's /metrics") from exc

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> DcgmExporterBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _fetch(self) -> str:
        try:
            response = self._client.get(self.url, timeout=self.timeout_s,
                                        headers={"Accept": "text/plain"})
        except httpx.TimeoutException as exc:
            raise DcgmExporterUnavailable(
                self.url, f"no answer within {self.timeout_s:g} s ({type(exc).__name__})",
                "Check that the exporter answers a plain curl of that URL in time"
            ) from exc
        except httpx.ConnectError as exc:
            raise DcgmExporterUnavailable(
                self.url, f"cannot connect ({str(exc) or type(exc).__name__})",
                "Is dcgm-exporter running on this node, and is --dcgm-exporter-url right?"
            ) from exc
        except httpx.HTTPError as exc:
            raise DcgmExporterUnavailable(
                self.url, f"the request failed ({type(exc).__name__}: {exc})") from exc
        if not response.is_success:
            body = " ".join(response.text.split())[:120]
            raise DcgmExporterUnavailable(
                self.url, f"answered HTTP {response.status_code} {response.reason_phrase}"
                + (f": {body}" if body else ""))
        return response.text


def _metrics_url(url: str) -> str:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"dcgm-exporter URL {url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"dcgm-exporter URL {url!r} must be http:// or https://host[:port]"
                         "[/path]")
    if parsed.path in ("", "/"):
        parsed = parsed.copy_with(path=DEFAULT_PATH)
    return str(parsed)


def snapshot_from_text(text: str, node: str, at: datetime,
                       mig_uuids: MigUuids | None = None) -> NodeSnapshot:
    """The snapshot a dcgm-exporter page says, read at `at`: pure, no I/O.

    `mig_uuids` maps (GPU UUID lower-cased, GPU instance id) to the instance's real MIG
    UUID (see `mig_uuids_of`); instances it does not name get `derived_mig_uuid`. Raises
    MalformedPage only when no line of a non-empty page could be read."""
    page = metrics_page(text)
    return snapshot_from_samples(page.samples, node, at, mig_uuids, page=page)


def metrics_page(text: str) -> Page:
    """The page's samples, bad lines skipped and counted; MalformedPage when no line of a
    non-empty page could be read (it is not a metrics page at all)."""
    page = parse_page(text)
    if not page.samples and page.malformed_lines:
        raise MalformedPage(f"{page.malformed_lines} unreadable line(s), first "
                            f"{page.first_malformed}")
    return page


def snapshot_from_samples(samples: Iterable[Sample], node: str, at: datetime,
                          mig_uuids: MigUuids | None = None, *,
                          page: Page | None = None) -> NodeSnapshot:
    """The snapshot dcgm-exporter's series say, however they arrived: scraped here from its
    page, or pushed to the server by a Prometheus that scraped it (remote-write)."""
    reading = _Reading(mig_uuids or {})
    for sample in samples:
        reading.add(sample)
    page = page or Page(samples=())
    return NodeSnapshot(node=node, at=at, backend=BACKEND, units=reading.units(),
                        problems=tuple(clip(p) for p in reading.problems(page)))


@dataclass
class _Unit:
    gpu_uuid: str
    gpu_instance_id: int | None = None
    profile: str | None = None
    values: dict[str, float | None] = field(default_factory=dict)
    labelled: dict[tuple[str, tuple[tuple[str, str], ...]], float | None] = field(
        default_factory=dict)
    workloads: set[Workload] = field(default_factory=set)

    def put(self, metric: str, value: float | None) -> None:
        # A series can come more than once: a copy per pod on a shared GPU, a device metric
        # on each MIG instance. The first number wins; a later one only replaces a None.
        if self.values.get(metric) is None:
            self.values[metric] = value

    def put_labelled(self, metric: str, labels: tuple[tuple[str, str], ...],
                     value: float | None) -> None:
        if self.labelled.get((metric, labels)) is None:
            self.labelled[(metric, labels)] = value


class _Reading:
    """One page being mapped: units by GPU, and what could not be read, counted."""

    def __init__(self, mig_uuids: MigUuids):
        self._mig_uuids = mig_uuids
        self._gpus: dict[str, dict[int | None, _Unit]] = {}  # parent first: key None
        self._ignored: Counter[str] = Counter()
        self._no_uuid: Counter[str] = Counter()
        self._bad_instance: Counter[str] = Counter()
        self._missing_label: Counter[str] = Counter()
        self._hosts: set[str] = set()

    def add(self, sample: Sample) -> None:
        to = route(sample.name)
        if to is None:
            self._ignored[sample.name] += 1
            return
        labels = sample.labels
        unit = self._unit_of(sample.name, labels)
        if unit is None:
            return
        if HOSTNAME in labels:
            self._hosts.add(labels[HOSTNAME])
        workload = workload_of(labels)
        if workload is not None:
            unit.workloads.add(workload)
        if stored_instance(to, unit.gpu_instance_id) is None:
            unit = self._gpus[unit.gpu_uuid][None]
        kept = own_labels(to, labels)
        if kept is None:
            self._missing_label[to.metric.name] += 1
            return
        value = to.to_catalogue_value(sample.value)
        if kept:
            unit.put_labelled(to.metric.name, kept, value)
        else:
            unit.put(to.metric.name, value)

    def _unit_of(self, name: str, labels: Mapping[str, str]) -> _Unit | None:
        address = address_of(name, labels)
        if not isinstance(address, Address):
            problems = self._no_uuid if address.reason == "no_uuid" else self._bad_instance
            problems[address.detail] += 1
            return None
        uuid, instance = address.gpu_uuid, address.gpu_instance_id
        units = self._gpus.get(uuid)
        if units is None:
            units = self._gpus[uuid] = {None: _Unit(uuid)}
        unit = units.get(instance)
        if unit is None:
            unit = units[instance] = _Unit(uuid, instance, instance_profile(labels))
        return unit

    def units(self) -> tuple[UnitSnapshot, ...]:
        return tuple(self._snapshot(unit)
                     for units in self._gpus.values()
                     for _, unit in sorted(units.items(), key=lambda kv: _order(kv[0])))

    def _snapshot(self, unit: _Unit) -> UnitSnapshot:
        mig_uuid = None
        if unit.gpu_instance_id is not None:
            mig_uuid = self._mig_uuids.get((unit.gpu_uuid.lower(), unit.gpu_instance_id)) \
                or derived_mig_uuid(unit.gpu_uuid, unit.gpu_instance_id)
        return UnitSnapshot(
            gpu_uuid=unit.gpu_uuid, mig_uuid=mig_uuid, mig_profile=unit.profile,
            gpu_instance_id=unit.gpu_instance_id, values=unit.values,
            labelled=tuple(LabelledValue(metric=metric, labels=dict(labels), value=value)
                           for (metric, labels), value in unit.labelled.items()),
            **agreed_workload(unit.workloads))

    def problems(self, page: Page) -> Iterable[str]:
        if page.malformed_lines:
            yield (f"skipped {page.malformed_lines} malformed line(s) of the page, first "
                   f"{page.first_malformed}")
        if self._ignored:
            yield (f"ignored {len(self._ignored)} series not in the metric catalogue "
                   f"({self._ignored.total()} samples): {_names(self._ignored)}")
        if self._no_uuid:
            yield (f"ignored {self._no_uuid.total()} sample(s) without a GPU UUID label: "
                   f"{_names(self._no_uuid)}")
        if self._bad_instance:
            yield (f"ignored {self._bad_instance.total()} sample(s) whose {GPU_INSTANCE_ID} "
                   f"is not a GPU instance id: {_names(self._bad_instance)}")
        if self._missing_label:
            yield (f"ignored {self._missing_label.total()} sample(s) without a usable label "
                   f"of their own (xid): {_names(self._missing_label)}")
        shared = [u for units in self._gpus.values() for u in units.values()
                  if len(u.workloads) > 1]
        if shared:
            yield (f"{len(shared)} unit(s) carry several workloads (a shared GPU); only what "
                   f"they agree on is kept: {_names(Counter(_unit_name(u) for u in shared))}")
        if len(self._hosts) > 1:
            yield (f"series from {len(self._hosts)} hosts ({', '.join(sorted(self._hosts))}): "
                   "scrape this node's own dcgm-exporter, not a shared service")
        if not self._gpus:
            yield ("no GPU series on the page: dcgm-exporter sees no GPU, or this is not its "
                   "/metrics")


def _order(instance: int | None) -> int:
    return -1 if instance is None else instance


def _unit_name(unit: _Unit) -> str:
    if unit.gpu_instance_id is None:
        return unit.gpu_uuid
    return f"{unit.gpu_uuid} GI {unit.gpu_instance_id}"


def _names(counts: Counter[str]) -> str:
    return ", ".join(sorted(counts))

