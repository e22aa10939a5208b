"""The `dcgm-exporter` backend: read a node's telemetry from the NVIDIA dcgm-exporter that
already runs there (GPU Operator), instead of from NVML (DESIGN.md §5, docs/agent-backends.md).

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
workload claim; dcgm-exporter lists no processes, so units carry none.

Failures are values for the agent, never tracebacks: an exporter that cannot be reached,
answers with an error, times out, or serves something that is not a metrics page raises
`DcgmExporterUnavailable` (a `SourceUnavailable`) with a message naming the URL and the
problem; a page with some bad lines is read as far as it goes and says so in `problems`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache

import httpx

from gpufleet.agent.backend import SourceUnavailable
from gpufleet.agent.prometheus_text import Page, Sample, parse_page
from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.catalogue import by_dcgm_field, by_prometheus_name
from gpufleet.domain.telemetry.metric import Metric
from gpufleet.domain.telemetry.sources import DcgmSource, PrometheusSource
from gpufleet.wire.agent import NodeRegistration
from gpufleet.wire.telemetry import LabelledValue, NodeSnapshot, UnitSnapshot

BACKEND = "dcgm-exporter"
DEFAULT_PATH = "/metrics"
TEXT_MAX = 253  # wire.telemetry LabelText

# Label names as dcgm-exporter writes them; the second spelling is its --use-old-namespace.
UUID_LABELS = ("UUID", "uuid")
GPU_INSTANCE_ID = "GPU_I_ID"
GPU_INSTANCE_PROFILE = "GPU_I_PROFILE"
HOSTNAME = "Hostname"
WORKLOAD_LABELS = {
    "pod": ("pod", "pod_name"),
    "namespace": ("namespace", "pod_namespace"),
    "container": ("container", "container_name"),
    "slurm_job": ("hpc_job",),  # DESIGN.md §4 calls the job `slurm_job`
}

# (GPU UUID lower-cased, GPU instance id) -> the MIG instance's UUID, from the inventory.
MigUuids = Mapping[tuple[str, int], str]
Workload = tuple[str | None, ...]  # in WORKLOAD_LABELS order


class MalformedPage(ValueError):
    """The text is not a Prometheus exposition at all: not one sample line could be read."""


class DcgmExporterUnavailable(SourceUnavailable):
    """The exporter could not be read this tick; `problem` says why, `url` where."""

    def __init__(self, url: str, problem: str, hint: str = ""):
        self.url = url
        self.problem = problem
        super().__init__(f"dcgm-exporter at {url}: {problem}" + (f". {hint}" if hint else ""))


def derived_mig_uuid(gpu_uuid: str, gpu_instance_id: int) -> str:
    """The stand-in UUID of a MIG instance whose real one the agent does not know.

    dcgm-exporter names an instance by its parent GPU and GPU instance id only. This id is
    unique on the node and stable while the instance lives, and cannot be mistaken for a real
    MIG UUID (`MIG-<uuid>`); unlike a real one it comes back if the layout is recreated with
    the same GPU instance id."""
    return f"{gpu_uuid}/gi/{gpu_instance_id}"


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
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 mig_uuids: MigUuids | None = None):
        self.url = _metrics_url(url)
        self.node = node
        self.timeout_s = timeout_s
        self.mig_uuids: MigUuids = dict(mig_uuids or {})
        self._now = now
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client()

    def use_inventory(self, registration: NodeRegistration) -> None:
        """Name MIG instances by the UUIDs the agent discovered (call after each discovery)."""
        self.mig_uuids = mig_uuids_of(registration)

    def collect(self) -> NodeSnapshot:
        """One scrape, mapped; DcgmExporterUnavailable when the exporter cannot be read."""
        text = self._fetch()
        try:
            return snapshot_from_text(text, self.node, self._now(), self.mig_uuids)
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
    page = parse_page(text)
    if not page.samples and page.malformed_lines:
        raise MalformedPage(f"{page.malformed_lines} unreadable line(s), first "
                            f"{page.first_malformed}")
    return snapshot_from_samples(page.samples, node, at, mig_uuids, page=page)


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
                        problems=tuple(_clip(p) for p in reading.problems(page)))


@dataclass(frozen=True)
class _Route:
    """Where a series name's samples go: the catalogue row, the source whose scale and
    sentinels apply, the NVLink link of a per-link name, and labels the row keeps (xid)."""

    metric: Metric
    source: DcgmSource | PrometheusSource
    link: int | None
    labels: tuple[str, ...]


@lru_cache(maxsize=1024)
def _route(name: str) -> _Route | None:
    try:
        row = by_dcgm_field(name)
    except InvalidInput:
        pass
    else:
        if row.dcgm is not None:  # always: the DCGM index is built from DCGM sources
            return _Route(row, row.dcgm, row.dcgm.link_of(name), _own_labels(row))
    try:
        row = by_prometheus_name(name)  # dcgm-exporter's own: DCGM_EXP_XID_ERRORS_TOTAL
    except InvalidInput:
        return None
    return _Route(row, row.prometheus, None, _own_labels(row))


def _own_labels(row: Metric) -> tuple[str, ...]:
    return tuple(label for label in row.labels if label != "link")


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
        route = _route(sample.name)
        if route is None:
            self._ignored[sample.name] += 1
            return
        labels = sample.labels
        unit = self._unit_of(sample.name, labels)
        if unit is None:
            return
        if HOSTNAME in labels:
            self._hosts.add(labels[HOSTNAME])
        unit.workloads.add(_workload(labels))
        if unit.gpu_instance_id is not None and not route.metric.per_mig:
            unit = self._gpus[unit.gpu_uuid][None]
        value = route.source.to_catalogue_value(sample.value)
        if route.link is not None:
            unit.put_labelled(route.metric.name, (("link", str(route.link)),), value)
        elif route.labels:
            kept = tuple((name, labels.get(name, "")) for name in route.labels)
            if not all(0 < len(text) <= TEXT_MAX for _, text in kept):
                self._missing_label[route.metric.name] += 1
                return
            unit.put_labelled(route.metric.name, kept, value)
        else:
            unit.put(route.metric.name, value)

    def _unit_of(self, name: str, labels: Mapping[str, str]) -> _Unit | None:
        uuid = next((labels[k] for k in UUID_LABELS if labels.get(k)), None)
        if uuid is None or len(uuid) > TEXT_MAX:
            self._no_uuid[name] += 1
            return None
        instance_text = labels.get(GPU_INSTANCE_ID, "")
        instance = _instance_id(instance_text) if instance_text else None
        if instance_text and instance is None:
            self._bad_instance[instance_text] += 1
            return None
        units = self._gpus.get(uuid)
        if units is None:
            units = self._gpus[uuid] = {None: _Unit(uuid)}
        unit = units.get(instance)
        if unit is None:
            profile = labels.get(GPU_INSTANCE_PROFILE) or None
            unit = units[instance] = _Unit(
                uuid, instance, profile if profile and len(profile) <= TEXT_MAX else None)
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
            **_agreed(unit.workloads))

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
                  if len({w for w in u.workloads if any(w)}) > 1]
        if shared:
            yield (f"{len(shared)} unit(s) carry several workloads (a shared GPU); only what "
                   f"they agree on is kept: {_names(Counter(_unit_name(u) for u in shared))}")
        if len(self._hosts) > 1:
            yield (f"series from {len(self._hosts)} hosts ({', '.join(sorted(self._hosts))}): "
                   "scrape this node's own dcgm-exporter, not a shared service")
        if not self._gpus:
            yield ("no GPU series on the page: dcgm-exporter sees no GPU, or this is not its "
                   "/metrics")


def _instance_id(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def _order(instance: int | None) -> int:
    return -1 if instance is None else instance


def _workload(labels: Mapping[str, str]) -> Workload:
    return tuple(next((labels[k] for k in keys if labels.get(k)), None)
                 for keys in WORKLOAD_LABELS.values())


def _agreed(workloads: set[Workload]) -> dict[str, str | None]:
    """Each workload field the unit's series agree on (series without one do not vote)."""
    claims = [w for w in workloads if any(w)]
    agreed: dict[str, str | None] = {}
    for i, name in enumerate(WORKLOAD_LABELS):
        seen = {w[i] for w in claims}
        value = seen.pop() if len(seen) == 1 else None
        agreed[name] = value if value is None or len(value) <= TEXT_MAX else None
    return agreed


def _unit_name(unit: _Unit) -> str:
    if unit.gpu_instance_id is None:
        return unit.gpu_uuid
    return f"{unit.gpu_uuid} GI {unit.gpu_instance_id}"


def _names(counts: Counter[str]) -> str:
    return ", ".join(sorted(counts))


def _clip(text: str) -> str:
    return text if len(text) <= TEXT_MAX else text[: TEXT_MAX - 1] + "…"
