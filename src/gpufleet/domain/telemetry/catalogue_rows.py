"""Catalogue rows, part 1: activity (percent of time or of capacity busy), memory, power,
PCIe / NVLink throughput, and per-process usage.

Where each fact comes from:
- DCGM field names, ids: NVIDIA/DCGM testing/python3/dcgm_fields.py (2025). Value types
  and entity levels (DCGM_FE_GPU_CI / DCGM_FE_GPU_I: the field exists per MIG instance):
  NVIDIA/DCGM dcgmlib/src/dcgm_fields.cpp (2022 revision).
- DCGM profiling fields are 0–1 ratios (dcgm_fields.py comments: "ratio of cycles"); the
  catalogue stores percent, so scale 100. They exist on datacenter-grade Volta and newer
  (NVIDIA/dcgm-exporter issue #5); on Hopper and newer DCGM reads them through NVML GPM
  (DCGM API reference, Profiling). Which pipes a given chip counts: `dcgmi profile --list`.
- NVML calls and constants: nvidia-ml-py 13.615.71 pynvml.py. GPM metrics are percent 0–100
  or MiB/s (pynvml comments), Hopper or newer, and per MIG GPU instance through
  nvmlGpmMigSampleGet (NVML API reference, GPM Functions).
- dcgm-exporter units: etc/default-counters.csv and etc/dcp-metrics-included.csv
  (FB in MiB, power in W, energy in mJ, PROF PCIe bytes per second).
"""

from __future__ import annotations

from gpufleet.domain.telemetry.metric import Metric
from gpufleet.domain.telemetry.sources import DcgmSource, Encoding, NvmlSource
from gpufleet.domain.telemetry.vocabulary import Architecture, MetricClass, Scope, Unit

DEVICE = (Scope.DEVICE,)
DEVICE_MIG = (Scope.DEVICE, Scope.MIG)
PROCESS = (Scope.PROCESS,)
VOLTA_AND_NEWER = Architecture.since(Architecture.VOLTA)
AMPERE_AND_NEWER = Architecture.since(Architecture.AMPERE)
HOPPER_AND_NEWER = Architecture.since(Architecture.HOPPER)
MIB = float(1024 * 1024)
NVLINK_LINKS = 18  # L0..L17 in both DCGM (1040–1075) and GPM (62–97)

_PROFILING_NOTE = "DCGM profiling (DCP) field: datacenter-grade parts only"


def _prof(field: str, field_id: int, *, per_mig: bool = True, notes: str = "") -> DcgmSource:
    return DcgmSource(field, field_id, "ratio 0-1", Encoding.DCGM_FP64, scale=100.0,
                      architectures=VOLTA_AND_NEWER, per_mig=per_mig,
                      notes="; ".join(x for x in (_PROFILING_NOTE, notes) if x))


def _gpm(constant: str, constant_id: int, *, raw_unit: str = "percent",
         scale: float = 1.0, per_mig: bool = True) -> NvmlSource:
    where = " (nvmlGpmMigSampleGet per MIG GPU instance)" if per_mig else ""
    return NvmlSource("nvmlGpmMetricsGet", raw_unit, Encoding.NVML_DOUBLE, constant,
                      constant_id, scale=scale, architectures=HOPPER_AND_NEWER,
                      per_mig=per_mig, notes=f"from two nvmlGpmSampleGet samples{where}")


def _activity(name: str, description: str, dcgm: DcgmSource, gpm: NvmlSource) -> Metric:
    return Metric(name, Unit.PERCENT, MetricClass.RELATIVE_ACTIVITY, DEVICE_MIG, True,
                  description, nvml=gpm, dcgm=dcgm)


ACTIVITY = (
    Metric("gpu.utilization", Unit.PERCENT, MetricClass.RELATIVE_ACTIVITY, DEVICE, False,
           "Percent of time one or more kernels ran on the GPU (nvidia-smi utilization.gpu). "
           "Coarse: one busy SM counts as 100 %.",
           nvml=NvmlSource("nvmlDeviceGetUtilizationRates", "percent", Encoding.NVML_UINT,
                           notes="the `gpu` member; not supported on MIG-enabled GPUs "
                                 "(NVML docs)"),
           dcgm=DcgmSource("DCGM_FI_DEV_GPU_UTIL", 203, "percent", Encoding.DCGM_INT64,
                           notes="entity level GPU only"),
           notes="Whole GPUs only (docs/design.md, Funnel and activity); MIG instances use "
                 "gr_engine_active."),
    _activity("gpu.gr_engine_active",
              "Percent of time the graphics/compute engine had a context bound and busy: the "
              "activity signal of docs/design.md, Funnel and activity.",
              _prof("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001),
              _gpm("NVML_GPM_METRIC_GRAPHICS_UTIL", 1)),
    _activity("gpu.sm_active",
              "Percent of cycles an SM had at least one warp assigned, averaged over SMs: "
              "the efficiency signal of docs/design.md, Funnel and activity.",
              _prof("DCGM_FI_PROF_SM_ACTIVE", 1002), _gpm("NVML_GPM_METRIC_SM_UTIL", 2)),
    _activity("gpu.sm_occupancy",
              "Resident warps as a percent of the theoretical maximum per elapsed cycle.",
              _prof("DCGM_FI_PROF_SM_OCCUPANCY", 1003),
              _gpm("NVML_GPM_METRIC_SM_OCCUPANCY", 3)),
    _activity("gpu.tensor_active",
              "Percent of cycles any tensor pipe was active.",
              _prof("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004),
              _gpm("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5)),
    _activity("gpu.tensor_hmma_active",
              "Percent of cycles the HMMA (half-precision matrix) tensor pipe was active.",
              _prof("DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", 1014),
              _gpm("NVML_GPM_METRIC_HMMA_TENSOR_UTIL", 7)),
    _activity("gpu.tensor_imma_active",
              "Percent of cycles the IMMA (integer matrix) tensor pipe was active.",
              _prof("DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", 1013),
              _gpm("NVML_GPM_METRIC_IMMA_TENSOR_UTIL", 9)),
    _activity("gpu.tensor_dfma_active",
              "Percent of cycles the DFMA (double-precision) tensor pipe was active.",
              _prof("DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", 1015,
                    notes="value type and MIG entity level assumed like the other pipes: "
                          "not in the dcgm_fields.cpp revision read"),
              _gpm("NVML_GPM_METRIC_DFMA_TENSOR_UTIL", 6)),
    _activity("gpu.fp64_active", "Percent of cycles the (non-tensor) FP64 pipe was active.",
              _prof("DCGM_FI_PROF_PIPE_FP64_ACTIVE", 1006),
              _gpm("NVML_GPM_METRIC_FP64_UTIL", 11)),
    _activity("gpu.fp32_active", "Percent of cycles the (non-tensor) FP32 pipe was active.",
              _prof("DCGM_FI_PROF_PIPE_FP32_ACTIVE", 1007),
              _gpm("NVML_GPM_METRIC_FP32_UTIL", 12)),
    _activity("gpu.fp16_active",
              "Percent of cycles the (non-tensor) FP16 pipe was active; HMMA not included.",
              _prof("DCGM_FI_PROF_PIPE_FP16_ACTIVE", 1008),
              _gpm("NVML_GPM_METRIC_FP16_UTIL", 13)),
    _activity("gpu.integer_active", "Percent of cycles the integer pipe was active.",
              _prof("DCGM_FI_PROF_PIPE_INT_ACTIVE", 1016,
                    notes="value type and MIG entity level assumed like the other pipes: "
                          "not in the dcgm_fields.cpp revision read"),
              _gpm("NVML_GPM_METRIC_INTEGER_UTIL", 4)),
    _activity("gpu.dram_active",
              "Percent of cycles the device-memory interface was sending or receiving data.",
              _prof("DCGM_FI_PROF_DRAM_ACTIVE", 1005,
                    notes="entity level GPU instance (per MIG GPU instance, not per compute "
                          "instance)"),
              _gpm("NVML_GPM_METRIC_DRAM_BW_UTIL", 10)),
)


def _memory(name: str, member: str, field: str, field_id: int, what: str) -> Metric:
    return Metric(
        name, Unit.BYTES, MetricClass.ABSOLUTE_USAGE, DEVICE_MIG, True, what,
        nvml=NvmlSource("nvmlDeviceGetMemoryInfo", "bytes", Encoding.NVML_ULONGLONG,
                        per_mig=True,
                        notes=f"the `{member}` member of nvmlMemory_v2 (version=nvmlMemory_v2 "
                              "reports reserved apart from used); a MIG device handle gives "
                              "the instance's memory"),
        dcgm=DcgmSource(field, field_id, "MiB", Encoding.DCGM_INT64, scale=MIB, per_mig=True,
                        notes="dcgm_fields.h says MB, dcgm-exporter says MiB: MiB taken"))


MEMORY = (
    _memory("gpu.memory_used_bytes", "used", "DCGM_FI_DEV_FB_USED", 252,
            "Device (framebuffer) memory allocated."),
    _memory("gpu.memory_free_bytes", "free", "DCGM_FI_DEV_FB_FREE", 251,
            "Device memory free to allocate."),
    _memory("gpu.memory_total_bytes", "total", "DCGM_FI_DEV_FB_TOTAL", 250,
            "Device memory installed (as the driver reports it)."),
    _memory("gpu.memory_reserved_bytes", "reserved", "DCGM_FI_DEV_FB_RESERVED", 253,
            "Device memory the driver and firmware reserve; never available to work."),
)

POWER = (
    Metric("gpu.power_usage_watts", Unit.WATTS, MetricClass.ABSOLUTE_USAGE, DEVICE, False,
           "Board power draw.",
           nvml=NvmlSource("nvmlDeviceGetPowerUsage", "mW", Encoding.NVML_UINT, scale=0.001),
           dcgm=DcgmSource("DCGM_FI_DEV_POWER_USAGE", 155, "W", Encoding.DCGM_FP64)),
    Metric("gpu.power_limit_watts", Unit.WATTS, MetricClass.ABSOLUTE_USAGE, DEVICE, False,
           "Power management limit (the configured cap). The enforced limit can be lower: "
           "nvmlDeviceGetEnforcedPowerLimit / DCGM_FI_DEV_ENFORCED_POWER_LIMIT (164).",
           nvml=NvmlSource("nvmlDeviceGetPowerManagementLimit", "mW", Encoding.NVML_UINT,
                           scale=0.001),
           dcgm=DcgmSource("DCGM_FI_DEV_POWER_MGMT_LIMIT", 160, "W", Encoding.DCGM_FP64)),
)


def _pcie(direction: str, gpm: str, gpm_id: int, field: str, field_id: int) -> Metric:
    return Metric(
        f"gpu.pcie_{direction}_bytes_per_second", Unit.BYTES_PER_SECOND,
        MetricClass.ABSOLUTE_USAGE, DEVICE, False,
        f"PCIe {direction.upper()} throughput, protocol headers and payload.",
        nvml=_gpm(gpm, gpm_id, raw_unit="MiB/s", scale=MIB, per_mig=False),
        dcgm=DcgmSource(field, field_id, "bytes/s", Encoding.DCGM_INT64,
                        architectures=VOLTA_AND_NEWER,
                        notes=f"{_PROFILING_NOTE}; a rate in bytes per second (dcgm-exporter)"),
        notes="NVML: GPM on Hopper and newer, over the interval between two collections. "
              "Before Hopper the nvml backend leaves it missing: "
              "nvmlDeviceGetPcieThroughput blocks for its 20 ms sampling window per call "
              "(measured on an H200: 42 ms of a 50 ms collection for TX and RX; "
              "BENCHMARKS.md, \"Agent on real NVML\"); the dcgm-exporter backend has it.")


def _nvlink_link_ids(first: int) -> tuple[int, ...]:
    return tuple(first + 2 * link for link in range(NVLINK_LINKS))


def _nvlink_total(direction: str, gpm: str, gpm_id: int, field: str, field_id: int) -> Metric:
    return Metric(
        f"gpu.nvlink_{direction}_bytes_per_second", Unit.BYTES_PER_SECOND,
        MetricClass.ABSOLUTE_USAGE, DEVICE, False,
        f"NVLink {direction.upper()} throughput over all links, headers and payload.",
        nvml=_gpm(gpm, gpm_id, raw_unit="MiB/s", scale=MIB, per_mig=False),
        dcgm=DcgmSource(field, field_id, "bytes/s", Encoding.DCGM_INT64,
                        architectures=VOLTA_AND_NEWER,
                        notes=f"{_PROFILING_NOTE}; a rate in bytes per second"),
        notes="GPUs without NVLink report not supported: missing.")


def _nvlink_link(direction: str, gpm_first: int, dcgm_first: int) -> Metric:
    dcgm_ids = _nvlink_link_ids(dcgm_first)
    gpm_ids = _nvlink_link_ids(gpm_first)
    upper = direction.upper()
    return Metric(
        f"gpu.nvlink_link_{direction}_bytes_per_second", Unit.BYTES_PER_SECOND,
        MetricClass.ABSOLUTE_USAGE, DEVICE, False,
        f"NVLink {upper} throughput of one link (label `link`, 0–{NVLINK_LINKS - 1}).",
        nvml=NvmlSource("nvmlGpmMetricsGet", "MiB/s", Encoding.NVML_DOUBLE,
                        f"NVML_GPM_METRIC_NVLINK_L{{link}}_{upper}_PER_SEC", gpm_ids[0],
                        scale=MIB, architectures=HOPPER_AND_NEWER, link_constant_ids=gpm_ids,
                        notes=f"ids {gpm_ids[0]} + 2 × link"),
        dcgm=DcgmSource(f"DCGM_FI_PROF_NVLINK_L{{link}}_{upper}_BYTES", dcgm_ids[0], "bytes/s",
                        Encoding.DCGM_INT64, architectures=HOPPER_AND_NEWER,
                        link_field_ids=dcgm_ids,
                        notes=f"ids {dcgm_ids[0]} + 2 × link; rate and pre-Hopper "
                              "availability not verified"),
        labels=("link",))


TRAFFIC = (
    _pcie("tx", "NVML_GPM_METRIC_PCIE_TX_PER_SEC", 20, "DCGM_FI_PROF_PCIE_TX_BYTES", 1009),
    _pcie("rx", "NVML_GPM_METRIC_PCIE_RX_PER_SEC", 21, "DCGM_FI_PROF_PCIE_RX_BYTES", 1010),
    _nvlink_total("tx", "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", 61,
                  "DCGM_FI_PROF_NVLINK_TX_BYTES", 1011),
    _nvlink_total("rx", "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", 60,
                  "DCGM_FI_PROF_NVLINK_RX_BYTES", 1012),
    _nvlink_link("tx", 63, 1040),
    _nvlink_link("rx", 62, 1041),
)

PROCESSES = (
    Metric("process.sm_utilization", Unit.PERCENT, MetricClass.RELATIVE_ACTIVITY, PROCESS,
           True,
           "Percent of time the process's kernels ran on the SMs, over NVML's sampling "
           "window: the process's own activity (zombie detection, docs/design.md, Funnel and "
           "activity).",
           nvml=NvmlSource("nvmlDeviceGetProcessUtilization", "percent", Encoding.NVML_UINT,
                           notes="the `smUtil` member of each sample; behaviour on MIG "
                                 "instances not verified"),
           notes="No DCGM field: DCGM reports per-process figures only through job stats."),
    Metric("process.memory_used_bytes", Unit.BYTES, MetricClass.ABSOLUTE_USAGE, PROCESS, True,
           "Device memory the process holds (idle-held and zombie detection).",
           nvml=NvmlSource("nvmlDeviceGetComputeRunningProcesses", "bytes",
                           Encoding.NVML_ULONGLONG, per_mig=True,
                           notes="the `usedGpuMemory` member; NVML_VALUE_NOT_AVAILABLE is "
                                 "missing; a MIG device handle lists the instance's "
                                 "processes")),
    Metric("gpu.workload_claimed", Unit.BOOLEAN, MetricClass.STATE, DEVICE_MIG, True,
           "1 while the telemetry source attributes the unit to a workload, named by the "
           "labels `pod`, `namespace`, `container`, `slurm_job`: a claim, checked against "
           "the unit's binding like a process's.",
           prometheus_name="gpufleet_gpu_workload_claimed",
           labels=("pod", "namespace", "container", "slurm_job"),
           notes="From dcgm-exporter's pod mapping and HPC job mapping labels; sources "
                 "that list processes claim per process instead."),
)
