"""The one seam between gpufleet and nvidia-ml-py (`pynvml`): every NVML call the `nvml`
backend makes goes through `NvmlAdapter`, which speaks plain Python values and one error
type, so the backend never sees ctypes structures and the tests' fake NVML stays small.

Read-only: the adapter wraps query functions only. It has no nvmlDeviceSet*, no
nvmlGpmSetStreamingEnabled, no nvmlDeviceClear* — gpufleet's agent never changes a GPU's
settings through NVML.

Behaviour taken from nvidia-ml-py 13.615.71 pynvml.py and the NVML API reference
(docs.nvidia.com/deploy/nvml-api): errors are `NVMLError` with the return code in
`.value`; nvmlDeviceGetFieldValues fills one nvmlFieldValue_t per request with its own
`nvmlReturn`, `valueType` and value union; nvmlEventSetWait_v2 raises NVML_ERROR_TIMEOUT
when no event is pending; GPM metrics are computed by nvmlGpmMetricsGet from two samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

# NVML return codes (nvml.h; the same numbers in pynvml).
SUCCESS = 0
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15

XID_CRITICAL_ERROR_EVENT = 0x8  # nvmlEventTypeXidCriticalError
MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE
NO_GPU_INSTANCE = 0xFFFFFFFF  # a process's gpuInstanceId when the GPU is not in MIG mode

# nvmlValueType_t -> the member of the nvmlValue_t union that holds the value.
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")

# Newer names first; an older driver's libnvidia-ml lacks the newer symbol.
_FALLBACKS = {
    "nvmlDeviceGetCurrentClocksEventReasons": ("nvmlDeviceGetCurrentClocksThrottleReasons",),
}


class NvmlCallError(Exception):
    """One NVML call returned an error: `code` is the NVML return code."""

    def __init__(self, code: int, call: str, text: str):
        self.code = code
        self.call = call
        super().__init__(f"{call}: {text} (NVML error {code})")


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    used_memory: int | None  # bytes; None where NVML cannot say
    gpu_instance_id: int | None  # None outside MIG mode


@dataclass(frozen=True)
class ProcessSample:
    pid: int
    timestamp_us: int
    sm_util: int


class NvmlAdapter:
    """nvidia-ml-py's functions the backend needs, over a `pynvml`-shaped module."""

    def __init__(self, lib: ModuleType | Any):
        self.lib = lib
        self._resolved: dict[str, Any] = {}
        self._metrics_get: Any = None
        self._memory_v2 = True

    def _fn(self, name: str) -> Any:
        fn = self._resolved.get(name)
        if fn is None:
            for candidate in (name, *_FALLBACKS.get(name, ())):
                fn = getattr(self.lib, candidate, None)
                if fn is not None:
                    break
            else:
                raise NvmlCallError(ERROR_FUNCTION_NOT_FOUND, name,
                                    "not in this nvidia-ml-py")
            self._resolved[name] = fn
        return fn

    def call(self, name: str, *args: Any) -> Any:
        """lib.<name>(*args), with NVMLError turned into NvmlCallError."""
        fn = self._fn(name)
        try:
            return fn(*args)
        except self.lib.NVMLError as exc:
            raise NvmlCallError(exc.value, name, str(exc)) from None

    # -- life -------------------------------------------------------------------------------
    def init(self) -> None:
        self.call("nvmlInit")

    def shutdown(self) -> None:
        self.call("nvmlShutdown")

    # -- devices ----------------------------------------------------------------------------
    def device_count(self) -> int:
        return int(self.call("nvmlDeviceGetCount"))

    def device(self, index: int) -> Any:
        return self.call("nvmlDeviceGetHandleByIndex", index)

    def uuid(self, handle: Any) -> str:
        return _text(self.call("nvmlDeviceGetUUID", handle))

    def name(self, handle: Any) -> str:
        return _text(self.call("nvmlDeviceGetName", handle))

    def architecture(self, handle: Any) -> int:
        return int(self.call("nvmlDeviceGetArchitecture", handle))

    def pci(self, handle: Any) -> tuple[int, str]:
        """(PCI device id such as 0x233010DE, bus id such as 00000000:18:00.0)."""
        info = self.call("nvmlDeviceGetPciInfo", handle)
        return int(info.pciDeviceId), _text(info.busId)

    def driver_version(self) -> str:
        return _text(self.call("nvmlSystemGetDriverVersion"))

    def utilization_gpu(self, handle: Any) -> int:
        return self.call("nvmlDeviceGetUtilizationRates", handle).gpu

    def memory(self, handle: Any) -> dict[str, int]:
        """used / free / total / reserved bytes (nvmlMemory_v2: reserved apart from used)."""
        version = getattr(self.lib, "nvmlMemory_v2", None) if self._memory_v2 else None
        try:
            info = self.call("nvmlDeviceGetMemoryInfo", handle, version)
        except NvmlCallError as exc:
            if version is None or exc.code != ERROR_FUNCTION_NOT_FOUND:
                raise
            self._memory_v2 = False  # an older driver: no _v2 symbol, no `reserved`
            info = self.call("nvmlDeviceGetMemoryInfo", handle, None)
        return {m: getattr(info, m) for m in ("used", "free", "total", "reserved")
                if hasattr(info, m)}

    def field_values(self, handle: Any, requests: Sequence[tuple[int, int]],
                     ) -> list[tuple[int, int | float | None]]:
        """(return code, raw value) per (field id, scope id) request, in order."""
        values = self.call("nvmlDeviceGetFieldValues", handle, list(requests))
        out: list[tuple[int, int | float | None]] = []
        for value in values[: len(requests)]:
            code = int(value.nvmlReturn)
            if code != SUCCESS:
                out.append((code, None))
                continue
            vtype = int(value.valueType)
            member = _VALUE_MEMBERS[vtype] if 0 <= vtype < len(_VALUE_MEMBERS) else None
            out.append((code, None if member is None else getattr(value.value, member)))
        return out

    # -- GPM (Hopper and newer) ---------------------------------------------------------------
    def gpm_supported(self, handle: Any) -> bool:
        return bool(self.call("nvmlGpmQueryDeviceSupport", handle).isSupportedDevice)

    def gpm_alloc(self) -> Any:
        return self.call("nvmlGpmSampleAlloc")

    def gpm_free(self, sample: Any) -> None:
        self.call("nvmlGpmSampleFree", sample)

    def gpm_sample(self, handle: Any, sample: Any, gpu_instance_id: int | None) -> None:
        if gpu_instance_id is None:
            self.call("nvmlGpmSampleGet", handle, sample)
        else:
            self.call("nvmlGpmMigSampleGet", handle, gpu_instance_id, sample)

    def gpm_metrics(self, older: Any, newer: Any, metric_ids: Sequence[int],
                    ) -> list[tuple[int, float | None]]:
        """(return code, value) per GPM metric id, computed over older → newer."""
        request = self._metrics_get
        if request is None:  # one request structure, reused: NVML fills it per call
            request = self._metrics_get = self.lib.c_nvmlGpmMetricsGet_t()
        request.version = self.lib.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metric_ids)
        request.sample1 = older
        request.sample2 = newer
        for i, metric_id in enumerate(metric_ids):
            request.metrics[i].metricId = metric_id
        self.call("nvmlGpmMetricsGet", request)
        answers = []
        for i in range(len(metric_ids)):
            metric = request.metrics[i]
            code = int(metric.nvmlReturn)
            answers.append((code, float(metric.value) if code == SUCCESS else None))
        return answers

    # -- MIG ----------------------------------------------------------------------------------
    def mig_enabled(self, handle: Any) -> bool:
        current, _pending = self.call("nvmlDeviceGetMigMode", handle)
        return int(current) == MIG_ENABLED

    def mig_devices(self, handle: Any) -> list[Any]:
        """The MIG device handles that exist now (indexes without one are skipped)."""
        found = []
        for index in range(int(self.call("nvmlDeviceGetMaxMigDeviceCount", handle))):
            try:
                found.append(self.call("nvmlDeviceGetMigDeviceHandleByIndex", handle, index))
            except NvmlCallError as exc:
                if exc.code != ERROR_NOT_FOUND:
                    raise
        return found

    def gpu_instance_id(self, mig_handle: Any) -> int:
        return int(self.call("nvmlDeviceGetGpuInstanceId", mig_handle))

    def compute_instance_id(self, mig_handle: Any) -> int:
        return int(self.call("nvmlDeviceGetComputeInstanceId", mig_handle))

    def gpu_instance_placement(self, handle: Any, gpu_instance_id: int) -> tuple[int, int, int]:
        """(profile id, placement start, placement size) of a GPU instance of a GPU."""
        instance = self.call("nvmlDeviceGetGpuInstanceById", handle, gpu_instance_id)
        info = self.call("nvmlGpuInstanceGetInfo", instance)
        return int(info.profileId), int(info.placement.start), int(info.placement.size)

    # -- XID events ---------------------------------------------------------------------------
    def event_set(self) -> Any:
        return self.call("nvmlEventSetCreate")

    def free_event_set(self, event_set: Any) -> None:
        self.call("nvmlEventSetFree", event_set)

    def register_xid(self, handle: Any, event_set: Any) -> None:
        self.call("nvmlDeviceRegisterEvents", handle, XID_CRITICAL_ERROR_EVENT, event_set)

    def next_xid(self, event_set: Any) -> tuple[str, int, int | None] | None:
        """(GPU UUID, XID code, GPU instance id) of the next pending XID event; None when
        none is pending. The GPU instance is the one a MIG GPU's event is attributable to
        (nvmlEventData_t.gpuInstanceId); None when the event names none (not MIG, a
        GPU-wide error, or an NVML too old to say)."""
        try:
            data = self.call("nvmlEventSetWait_v2", event_set, 0)
        except NvmlCallError as exc:
            if exc.code == ERROR_TIMEOUT:
                return None
            raise
        if int(data.eventType) != XID_CRITICAL_ERROR_EVENT:
            return ("", -1, None)
        gi = getattr(data, "gpuInstanceId", NO_GPU_INSTANCE)
        return (self.uuid(data.device), int(data.eventData),
                None if gi in (None, NO_GPU_INSTANCE) else int(gi))

    # -- processes ----------------------------------------------------------------------------
    def compute_processes(self, handle: Any) -> list[ProcessInfo]:
        found = []
        for p in self.call("nvmlDeviceGetComputeRunningProcesses", handle):
            gi = getattr(p, "gpuInstanceId", NO_GPU_INSTANCE)
            found.append(ProcessInfo(int(p.pid), p.usedGpuMemory,
                                     None if gi in (None, NO_GPU_INSTANCE) else int(gi)))
        return found

    def process_utilization(self, handle: Any, since_us: int) -> list[ProcessSample]:
        try:
            samples = self.call("nvmlDeviceGetProcessUtilization", handle, since_us)
        except NvmlCallError as exc:
            # pynvml raises NVMLError(NVML_SUCCESS) when the first call finds no sample at
            # all (it expects NVML_ERROR_INSUFFICIENT_SIZE): that is an empty list.
            if exc.code == SUCCESS:
                return []
            raise
        return [ProcessSample(int(s.pid), int(s.timeStamp), int(s.smUtil)) for s in samples]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
