"""Rules as Prometheus alerting rules over dcgm-exporter names."""

from __future__ import annotations

import yaml

from gpufleet.domain.operations.prometheus_rules import alert_name, prometheus_rules
from gpufleet.domain.operations.rule_files import default_rules
from gpufleet.domain.operations.rules import rule_from_mapping


def exported(*bodies) -> tuple[list[dict], str]:
    text = prometheus_rules([rule_from_mapping({"name": f"r{n}", **b})
                             for n, b in enumerate(bodies)])
    return yaml.safe_load(text)["groups"][0]["rules"], text


def test_thresholds_are_in_the_exporters_raw_units():
    [rule], _ = exported({"kind": "threshold", "metric": "gpu.memory_used_bytes", "op": ">",
                          "value": 2 * 1024**3, "for": "5m", "labels": {"team": "ml"},
                          "matchers": ["node=~gpu-.*"], "summary": "{gpu}: {value}"})
    assert rule["expr"] == 'DCGM_FI_DEV_FB_USED{Hostname=~"gpu-.*"} > 2048'  # MiB
    assert rule["for"] == "5m"
    assert rule["labels"] == {"severity": "warning", "team": "ml"}
    assert rule["annotations"]["summary"] == "{{ $labels.UUID }}: {{ $value | humanize }}"
    [ratio], _ = exported({"kind": "threshold", "metric": "gpu.sm_active", "op": "<",
                           "value": 5, "over_time": "mean", "over": "30m"})
    assert ratio["expr"] == "avg_over_time(DCGM_FI_PROF_SM_ACTIVE[30m]) < 0.05"  # 0–1


def test_aggregation_and_absence():
    [node, gone], _ = exported(
        {"kind": "threshold", "metric": "gpu.temperature_celsius", "op": ">=", "value": 80,
         "across": "max", "by": ["node"], "group_by": ["rule", "node"]},
        {"kind": "absence", "metric": "gpu.temperature_celsius", "after": "10m"})
    assert node["expr"] == "max by (Hostname) (DCGM_FI_DEV_GPU_TEMP) >= 80"
    assert gone["expr"] == ("max_over_time(DCGM_FI_DEV_GPU_TEMP[70m]) unless "
                            "max_over_time(DCGM_FI_DEV_GPU_TEMP[10m])")


def test_what_the_exporter_cannot_say_is_skipped_with_a_reason():
    rules, text = exported(
        {"kind": "efficiency", "value": 20},
        {"kind": "threshold", "metric": "gpu.workload_claimed", "op": "==", "value": 1},
        {"kind": "threshold", "metric": "gpu.sm_active", "op": "<", "value": 1,
         "matchers": ["project=vision"]},
        {"kind": "threshold", "metric": "gpu.sm_active", "op": "<", "value": 1,
         "enabled": False})
    assert rules == []
    assert "#   r0: a project's efficiency needs the binding intervals" in text
    assert "#   r1: gpu.workload_claimed is gpufleet's own metric" in text
    assert "#   r2: matcher project=vision: dcgm-exporter has no 'project' label" in text
    assert "#   r3: disabled" in text


def test_the_default_pack():
    rules = yaml.safe_load(prometheus_rules(default_rules()))["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {
        "GpuMemorySaturation", "GpuThermalNearSlowdown", "GpuThrottlingSustained",
        "GpuXidError", "GpuEccUncorrectable", "GpuRemappedRowsPending",
        "GpuRowRemapFailed", "GpuNvlinkErrors"}
    throttle = next(r for r in rules if r["alert"] == "GpuThrottlingSustained")
    assert throttle["expr"].count("% 2 == 1") == 4  # bits 0x08, 0x20, 0x40, 0x80
    assert alert_name("gpu-xid_error.x") == "GpuXidErrorX"
