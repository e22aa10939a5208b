"""Catalogue rows, part 2: sensors, state (flags and codes) and lifetime counters — the
health side. None of these exists per MIG instance: they belong to the parent GPU
(docs/design.md, "Telemetry model").

Sources as in `catalogue_rows`: DCGM names and ids from NVIDIA/DCGM dcgm_fields.py, types
from dcgm_fields.cpp; NVML constants from nvidia-ml-py 13.615.71; the XID counter name from
dcgm-exporter (DCGM_EXP_XID_ERRORS_TOTAL, label `xid`, derived by the exporter from
DCGM_FI_DEV_XID_ERRORS).
"""

from __future__ import annotations

from typing import Any

from gpufleet.domain.telemetry.catalogue_rows import AMPERE_AND_NEWER, DEVICE, VOLTA_AND_NEWER
from gpufleet.domain.telemetry.metric import Metric
from gpufleet.domain.telemetry.sources import DcgmSource, Encoding, NvmlSource
from gpufleet.domain.telemetry.vocabulary import Architecture, MetricClass, Unit

# Bits of gpu.clock_throttle_reasons: NVML nvmlClocksEventReason* = DCGM
# DCGM_CLOCKS_EVENT_REASON_* ("a 1:1 map", dcgm_fields.py). NVML adds 0x200 board limit and
# 0x400 reliability (pynvml nvmlClocksThrottleReason*).
CLOCK_THROTTLE_REASON_BITS = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}


def _field(constant: str, constant_id: int, raw_unit: str = "count", *,
           encoding: Encoding = Encoding.NVML_ULONGLONG, scale: float = 1.0,
           architectures: frozenset[Architecture] = VOLTA_AND_NEWER, notes: str = "",
           ) -> NvmlSource:
    return NvmlSource("nvmlDeviceGetFieldValues", raw_unit, encoding, constant, constant_id,
                      scale=scale, architectures=architectures, notes=notes)


def _dcgm(field: str, field_id: int, raw_unit: str = "count", **kwargs: Any) -> DcgmSource:
    return DcgmSource(field, field_id, raw_unit, Encoding.DCGM_INT64, **kwargs)


def _counter(name: str, description: str, nvml: NvmlSource | None, dcgm: DcgmSource | None,
             **kwargs: Any) -> Metric:
    return Metric(name, Unit.COUNT, MetricClass.LIFETIME_COUNTER, DEVICE, False, description,
                  nvml=nvml, dcgm=dcgm, **kwargs)


def _sensor(name: str, unit: Unit, description: str, nvml: NvmlSource, dcgm: DcgmSource | None,
            **kwargs: Any) -> Metric:
    return Metric(name, unit, MetricClass.SENSOR, DEVICE, False, description, nvml=nvml,
                  dcgm=dcgm, **kwargs)


def _clock(name: str, which: str, clock_id: int, dcgm: DcgmSource | None,
           **kwargs: Any) -> Metric:
    return _sensor(f"gpu.{name}_clock_mhz", Unit.MHZ, f"Current {which} clock.",
                   NvmlSource("nvmlDeviceGetClockInfo", "MHz", Encoding.NVML_UINT,
                              f"NVML_CLOCK_{name.upper() if name != 'memory' else 'MEM'}",
                              clock_id),
                   dcgm, **kwargs)


SENSORS = (
    _sensor("gpu.temperature_celsius", Unit.CELSIUS, "GPU core temperature.",
            NvmlSource("nvmlDeviceGetTemperature", "°C", Encoding.NVML_UINT,
                       "NVML_TEMPERATURE_GPU", 0),
            _dcgm("DCGM_FI_DEV_GPU_TEMP", 150, "°C")),
    _sensor("gpu.memory_temperature_celsius", Unit.CELSIUS, "Device memory (HBM) temperature.",
            _field("NVML_FI_DEV_MEMORY_TEMP", 82, "°C", encoding=Encoding.NVML_UINT),
            _dcgm("DCGM_FI_DEV_MEMORY_TEMP", 140, "°C"),
            notes="Boards without a memory sensor (GDDR parts, as far as known; not verified "
                  "per model) report not supported: missing."),
    _sensor("gpu.fan_speed_percent", Unit.PERCENT,
            "Intended fan speed as a percent of the maximum.",
            NvmlSource("nvmlDeviceGetFanSpeed", "percent", Encoding.NVML_UINT),
            _dcgm("DCGM_FI_DEV_FAN_SPEED", 191, "percent"),
            notes="Passively cooled datacenter boards report not supported: missing."),
    _clock("sm", "SM", 1, _dcgm("DCGM_FI_DEV_SM_CLOCK", 100, "MHz")),
    _clock("memory", "memory", 2, _dcgm("DCGM_FI_DEV_MEM_CLOCK", 101, "MHz")),
    _clock("graphics", "graphics", 0, None,
           notes="No DCGM field: DCGM has SM, memory and video clocks (100–102) only."),
)

_XID_EVENTS = NvmlSource(
    "nvmlEventSetWait", "code", Encoding.NVML_ULONGLONG, "nvmlEventTypeXidCriticalError", 8,
    notes="register the event type with nvmlDeviceRegisterEvents; eventData is the XID")

STATES = (
    Metric("gpu.clock_throttle_reasons", Unit.FLAGS, MetricClass.STATE, DEVICE, False,
           "Why the clocks are below the maximum now: a bitmask, see "
           "CLOCK_THROTTLE_REASON_BITS (0x1 idle, 0x4 SW power cap, 0x8 HW slowdown, 0x20 / "
           "0x40 SW / HW thermal, 0x80 HW power brake, …).",
           nvml=NvmlSource("nvmlDeviceGetCurrentClocksEventReasons", "bitmask",
                           Encoding.NVML_ULONGLONG,
                           notes="older drivers: nvmlDeviceGetCurrentClocksThrottleReasons"),
           dcgm=_dcgm("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 112, "bitmask",
                      aliases=("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",))),
    Metric("gpu.xid_last_code", Unit.CODE, MetricClass.STATE, DEVICE, False,
           "The most recent XID error code reported for the GPU.",
           nvml=_XID_EVENTS,
           dcgm=_dcgm("DCGM_FI_DEV_XID_ERRORS", 230, "code",
                      notes="DCGM declares the field per compute instance; gpufleet keeps "
                            "XIDs on the parent GPU (docs/design.md, Telemetry model)"),
           notes="A last-value gauge misses XIDs between samples; gpu.xid_errors_total "
                 "counts them."),
    Metric("gpu.remapped_rows_pending", Unit.BOOLEAN, MetricClass.STATE, DEVICE, False,
           "1 while a row remapping waits for a GPU reset to take effect.",
           nvml=_field("NVML_FI_DEV_REMAPPED_PENDING", 144, "boolean",
                       architectures=AMPERE_AND_NEWER,
                       notes="or nvmlDeviceGetRemappedRows (isPending)"),
           dcgm=_dcgm("DCGM_FI_DEV_ROW_REMAP_PENDING", 396, "boolean",
                      architectures=AMPERE_AND_NEWER)),
    Metric("gpu.remapped_rows_failed", Unit.BOOLEAN, MetricClass.STATE, DEVICE, False,
           "1 once a row remapping has failed: the GPU needs service.",
           nvml=_field("NVML_FI_DEV_REMAPPED_FAILURE", 145, "boolean",
                       architectures=AMPERE_AND_NEWER,
                       notes="or nvmlDeviceGetRemappedRows (failureOccurred)"),
           dcgm=_dcgm("DCGM_FI_DEV_ROW_REMAP_FAILURE", 395, "boolean",
                      architectures=AMPERE_AND_NEWER)),
)

_NVLINK_NOTE = ("GPUs without NVLink report not supported: missing. Whether NVLink 5 "
                "(Blackwell) still fills these legacy counters is not verified "
                "(NVML_FI_DEV_NVLINK_ERROR_DL_* 161–163 are the newer ones).")


def _nvlink_errors(kind: str, what: str, nvml_id: int, dcgm_id: int) -> Metric:
    upper = kind.upper()
    return _counter(
        f"gpu.nvlink_{kind}_errors_total", f"NVLink {what} errors, all links together.",
        _field(f"NVML_FI_DEV_NVLINK_{upper}_ERROR_COUNT_TOTAL", nvml_id),
        _dcgm(f"DCGM_FI_DEV_NVLINK_{upper}_ERROR_COUNT_TOTAL", dcgm_id,
              architectures=VOLTA_AND_NEWER),
        notes=_NVLINK_NOTE)


COUNTERS = (
    Metric("gpu.energy_joules_total", Unit.JOULES, MetricClass.LIFETIME_COUNTER, DEVICE, False,
           "Energy the GPU consumed since the driver was last loaded (resets then).",
           nvml=_field("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 83, "mJ", scale=0.001,
                       notes="read with the other field values in one call: "
                             "nvmlDeviceGetTotalEnergyConsumption alone took 3.8 ms per "
                             "call on an H200 (BENCHMARKS.md, \"Agent on real NVML\")"),
           dcgm=_dcgm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156, "mJ", scale=0.001)),
    Metric("gpu.xid_errors_total", Unit.COUNT, MetricClass.LIFETIME_COUNTER, DEVICE, False,
           "XID errors seen, one series per XID code (label `xid`).",
           nvml=_XID_EVENTS, prometheus_name="DCGM_EXP_XID_ERRORS_TOTAL", labels=("xid",),
           notes="Counted by the reader since it started (gpufleet's agent from NVML events, "
                 "dcgm-exporter from DCGM_FI_DEV_XID_ERRORS): a restart is a counter reset. "
                 "On a MIG GPU, an event NVML attributes to a GPU instance "
                 "(nvmlEventData_t.gpuInstanceId) is counted on that instance's series "
                 "(mig_uuid); the GPU's total is the sum."),
    _counter("gpu.ecc_corrected_errors_total",
             "Corrected (single-bit) ECC errors, aggregate: persistent across driver reloads "
             "and reboots.",
             _field("NVML_FI_DEV_ECC_SBE_AGG_TOTAL", 5,
                    notes="or nvmlDeviceGetTotalEccErrors(CORRECTED, NVML_AGGREGATE_ECC)"),
             _dcgm("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 312),
             notes="GPUs with ECC off or without ECC report not supported: missing."),
    _counter("gpu.ecc_uncorrected_errors_total",
             "Uncorrected (double-bit) ECC errors, aggregate: persistent across driver "
             "reloads and reboots.",
             _field("NVML_FI_DEV_ECC_DBE_AGG_TOTAL", 6,
                    notes="or nvmlDeviceGetTotalEccErrors(UNCORRECTED, NVML_AGGREGATE_ECC)"),
             _dcgm("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 313),
             notes="GPUs with ECC off or without ECC report not supported: missing."),
    _counter("gpu.remapped_rows_correctable_total",
             "Memory rows remapped because of correctable errors.",
             _field("NVML_FI_DEV_REMAPPED_COR", 142, architectures=AMPERE_AND_NEWER,
                    notes="or nvmlDeviceGetRemappedRows (corrRows)"),
             _dcgm("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 394,
                   architectures=AMPERE_AND_NEWER),
             notes="Row remapping exists from Ampere on; boards without it report not "
                   "supported: missing."),
    _counter("gpu.remapped_rows_uncorrectable_total",
             "Memory rows remapped because of uncorrectable errors.",
             _field("NVML_FI_DEV_REMAPPED_UNC", 143, architectures=AMPERE_AND_NEWER,
                    notes="or nvmlDeviceGetRemappedRows (uncRows)"),
             _dcgm("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 393,
                   architectures=AMPERE_AND_NEWER),
             notes="Row remapping exists from Ampere on; boards without it report not "
                   "supported: missing."),
    _counter("gpu.pcie_replays_total", "PCIe link-level replays (retries).",
             _field("NVML_FI_DEV_PCIE_REPLAY_COUNTER", 94,
                    notes="or nvmlDeviceGetPcieReplayCounter"),
             _dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202)),
    _nvlink_errors("crc_flit", "flow-control CRC (flit)", 38, 409),
    _nvlink_errors("crc_data", "data CRC", 45, 419),
    _nvlink_errors("replay", "replay", 52, 429),
    _nvlink_errors("recovery", "recovery", 59, 439),
)
