"""The `nvml` backend: read a node's GPUs through NVML (nvidia-ml-py) into a `NodeSnapshot`
(docs/design.md, "Telemetry model"–§5, docs/agent-backends.md).

Read-only by construction: this backend never changes a GPU's settings. It makes no
nvmlDeviceSet* call, enables no GPM streaming, clears no counter; every NVML call goes
through `NvmlAdapter` (nvml_adapter.py), which wraps query functions only.

What the metric catalogue names is what is read, each value through the row's NVML source
(scale applied, sentinels → None):

- plain device queries (power mW → W, temperature °C, clocks, fan, energy mJ → J, PCIe,
  clock event reasons) one call each; memory (nvmlMemory_v2) once per unit;
- every row whose NVML source is a field id in ONE nvmlDeviceGetFieldValues per GPU;
- GPM rows (Hopper and newer) from two GPM samples: the backend keeps each unit's previous
  sample between collects, so the first collect of a unit has no interval yet and its GPM
  values are None ("cannot say"); per MIG GPU instance through nvmlGpmMigSampleGet;
- MIG instances (nvmlDeviceGetMigDeviceHandleByIndex) as their own units with per-MIG rows
  only (memory, GPM); device-only rows stay on the parent GPU's unit;
- XID errors from an NVML event set drained (timeout 0) each collect, counted since the
  backend started into `gpu.xid_errors_total` (one series per `xid`) and `gpu.xid_last_code`;
  on a MIG GPU an event NVML attributes to a GPU instance (`gpuInstanceId`) is counted on
  that instance's unit (its MIG UUID, looked up by instance id), so the server can judge
  the instance alone (docs/operations.md, "MIG instances"); an instance id the backend
  cannot map to a MIG UUID is counted on the GPU;
- processes (compute processes and their SM utilisation) every `process_every`-th collect,
  on the unit they run on (MIG: by GPU instance id); other snapshots carry no processes.
  Each process's name and claims (container, pod, namespace, Slurm job, claimed allocation,
  tags) come from the `Attributor` (attribution.py, docs/attribution.md), which reads the
  node's /proc and the `gpufleet.tag` spool; the server checks the claims against bindings.

`discover()` reads the node's registration from NVML (GPUs, PCI ids, MIG instances with
profile and placement); the host's own facts come from `host.read_host()`. There is no
`apply_desired_state()`: creating MIG instances would change the GPU.

Absent vs None (wire.telemetry): a row the GPU's architecture does not have is absent; a
row NVML answers "not supported / not found / no permission / no data" is None, never 0.
Any other error on one value is None plus one `problems` line per (call, error) per collect;
NVML_ERROR_GPU_IS_LOST makes the whole GPU's values None with a problem line. Only a missing
library or driver stops a collect: `NvmlUnavailable`, with what to install or check.
"""

from __future__ import annotations

import contextlib
import importlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from gpufleet.agent.attribution import Attributor
from gpufleet.agent.backend import SourceUnavailable
from gpufleet.agent.host import HostFacts, read_host
from gpufleet.agent.nvml_adapter import (
    ERROR_DRIVER_NOT_LOADED,
    ERROR_GPU_IS_LOST,
    ERROR_LIBRARY_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    NvmlAdapter,
    NvmlCallError,
    ProcessInfo,
)
from gpufleet.clock import Clock, SystemClock
from gpufleet.domain.telemetry.catalogue import CATALOGUE
from gpufleet.domain.telemetry.metric import Metric
from gpufleet.domain.telemetry.sources import NvmlSource, nvml_error_is_missing
from gpufleet.domain.telemetry.vocabulary import ALL_ARCHITECTURES, Architecture
from gpufleet.text_limits import clip
from gpufleet.wire.agent import GpuReport, MigInstanceReport, NodeRegistration
from gpufleet.wire.telemetry import LabelledValue, NodeSnapshot, ProcessSnapshot, UnitSnapshot

BACKEND = "nvml"
DEFAULT_PROCESS_EVERY = 5
# A call a GPU answered NOT_SUPPORTED is asked again only this often (in collects): support
# does not change while the driver runs, and an unsupported call still costs (a fan speed on
# a passively cooled H200: 0.27 ms). Asked again now and then in case a MIG change altered it.
RECHECK_UNSUPPORTED_EVERY = 360
# Lifetime counters that cost far more than the other readings, read on the slow ticks only
# (every `process_every` collects, with the processes) and held in between, as DCGM's field
# cache holds a value between its updates: a counter loses no increase when read less often,
# and the agent's /metrics keeps the series. The total energy costs ~3.9 ms of CPU per read
# on an H200, more than half of a collect (BENCHMARKS.md, "Agent on real NVML").
SLOW_COUNTERS = frozenset({"gpu.energy_joules_total"})
MAX_EVENTS_PER_COLLECT = 1024

# nvmlDeviceArchitecture_t -> catalogue architecture (pynvml NVML_DEVICE_ARCH_*).
ARCHITECTURES = {5: Architecture.VOLTA, 6: Architecture.TURING, 7: Architecture.AMPERE,
                 8: Architecture.ADA, 9: Architecture.HOPPER, 10: Architecture.BLACKWELL}

_SPECIAL_CALLS = {"nvmlDeviceGetFieldValues", "nvmlGpmMetricsGet", "nvmlEventSetWait",
                  "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates",
                  "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetComputeRunningProcesses"}
_NVML_ROWS = tuple(m for m in CATALOGUE if m.nvml is not None)
PLAIN = tuple(m for m in _NVML_ROWS if m.nvml.call not in _SPECIAL_CALLS)
FIELDS = tuple(m for m in _NVML_ROWS if m.nvml.call == "nvmlDeviceGetFieldValues")
GPM = tuple(m for m in _NVML_ROWS if m.nvml.is_gpm)
MEMORY = tuple(m for m in _NVML_ROWS if m.nvml.call == "nvmlDeviceGetMemoryInfo")
UTILIZATION = tuple(m for m in _NVML_ROWS if m.nvml.call == "nvmlDeviceGetUtilizationRates")
XID_LAST = "gpu.xid_last_code"
XID_TOTAL = "gpu.xid_errors_total"
PROCESS_MEMORY = next(m for m in _NVML_ROWS if m.name == "process.memory_used_bytes")
PROCESS_SM = next(m for m in _NVML_ROWS if m.name == "process.sm_utilization")
GPM_ARCHITECTURES = Architecture.since(Architecture.HOPPER)


class NvmlUnavailable(SourceUnavailable):
    """NVML cannot be used on this node: no nvidia-ml-py, no libnvidia-ml, no driver."""


class _GpuLost(Exception):
    pass


def _supported(source: NvmlSource, arch: Architecture | None) -> bool:
    if arch is None:  # pre-Volta or newer than the catalogue: only rows for every arch
        return source.architectures == ALL_ARCHITECTURES
    return source.supports(arch)


def _member(metric: Metric) -> str:
    return metric.name.removeprefix("gpu.memory_").removesuffix("_bytes")


def _xid_series(gpu: _Gpu, mig_uuid: str | None) -> list[LabelledValue]:
    """The XID counters of the GPU's own events (None) or of those naming `mig_uuid`."""
    return [LabelledValue(metric=XID_TOTAL, labels={"xid": str(code)}, value=float(n))
            for (mig, code), n in sorted(gpu.xid_counts.items(),
                                         key=lambda item: (item[0][0] or "", item[0][1]))
            if mig == mig_uuid]


def mig_profile_of(name: str) -> str | None:
    """The profile in a MIG device's name ("NVIDIA H100 80GB HBM3 MIG 1g.10gb" → 1g.10gb)."""
    _, sep, profile = name.rpartition(" MIG ")
    return profile.strip() or None if sep else None


@dataclass
class _GpmPair:
    previous: Any = None
    spare: Any = None


@dataclass
class _Gpu:
    handle: Any
    uuid: str
    arch: Architecture | None
    gpm: bool = False
    xid: bool = False
    # (MIG UUID the event named, or None: the GPU's, XID code) → events since start
    xid_counts: Counter[tuple[str | None, int]] = field(default_factory=Counter)
    xid_last: int | None = None
    mig_by_gi: dict[int, str] = field(default_factory=dict)  # GPU instance id → MIG UUID
    gpm_samples: dict[int | None, _GpmPair] = field(default_factory=dict)
    process_since_us: int = 0
    not_supported: set[str] = field(default_factory=set)  # metric names, see RECHECK_…
    held: dict[str, float | None] = field(default_factory=dict)  # SLOW_COUNTERS' last reads


class NvmlBackend:
    """A `TelemetrySource` over NVML. `lib` is a `pynvml`-shaped module (default: import
    pynvml); NVML is initialised on the first collect and shut down by `close()`.
    `attributor` says who each GPU process is (default: an `Attributor` over /proc)."""

    name = BACKEND

    def __init__(self, node: str, *, lib: Any = None, process_every: int = DEFAULT_PROCESS_EVERY,
                 clock: Clock | None = None,
                 host: Callable[[], HostFacts] = read_host,
                 attributor: Attributor | None = None):
        if process_every < 1:
            raise ValueError("process_every is a number of collects, at least 1")
        self.node = node
        self.process_every = process_every
        self._lib = lib
        self._clock = clock or SystemClock()
        self._host = host
        self._attributor = attributor
        self._nvml: NvmlAdapter | None = None
        self._gpus: list[_Gpu] = []
        self._events: Any = None
        self._collects = 0
        self._problems: Counter[str] = Counter()

    # -- life -----------------------------------------------------------------------------
    def _start(self) -> NvmlAdapter:
        if self._nvml is not None:
            return self._nvml
        lib = self._lib
        if lib is None:
            try:
                lib = importlib.import_module("pynvml")
            except ImportError as exc:
                raise NvmlUnavailable(
                    f"nvml backend: the Python package nvidia-ml-py is not installed ({exc}). "
                    "Install it in the agent's environment (pip install nvidia-ml-py), or run "
                    "the agent with --backend dcgm-exporter") from exc
        nvml = NvmlAdapter(lib)
        try:
            nvml.init()
        except NvmlCallError as exc:
            raise NvmlUnavailable(_init_message(exc)) from exc
        try:
            self._gpus = [self._open(nvml, i) for i in range(nvml.device_count())]
        except NvmlCallError as exc:
            _quietly(nvml.shutdown)
            raise NvmlUnavailable(f"nvml backend: NVML initialised but the GPUs could not be "
                                  f"listed ({exc}); check nvidia-smi on this node") from exc
        self._events = self._query(nvml.event_set)
        for gpu in self._gpus:
            if self._events is not None:
                try:
                    gpu.xid = self._query(nvml.register_xid, gpu.handle, self._events,
                                          default=False, on_success=True)
                except _GpuLost:
                    gpu.xid = False
        self._nvml = nvml
        return nvml

    def _open(self, nvml: NvmlAdapter, index: int) -> _Gpu:
        handle = nvml.device(index)
        gpu = _Gpu(handle, nvml.uuid(handle), None)
        try:
            gpu.arch = ARCHITECTURES.get(self._query(nvml.architecture, handle, default=-1))
            if gpu.arch in GPM_ARCHITECTURES:
                gpu.gpm = self._query(nvml.gpm_supported, handle, default=False)
        except _GpuLost:
            pass  # every collect says so
        return gpu

    def close(self) -> None:
        nvml, self._nvml = self._nvml, None
        if nvml is None:
            return
        for gpu in self._gpus:
            self._forget_gpm(nvml, gpu, live=set())
        if self._events is not None:
            _quietly(nvml.free_event_set, self._events)
        _quietly(nvml.shutdown)
        self._gpus, self._events = [], None

    def __enter__(self) -> NvmlBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the one query function -------------------------------------------------------------
    def _query(self, fn: Callable[..., Any], *args: Any, default: Any = None,
               on_success: Any = ..., not_supported: Callable[[], None] | None = None) -> Any:
        """fn(*args); `default` where NVML has no such value (nvml_error_is_missing) or on
        another error (then one problem line per call and error this collect); a lost GPU
        raises _GpuLost for the caller's GPU. `not_supported` is called on that answer."""
        try:
            result = fn(*args)
        except NvmlCallError as exc:
            if exc.code == ERROR_GPU_IS_LOST:
                raise _GpuLost(str(exc)) from None
            if exc.code == ERROR_NOT_SUPPORTED and not_supported is not None:
                not_supported()
            if not nvml_error_is_missing(exc.code):
                self._problems[str(exc)] += 1
            return default
        return result if on_success is ... else on_success

    def _value(self, source: NvmlSource, code: int, raw: Any) -> float | None:
        if code == 0:
            return source.to_catalogue_value(raw)
        if code == ERROR_GPU_IS_LOST:
            raise _GpuLost(f"{source.call}: GPU is lost (NVML error {code})")
        if not nvml_error_is_missing(code):
            self._problems[f"{source.call} {source.constant}: NVML error {code}"] += 1
        return None

    # -- discovery ------------------------------------------------------------------------
    def discover(self) -> NodeRegistration:
        """The node's inventory as registration sends it: every GPU NVML lists, with its
        name and PCI device id (the server resolves the model from them, gpu_models), and
        each MIG instance with profile, placement, GPU / compute instance ids and MIG UUID.
        A lost GPU is left out (NVML cannot describe it); NvmlUnavailable as for collect."""
        nvml = self._start()
        host = self._host()
        driver = self._query(nvml.driver_version)
        gpus = []
        for index, gpu in enumerate(self._gpus):
            try:
                gpus.append(self._gpu_report(nvml, index, gpu, driver))
            except _GpuLost:
                continue
        self._problems.clear()  # discovery's misses are not the next collect's
        return NodeRegistration(
            machine_id=host.machine_id, hostname=host.hostname, cpu_cores=host.cpu_cores,
            memory_bytes=host.memory_bytes, backend=BACKEND, os_name=host.os_name,
            driver_version=driver, gpus=gpus, applies_mig_plans=False)

    def _gpu_report(self, nvml: NvmlAdapter, index: int, gpu: _Gpu, driver: str | None,
                    ) -> GpuReport:
        name = self._query(nvml.name, gpu.handle, default="") or "unknown"
        pci_device_id, pci_bus_id = self._query(nvml.pci, gpu.handle, default=(None, None))
        total = self._query(nvml.memory, gpu.handle, default={}).get("total")
        instances = []
        for mig_uuid, gi, profile, mh in self._migs(nvml, gpu):
            placement = self._query(nvml.gpu_instance_placement, gpu.handle, gi)
            if placement is None:
                continue
            profile_id, start, size = placement
            instances.append(MigInstanceReport(
                profile_id=profile_id, placement_start=start, placement_size=size,
                profile_name=profile, mig_uuid=mig_uuid, gpu_instance_id=gi,
                compute_instance_id=self._query(nvml.compute_instance_id, mh),
                memory_bytes=self._query(nvml.memory, mh, default={}).get("total") or None))
        return GpuReport(
            uuid=gpu.uuid, index=index, name=name, pci_device_id=pci_device_id,
            pci_bus_id=pci_bus_id, memory_bytes=total or None, driver_version=driver,
            mig_enabled=bool(self._query(nvml.mig_enabled, gpu.handle, default=False)),
            mig_instances=instances)

    # -- one collect ------------------------------------------------------------------------
    def collect(self) -> NodeSnapshot:
        """One snapshot of every GPU and MIG instance; NvmlUnavailable when NVML cannot be
        used at all (the agent reports it and tries again next tick)."""
        nvml = self._start()
        at = self._clock.now()
        with_processes = self._collects % self.process_every == 0
        if self._collects % RECHECK_UNSUPPORTED_EVERY == 0:
            for gpu in self._gpus:
                gpu.not_supported.clear()
        self._collects += 1
        if with_processes:
            self._attribution().collect_garbage_if_due()
        self._drain_xids(nvml)
        units: list[UnitSnapshot] = []
        lost: list[str] = []
        for gpu in self._gpus:
            try:
                units.extend(self._read_gpu(nvml, gpu, with_processes))
            except _GpuLost as exc:
                lost.append(f"GPU {gpu.uuid} is lost ({exc}): all its values are missing; "
                            "the GPU needs a reset or the node a reboot (check dmesg for XIDs)")
                gpu.gpm_samples.clear()
                units.append(UnitSnapshot(gpu_uuid=gpu.uuid,
                                          values=dict.fromkeys(_device_names(gpu), None)))
        problems = [*lost, *(f"{text}" + (f" (x{n})" if n > 1 else "")
                             for text, n in self._problems.items())]
        self._problems.clear()
        return NodeSnapshot(node=self.node, at=at, backend=BACKEND, units=tuple(units),
                            problems=tuple(clip(p) for p in problems))

    def _drain_xids(self, nvml: NvmlAdapter) -> None:
        if self._events is None:
            return
        by_uuid = {gpu.uuid: gpu for gpu in self._gpus}
        for _ in range(MAX_EVENTS_PER_COLLECT):
            try:
                event = self._query(nvml.next_xid, self._events)
            except _GpuLost as exc:
                self._problems[f"reading XID events: {exc}"] += 1
                return
            if event is None:
                return
            gpu = by_uuid.get(event[0])
            if gpu is not None and event[1] >= 0:
                gpu.xid_counts[(self._mig_of(nvml, gpu, event[2]), event[1])] += 1
                gpu.xid_last = event[1]

    def _mig_of(self, nvml: NvmlAdapter, gpu: _Gpu, gi: int | None) -> str | None:
        """The MIG UUID of GPU instance `gi` (None: the GPU's own). An instance the last
        collect did not see (created since) is looked up once more; one still unknown
        leaves the event on the GPU rather than guess."""
        if gi is None:
            return None
        if gi not in gpu.mig_by_gi:
            try:
                gpu.mig_by_gi = {g: u for u, g, _, _ in self._migs(nvml, gpu)}
            except _GpuLost:
                return None
        return gpu.mig_by_gi.get(gi)

    def _read_gpu(self, nvml: NvmlAdapter, gpu: _Gpu, with_processes: bool,
                  ) -> list[UnitSnapshot]:
        h = gpu.handle
        values: dict[str, float | None] = {}
        labelled: list[LabelledValue] = []
        for m in PLAIN:
            if not _supported(m.nvml, gpu.arch):
                continue
            if m.name in gpu.not_supported:
                values[m.name] = None
                continue
            args = () if m.nvml.constant_id is None else (m.nvml.constant_id,)
            values[m.name] = m.nvml.to_catalogue_value(self._query(
                nvml.call, m.nvml.call, h, *args,
                not_supported=lambda name=m.name: gpu.not_supported.add(name)))
        for m in UTILIZATION:
            values[m.name] = m.nvml.to_catalogue_value(self._query(nvml.utilization_gpu, h))
        values.update(self._memory(nvml, h))
        values.update(self._fields(nvml, gpu, slow_tick=with_processes))
        if gpu.xid:
            values[XID_LAST] = None if gpu.xid_last is None else float(gpu.xid_last)
            labelled += _xid_series(gpu, None)
        else:
            values[XID_LAST] = None
        migs = self._migs(nvml, gpu)
        gpu.mig_by_gi = {gi: mig_uuid for mig_uuid, gi, _, _ in migs}
        self._forget_gpm(nvml, gpu, {None, *(gi for _, gi, _, _ in migs)})
        if gpu.arch in GPM_ARCHITECTURES:
            gpm, gpm_labelled = self._gpm(nvml, gpu, None, per_mig_only=False)
            values.update(gpm)
            labelled += gpm_labelled
        processes = self._processes(nvml, gpu) if with_processes else {}
        units = [UnitSnapshot(gpu_uuid=gpu.uuid, values=values, labelled=tuple(labelled),
                              processes=processes.get(None, ()))]
        for mig_uuid, gi, profile, mh in migs:
            mig_values = self._memory(nvml, mh)
            if gpu.arch in GPM_ARCHITECTURES:
                mig_values.update(self._gpm(nvml, gpu, gi, per_mig_only=True)[0])
            units.append(UnitSnapshot(gpu_uuid=gpu.uuid, mig_uuid=mig_uuid, mig_profile=profile,
                                      gpu_instance_id=gi, values=mig_values,
                                      labelled=tuple(_xid_series(gpu, mig_uuid)),
                                      processes=processes.get(gi, ())))
        return units

    def _memory(self, nvml: NvmlAdapter, handle: Any) -> dict[str, float | None]:
        info = self._query(nvml.memory, handle, default={})
        return {m.name: m.nvml.to_catalogue_value(info.get(_member(m))) for m in MEMORY}

    def _fields(self, nvml: NvmlAdapter, gpu: _Gpu, *, slow_tick: bool,
                ) -> dict[str, float | None]:
        """The field values in one call; the SLOW_COUNTERS read on slow ticks only and
        held in between."""
        rows = [m for m in FIELDS if _supported(m.nvml, gpu.arch)
                and (slow_tick or m.name not in SLOW_COUNTERS)]
        if not rows:
            return dict(gpu.held)
        answers = self._query(nvml.field_values, gpu.handle,
                              [(m.nvml.constant_id, 0) for m in rows], default=[])
        out: dict[str, float | None] = dict.fromkeys((m.name for m in rows), None)
        for m, (code, raw) in zip(rows, answers, strict=False):
            out[m.name] = self._value(m.nvml, code, raw)
        if slow_tick:
            gpu.held = {name: out[name] for name in SLOW_COUNTERS if name in out}
        return {**gpu.held, **out}

    def _migs(self, nvml: NvmlAdapter, gpu: _Gpu) -> list[tuple[str, int, str | None, Any]]:
        if not self._query(nvml.mig_enabled, gpu.handle, default=False):
            return []
        found = []
        for mh in self._query(nvml.mig_devices, gpu.handle, default=[]):
            mig_uuid = self._query(nvml.uuid, mh)
            gi = self._query(nvml.gpu_instance_id, mh)
            if mig_uuid is None or gi is None:
                continue
            name = self._query(nvml.name, mh, default="")
            found.append((mig_uuid, gi, mig_profile_of(name), mh))
        return found

    def _forget_gpm(self, nvml: NvmlAdapter, gpu: _Gpu, live: set[int | None]) -> None:
        """Free the GPM samples of GPU instances that no longer exist (a MIG layout change)."""
        for gi in [gi for gi in gpu.gpm_samples if gi not in live]:
            pair = gpu.gpm_samples.pop(gi)
            for sample in (pair.previous, pair.spare):
                if sample is not None:
                    _quietly(nvml.gpm_free, sample)

    def _gpm(self, nvml: NvmlAdapter, gpu: _Gpu, gi: int | None, *, per_mig_only: bool,
             ) -> tuple[dict[str, float | None], list[LabelledValue]]:
        requests, ids = _gpm_plan(gpu.arch, per_mig_only)
        answers: list[tuple[int, float | None]] | None = None
        if gpu.gpm:
            answers = self._gpm_answers(nvml, gpu, gi, ids)
        values: dict[str, float | None] = {}
        labelled: list[LabelledValue] = []
        for i, (m, link, _) in enumerate(requests):
            value = None if answers is None else self._value(m.nvml, *answers[i])
            if link is None:
                values[m.name] = value
            else:
                labelled.append(LabelledValue(metric=m.name, labels={"link": str(link)},
                                              value=value))
        return values, labelled

    def _gpm_answers(self, nvml: NvmlAdapter, gpu: _Gpu, gi: int | None, ids: list[int],
                     ) -> list[tuple[int, float | None]] | None:
        pair = gpu.gpm_samples.setdefault(gi, _GpmPair())
        if pair.spare is None:
            pair.spare = self._query(nvml.gpm_alloc)
            if pair.spare is None:
                return None
        current = pair.spare
        if self._query(nvml.gpm_sample, gpu.handle, current, gi, default=False,
                       on_success=True) is False:
            return None
        previous, pair.previous, pair.spare = pair.previous, current, pair.previous
        if previous is None:
            return None  # the first sample: no interval yet
        return self._query(nvml.gpm_metrics, previous, current, ids)

    def _processes(self, nvml: NvmlAdapter, gpu: _Gpu,
                   ) -> dict[int | None, tuple[ProcessSnapshot, ...]]:
        infos: list[ProcessInfo] = self._query(nvml.compute_processes, gpu.handle, default=[])
        if not infos:
            return {}
        samples = self._query(nvml.process_utilization, gpu.handle, gpu.process_since_us,
                              default=[])
        latest: dict[int, Any] = {}
        for s in samples:
            if s.pid not in latest or s.timestamp_us >= latest[s.pid].timestamp_us:
                latest[s.pid] = s
        if samples:
            gpu.process_since_us = max(s.timestamp_us for s in samples)
        by_unit: dict[int | None, list[ProcessSnapshot]] = {}
        for p in infos:
            sample = latest.get(p.pid)
            by_unit.setdefault(p.gpu_instance_id, []).append(ProcessSnapshot(pid=p.pid, values={
                PROCESS_MEMORY.name: PROCESS_MEMORY.nvml.to_catalogue_value(p.used_memory),
                PROCESS_SM.name: None if sample is None
                else PROCESS_SM.nvml.to_catalogue_value(sample.sm_util)},
                **self._attribution().attribute(p.pid).snapshot_fields()))
        return {gi: tuple(ps) for gi, ps in by_unit.items()}

    def _attribution(self) -> Attributor:
        if self._attributor is None:
            self._attributor = Attributor()
        return self._attributor


@cache
def _gpm_plan(arch: Architecture | None, per_mig_only: bool,
              ) -> tuple[tuple[tuple[Metric, int | None, int], ...], list[int]]:
    """The GPM requests of a unit: (row, link, metric id) each, and the ids alone."""
    requests = tuple((m, link, cid) for m in GPM if _supported(m.nvml, arch)
                     and (m.nvml.per_mig or not per_mig_only)
                     for link, cid in _gpm_ids(m.nvml))
    return requests, [cid for _, _, cid in requests]


def _gpm_ids(source: NvmlSource) -> list[tuple[int | None, int | None]]:
    """(link, GPM metric id) of a GPM row: one per link for a per-link family."""
    if source.link_constant_ids:
        return list(enumerate(source.link_constant_ids))
    return [(None, source.constant_id)]


def _device_names(gpu: _Gpu) -> list[str]:
    names = [m.name for m in _NVML_ROWS
             if not m.name.startswith("process.") and not m.labels
             and _supported(m.nvml, gpu.arch)]
    return names


def _init_message(exc: NvmlCallError) -> str:
    if exc.code == ERROR_LIBRARY_NOT_FOUND:
        return ("nvml backend: libnvidia-ml.so.1 was not found (NVML error 12). Install the "
                "NVIDIA driver on this node (it ships the library), or run the agent with "
                "--backend dcgm-exporter")
    if exc.code == ERROR_DRIVER_NOT_LOADED:
        return ("nvml backend: the NVIDIA kernel driver is not loaded (NVML error 9). Check "
                "`nvidia-smi` and `lsmod | grep nvidia`; load it (modprobe nvidia) or "
                "reinstall the driver")
    return f"nvml backend: nvmlInit failed ({exc}); check `nvidia-smi` on this node"


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(NvmlCallError):
        fn(*args)

