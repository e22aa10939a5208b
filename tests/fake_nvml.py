"""A fake `pynvml`: only the functions and constants gpufleet's NvmlAdapter calls, behaving as
nvidia-ml-py 13.615.71 and the NVML API reference describe (the GPU is the one thing the
tests may fake, STYLE.md).

- Errors are `NVMLError` with the return code in `.value`; `NVMLError(code)` gives the
  code's subclass (NVMLError_LibraryNotFound, …) as pynvml's `__new__` does.
- nvmlDeviceGetFieldValues answers each (fieldId, scopeId) request with its own
  nvmlReturn / valueType / value union; the call itself succeeds.
- GPM: samples are opaque; nvmlGpmMetricsGet needs two samples of the same device (or the
  same GPU instance) taken in order, and answers per metric with nvmlReturn and value.
- nvmlEventSetWait_v2 raises NVML_ERROR_TIMEOUT when no event is pending.
- A lost GPU answers NVML_ERROR_GPU_IS_LOST to everything.

`FakeNvml.calls` records every call's name so tests can check what was (not) called.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_GPM_METRIC_MAX = 210
NVML_VALUE_NOT_AVAILABLE_ULONGLONG = 0xFFFFFFFFFFFFFFFF
ARCH_AMPERE = 7
ARCH_HOPPER = 9


class NVMLError(Exception):
    _subclasses: dict[int, type[NVMLError]] = {}

    def __new__(cls, value: int):
        if cls is NVMLError:
            cls = NVMLError._subclasses.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int):
        super().__init__(value)

    def __str__(self) -> str:
        return {3: "Not Supported", 9: "Driver Not Loaded", 10: "Timeout",
                12: "NVML Shared Library Not Found", 15: "GPU is lost"}.get(
                    self.value, "Unknown Error")


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


NVMLError._subclasses.update({NVML_ERROR_LIBRARY_NOT_FOUND: NVMLError_LibraryNotFound,
                              NVML_ERROR_DRIVER_NOT_LOADED: NVMLError_DriverNotLoaded})


@dataclass
class FakeMig:
    uuid: str
    gpu_instance_id: int
    profile: str
    profile_id: int = 19
    placement: tuple[int, int] = (0, 1)  # start, size
    memory: dict[str, int] = field(default_factory=lambda: {
        "total": 10 << 30, "used": 1 << 30, "free": 9 << 30, "reserved": 0})
    gpm: dict[int, float] = field(default_factory=dict)


@dataclass
class FakeProcess:
    pid: int
    used_memory: int | None
    gpu_instance_id: int = 0xFFFFFFFF


# The fake has no nvmlDeviceGetTotalEnergyConsumption or nvmlDeviceGetPcieThroughput: the
# backend must not call them (they cost 3.8 ms and 21 ms per call on an H200; BENCHMARKS.md,
# "Agent on real NVML"), so a call to either fails a test.
FI_TOTAL_ENERGY_CONSUMPTION = 83


@dataclass
class FakeGpu:
    """One GPU; `errors` maps a call name to the NVML error code it returns."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    pci_device_id: int = 0x233010DE
    pci_bus_id: str = "00000000:18:00.0"
    arch: int = ARCH_HOPPER
    power_mw: int = 312_500
    power_limit_mw: int = 700_000
    temperature_c: int = 54
    clocks_mhz: dict[int, int] = field(default_factory=lambda: {0: 1755, 1: 1980, 2: 2619})
    energy_mj: int = 5_000_000
    throttle: int = 0x1
    utilization: int = 40
    memory: dict[str, int] = field(default_factory=lambda: {
        "total": 80 << 30, "used": 20 << 30, "free": 59 << 30, "reserved": 1 << 30})
    # field id -> (valueType, value) or an NVML error code (int) for that field
    fields: dict[int, tuple[int, int | float] | int] = field(default_factory=dict)
    gpm_supported: bool = True
    gpm: dict[int, float] = field(default_factory=dict)  # metric id -> value
    migs: list[FakeMig] = field(default_factory=list)
    max_migs: int = 7
    processes: list[FakeProcess] = field(default_factory=list)
    process_util: dict[int, int] = field(default_factory=dict)  # pid -> smUtil
    errors: dict[str, int] = field(default_factory=dict)
    lost: bool = False


@dataclass
class _Sample:
    serial: int = 0
    owner: tuple[str, int | None] | None = None


class _MetricsGet:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0)
                        for _ in range(NVML_GPM_METRIC_MAX)]


class FakeNvml:
    """Pass an instance where `pynvml` goes: NvmlBackend(node, lib=FakeNvml([...]))."""

    NVMLError = NVMLError
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVML_GPM_METRICS_GET_VERSION = 1
    nvmlMemory_v2 = 0x02000028
    nvmlEventTypeXidCriticalError = 0x8
    c_nvmlGpmMetricsGet_t = _MetricsGet

    def __init__(self, gpus: list[FakeGpu], *, init_error: int | None = None):
        self.gpus = gpus
        self.init_error = init_error
        self.initialised = False
        self.calls: list[str] = []
        self.events: deque[tuple[int, int, int]] = deque()  # (gpu index, xid, instance)
        self.registered: set[int] = set()
        self._serial = 0
        self.samples_alloced = 0
        self.samples_freed = 0
        self.memory_v2 = True  # False: a driver without nvmlDeviceGetMemoryInfo_v2

    def __getattribute__(self, name: str) -> Any:
        found = object.__getattribute__(self, name)
        if not name.startswith("nvml") or not callable(found):
            return found
        calls = object.__getattribute__(self, "calls")

        def recorded(*args: Any) -> Any:
            calls.append(name)
            return found(*args)

        return recorded

    def inject_xid(self, gpu_index: int, code: int, gpu_instance_id: int = 0xFFFFFFFF) -> None:
        """An XID event; `gpu_instance_id`: the MIG GPU instance it is attributable to."""
        self.events.append((gpu_index, code, gpu_instance_id))

    # helpers ---------------------------------------------------------------------------------
    def _gpu(self, handle: Any, call: str) -> FakeGpu:
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        gpu = handle if isinstance(handle, FakeGpu) else handle[0]
        if gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if call in gpu.errors:
            raise NVMLError(gpu.errors[call])
        return gpu

    # life ----------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        if isinstance(handle, tuple):  # a MIG device handle: (parent, mig)
            return handle[1].uuid
        return handle.uuid  # answered even for a lost GPU: cached by the driver

    def nvmlDeviceGetName(self, handle: Any) -> str:
        gpu = self._gpu(handle, "nvmlDeviceGetName")
        return f"{gpu.name} MIG {handle[1].profile}" if isinstance(handle, tuple) else gpu.name

    def nvmlDeviceGetArchitecture(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetArchitecture").arch

    def nvmlDeviceGetPciInfo(self, handle: Any) -> SimpleNamespace:
        gpu = self._gpu(handle, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(pciDeviceId=gpu.pci_device_id, busId=gpu.pci_bus_id.encode())

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.124.06"

    # plain queries -------------------------------------------------------------------------
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerManagementLimit").power_limit_mw

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        assert sensor == 0
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature_c

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        self._gpu(handle, "nvmlDeviceGetFanSpeed")
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # passively cooled datacenter board

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetClockInfo").clocks_mhz[clock]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").throttle

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        if gpu.migs:  # NVML docs: not supported on MIG-enabled GPUs
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.utilization, memory=10)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None):
        if version and not self.memory_v2:  # pynvml: the _v2 symbol is missing
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        memory = dict(handle[1].memory if isinstance(handle, tuple) else gpu.memory)
        if not version:
            memory.pop("reserved")
        return SimpleNamespace(**memory)

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list) -> list:
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues")
        out = []
        for request in field_ids:
            field_id, scope = request if isinstance(request, tuple) else (request, 0)
            answer = gpu.fields.get(field_id, NVML_ERROR_NOT_SUPPORTED)
            if field_id == FI_TOTAL_ENERGY_CONSUMPTION and field_id not in gpu.fields:
                answer = (3, gpu.energy_mj)  # unsigned long long, as the driver answers
            value = SimpleNamespace(dVal=0.0, uiVal=0, ulVal=0, ullVal=0, sllVal=0, siVal=0,
                                    usVal=0)
            if isinstance(answer, int):
                out.append(SimpleNamespace(fieldId=field_id, scopeId=scope, nvmlReturn=answer,
                                           valueType=0, value=value))
                continue
            vtype, raw = answer
            setattr(value, ("dVal", "uiVal", "ulVal", "ullVal")[vtype], raw)
            out.append(SimpleNamespace(fieldId=field_id, scopeId=scope, nvmlReturn=0,
                                       valueType=vtype, value=value))
        return out

    # GPM -------------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> SimpleNamespace:
        gpu = self._gpu(handle, "nvmlGpmQueryDeviceSupport")
        if gpu.arch < ARCH_HOPPER:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(version=1, isSupportedDevice=int(gpu.gpm_supported))

    def nvmlGpmSampleAlloc(self) -> _Sample:
        self.samples_alloced += 1
        return _Sample()

    def nvmlGpmSampleFree(self, sample: _Sample) -> None:
        self.samples_freed += 1

    def _take(self, gpu: FakeGpu, gi: int | None, sample: _Sample) -> _Sample:
        if gpu.arch < ARCH_HOPPER or not gpu.gpm_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        self._serial += 1
        sample.serial, sample.owner = self._serial, (gpu.uuid, gi)
        return sample

    def nvmlGpmSampleGet(self, handle: Any, sample: _Sample) -> _Sample:
        return self._take(self._gpu(handle, "nvmlGpmSampleGet"), None, sample)

    def nvmlGpmMigSampleGet(self, handle: Any, gi: int, sample: _Sample) -> _Sample:
        gpu = self._gpu(handle, "nvmlGpmMigSampleGet")
        if not any(m.gpu_instance_id == gi for m in gpu.migs):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return self._take(gpu, gi, sample)

    def nvmlGpmMetricsGet(self, request: _MetricsGet) -> _MetricsGet:
        one, two = request.sample1, request.sample2
        if request.version != 1 or one is two or one.owner is None or one.owner != two.owner \
                or one.serial >= two.serial:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        uuid, gi = one.owner
        gpu = next(g for g in self.gpus if g.uuid == uuid)
        table = gpu.gpm if gi is None else next(
            m.gpm for m in gpu.migs if m.gpu_instance_id == gi)
        for metric in request.metrics[: request.numMetrics]:
            if metric.metricId in table:
                metric.nvmlReturn, metric.value = 0, table[metric.metricId]
            else:
                metric.nvmlReturn, metric.value = NVML_ERROR_NOT_SUPPORTED, 0.0
        return request

    # MIG -------------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: Any) -> tuple[int, int]:
        gpu = self._gpu(handle, "nvmlDeviceGetMigMode")
        if gpu.arch < ARCH_AMPERE:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        mode = int(bool(gpu.migs))
        return mode, mode

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount").max_migs

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> tuple:
        gpu = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if index >= len(gpu.migs):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return (gpu, gpu.migs[index])

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        if not isinstance(handle, tuple):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return handle[1].gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        if not isinstance(handle, tuple):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return 0

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi: int) -> FakeMig:
        gpu = self._gpu(handle, "nvmlDeviceGetGpuInstanceById")
        for mig in gpu.migs:
            if mig.gpu_instance_id == gi:
                return mig
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, instance: FakeMig) -> SimpleNamespace:
        start, size = instance.placement
        return SimpleNamespace(id=instance.gpu_instance_id, profileId=instance.profile_id,
                               placement=SimpleNamespace(start=start, size=size))

    # events ----------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlEventSetFree(self, event_set: object) -> None:
        pass

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: object) -> None:
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
        assert types == self.nvmlEventTypeXidCriticalError
        self.registered.add(self.gpus.index(gpu))

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0
        while self.events:
            index, code, gi = self.events.popleft()
            if index in self.registered:
                return SimpleNamespace(device=self.gpus[index], eventType=0x8, eventData=code,
                                       gpuInstanceId=gi,
                                       computeInstanceId=0 if gi != 0xFFFFFFFF else gi)
        raise NVMLError(NVML_ERROR_TIMEOUT)

    # processes -------------------------------------------------------------------------------
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list:
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_memory,
                                gpuInstanceId=p.gpu_instance_id, computeInstanceId=0)
                for p in gpu.processes]

    def nvmlDeviceGetProcessUtilization(self, handle: Any, since_us: int) -> list:
        gpu = self._gpu(handle, "nvmlDeviceGetProcessUtilization")
        if not gpu.process_util:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return [SimpleNamespace(pid=pid, timeStamp=since_us + 1000, smUtil=util, memUtil=0,
                                encUtil=0, decUtil=0)
                for pid, util in gpu.process_util.items()]
