"""The metric catalogue (docs/design.md, "Telemetry model"): rows are complete and consistent,
lookups round-trip, sentinels read as missing, aggregation follows the class table, and
docs/metrics.md and `gpufleet metrics` show the same catalogue."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.domain import gpu_models
from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.catalogue import (
    CATALOGUE,
    CORE,
    by_dcgm_field,
    by_prometheus_name,
    core_metrics,
    metric,
)
from gpufleet.domain.telemetry.catalogue_markdown import catalogue_markdown
from gpufleet.domain.telemetry.metric import Metric
from gpufleet.domain.telemetry.sources import (
    DCGM_FP64_BLANK,
    DCGM_INT32_BLANK,
    DCGM_INT64_BLANK,
    NVML_VALUE_NOT_AVAILABLE_UINT,
    NVML_VALUE_NOT_AVAILABLE_ULONGLONG,
    nvml_error_is_missing,
)
from gpufleet.domain.telemetry.vocabulary import (
    AcrossSeries,
    Architecture,
    MetricClass,
    OverTime,
    Scope,
    Source,
    Unit,
    architecture_of,
)
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
DOCS = REPO / "docs" / "metrics.md"
runner = CliRunner()

PARENT_ONLY_WORDS = ("temperature", "power", "energy", "clock", "fan", "ecc", "xid", "nvlink",
                     "pcie", "remapped")
GPM_ONLY_ON_HOPPER = ("gpu.tensor_active", "gpu.fp16_active", "gpu.fp32_active",
                      "gpu.fp64_active", "gpu.integer_active", "gpu.sm_occupancy")


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


# --- rows ------------------------------------------------------------------------------------

def test_names_are_unique_and_follow_the_scheme():
    names = [m.name for m in CATALOGUE]
    assert len(names) == len(set(names))
    assert all(n.startswith(("gpu.", "process.")) for n in names)


@pytest.mark.parametrize("row", CATALOGUE, ids=lambda m: m.name)
def test_every_row_has_unit_class_scope_description_and_a_source(row: Metric):
    assert isinstance(row.unit, Unit) and isinstance(row.metric_class, MetricClass)
    assert row.scopes and all(isinstance(s, Scope) for s in row.scopes)
    assert row.description
    # A row read from the GPU exists on some architecture; one gpufleet derives (a
    # workload claim from an exporter's labels) has its own exposition name instead.
    derived = row.nvml is None and row.dcgm is None
    assert row.architectures or (derived and row.prometheus.name.startswith("gpufleet_")), \
        "a row must exist on some architecture"
    assert row.prometheus.name


@pytest.mark.parametrize("row", [m for m in CATALOGUE
                                 if any(w in m.name for w in PARENT_ONLY_WORDS)],
                         ids=lambda m: m.name)
def test_parent_gpu_metrics_never_exist_per_mig(row: Metric):
    assert not row.per_mig and Scope.MIG not in row.scopes
    assert not any(s is not None and s.per_mig for s in (row.nvml, row.dcgm))


@pytest.mark.parametrize("name", ["gpu.sm_active", "gpu.gr_engine_active", "gpu.dram_active",
                                  "gpu.memory_used_bytes", "gpu.memory_total_bytes",
                                  "process.memory_used_bytes", "process.sm_utilization"])
def test_utilisation_memory_and_process_metrics_exist_per_mig(name):
    assert metric(name).per_mig


def test_gpu_utilization_is_whole_gpus_only():
    # docs/design.md, "Funnel and activity": NVML / DCGM_FI_DEV_GPU_UTIL, whole GPUs only.
    assert not metric("gpu.utilization").per_mig


def test_dcgm_profiling_ratios_become_percent():
    profiling = [m for m in CATALOGUE if m.dcgm and m.dcgm.field.startswith("DCGM_FI_PROF_")
                 and m.unit is Unit.PERCENT]
    assert len(profiling) >= 12
    for row in profiling:
        assert row.dcgm.scale == 100.0, row.name
        assert row.dcgm.to_catalogue_value(0.25) == pytest.approx(25.0)
        assert row.dcgm.supports(Architecture.VOLTA)


def test_gpm_rows_exist_on_hopper_and_newer_only():
    gpm_rows = [m for m in CATALOGUE if m.nvml and m.nvml.is_gpm]
    assert len(gpm_rows) >= 12
    for row in gpm_rows:
        assert row.nvml.architectures == {Architecture.HOPPER, Architecture.BLACKWELL}
        assert not row.nvml.supports(Architecture.AMPERE)
        assert not row.nvml.supports(Architecture.ADA)
    for name in GPM_ONLY_ON_HOPPER:
        assert metric(name).nvml.is_gpm, name


def test_per_link_nvlink_rows_carry_the_link_label_and_18_links():
    row = metric("gpu.nvlink_link_tx_bytes_per_second")
    assert row.labels == ("link",)
    fields = row.dcgm.fields()
    assert fields[0] == ("DCGM_FI_PROF_NVLINK_L0_TX_BYTES", 1040, 0)
    assert fields[17] == ("DCGM_FI_PROF_NVLINK_L17_TX_BYTES", 1074, 17)
    assert row.dcgm.link_of("DCGM_FI_PROF_NVLINK_L5_TX_BYTES") == 5
    assert row.nvml.link_constant_ids[:2] == (63, 65)


def test_xid_counter_is_labelled_by_code():
    assert metric("gpu.xid_errors_total").labels == ("xid",)
    assert metric("gpu.xid_errors_total").metric_class is MetricClass.LIFETIME_COUNTER
    assert metric("gpu.xid_last_code").metric_class is MetricClass.STATE


# --- aggregation -----------------------------------------------------------------------------

DESIGN_TABLE = {  # docs/design.md, "Telemetry model": class -> (over time, across series)
    MetricClass.RELATIVE_ACTIVITY: (OverTime.MEAN, AcrossSeries.MEAN),
    MetricClass.ABSOLUTE_USAGE: (OverTime.MEAN, AcrossSeries.SUM),
    MetricClass.LIFETIME_COUNTER: (OverTime.INCREASE, AcrossSeries.SUM),
    MetricClass.SENSOR: (OverTime.MEAN, AcrossSeries.MEAN),
    MetricClass.STATE: (OverTime.LAST, AcrossSeries.COUNT),
}


@pytest.mark.parametrize("cls", list(MetricClass), ids=lambda c: c.value)
def test_class_aggregation_matches_the_design_table(cls: MetricClass):
    assert (cls.over_time, cls.across_series) == DESIGN_TABLE[cls]


def test_the_table_extras_last_for_counters_and_max_for_sensors():
    assert MetricClass.LIFETIME_COUNTER.aggregation.also_over_time == (OverTime.LAST,)
    assert MetricClass.SENSOR.aggregation.also_across_series == (AcrossSeries.MAX,)


def test_percentages_are_never_summed():
    for row in CATALOGUE:
        if row.unit is Unit.PERCENT:
            assert row.aggregation.across_series is not AcrossSeries.SUM, row.name


def test_a_row_summing_percentages_cannot_be_declared():
    with pytest.raises(ValueError, match="never summed"):
        Metric("gpu.bad_percent", Unit.PERCENT, MetricClass.ABSOLUTE_USAGE, (Scope.DEVICE,),
               False, "a percentage declared as usage", prometheus_name="x")


def test_a_parent_only_source_cannot_claim_per_mig_on_a_device_only_metric():
    good = metric("gpu.memory_used_bytes")
    with pytest.raises(ValueError, match="per-MIG"):
        Metric("gpu.bad_bytes", Unit.BYTES, MetricClass.ABSOLUTE_USAGE, (Scope.DEVICE,), False,
               "per-MIG source on a whole-GPU metric", nvml=good.nvml)


# --- lookups ---------------------------------------------------------------------------------

@pytest.mark.parametrize("row", [m for m in CATALOGUE if m.dcgm], ids=lambda m: m.name)
def test_dcgm_fields_round_trip(row: Metric):
    for field, field_id, _ in row.dcgm.fields():
        assert by_dcgm_field(field) is row
        assert by_dcgm_field(field_id) is row
    for alias in row.dcgm.aliases:
        assert by_dcgm_field(alias) is row


@pytest.mark.parametrize("row", CATALOGUE, ids=lambda m: m.name)
def test_prometheus_names_round_trip(row: Metric):
    for name in row.prometheus.names():
        assert by_prometheus_name(name) is row
    assert metric(row.name) is row


def test_documented_field_ids():
    expected = {"DCGM_FI_DEV_GPU_UTIL": 203, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 1001,
                "DCGM_FI_PROF_SM_ACTIVE": 1002, "DCGM_FI_PROF_SM_OCCUPANCY": 1003,
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 1004, "DCGM_FI_PROF_DRAM_ACTIVE": 1005,
                "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 1006, "DCGM_FI_PROF_PIPE_FP32_ACTIVE": 1007,
                "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 1008, "DCGM_FI_PROF_PCIE_TX_BYTES": 1009,
                "DCGM_FI_PROF_PCIE_RX_BYTES": 1010, "DCGM_FI_PROF_NVLINK_TX_BYTES": 1011,
                "DCGM_FI_PROF_NVLINK_RX_BYTES": 1012}
    for field, field_id in expected.items():
        assert by_dcgm_field(field).dcgm.field_id == field_id
    assert by_dcgm_field("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS").name == "gpu.clock_throttle_reasons"
    assert by_prometheus_name("DCGM_EXP_XID_ERRORS_TOTAL").name == "gpu.xid_errors_total"


@pytest.mark.parametrize("lookup, key", [(metric, "gpu.nope"), (by_dcgm_field, "DCGM_FI_NOPE"),
                                         (by_dcgm_field, 99999),
                                         (by_prometheus_name, "nope_total")])
def test_unknown_names_are_invalid_input(lookup, key):
    with pytest.raises(InvalidInput) as caught:
        lookup(key)
    assert caught.value.code == "unknown_metric"
    assert str(key) in caught.value.message


def test_a_missing_source_is_invalid_input():
    row = metric("process.memory_used_bytes")
    assert row.source(Source.NVML) is row.nvml
    assert row.source(Source.PROMETHEUS).name == "gpufleet_process_memory_used_bytes"
    with pytest.raises(InvalidInput):
        row.source(Source.DCGM)


def test_core_is_a_small_set_of_device_metrics():
    assert 15 <= len(CORE) <= 20 and len(set(CORE)) == len(CORE)
    for row in core_metrics():
        assert Scope.DEVICE in row.scopes and not row.labels, row.name


# --- values: scale and sentinels -------------------------------------------------------------

@pytest.mark.parametrize("name, kind, raw, expected", [
    ("gpu.memory_used_bytes", Source.DCGM, 1024, 1024**3),  # MiB -> bytes
    ("gpu.memory_used_bytes", Source.PROMETHEUS, 2048, 2 * 1024**3),  # dcgm-exporter MiB
    ("gpu.memory_used_bytes", Source.NVML, 5_000, 5_000.0),
    ("gpu.power_usage_watts", Source.NVML, 250_000, 250.0),  # mW -> W
    ("gpu.power_usage_watts", Source.DCGM, 312.5, 312.5),
    ("gpu.energy_joules_total", Source.DCGM, 7_500, 7.5),  # mJ -> J
    ("gpu.energy_joules_total", Source.DCGM, DCGM_INT32_BLANK + 4, (DCGM_INT32_BLANK + 4) / 1000),
    ("gpu.sm_active", Source.DCGM, 0.5, 50.0),  # ratio -> percent
    ("gpu.sm_active", Source.NVML, 42.0, 42.0),  # GPM is already percent
    ("gpu.pcie_tx_bytes_per_second", Source.NVML, 1, 1024.0 * 1024.0),  # GPM MiB/s -> B/s
    ("gpu.energy_joules_total", Source.NVML, 7_500, 7.5),  # field 83, mJ -> J
    ("gpu.nvlink_tx_bytes_per_second", Source.NVML, 1.0, 1024.0**2),  # MiB/s -> bytes/s
    ("gpu.temperature_celsius", Source.NVML, 0, 0.0),  # zero is a value, not missing
])
def test_values_are_scaled_to_the_catalogue_unit(name, kind, raw, expected):
    assert metric(name).source(kind).to_catalogue_value(raw) == pytest.approx(expected)


@pytest.mark.parametrize("name, kind, raw", [
    ("gpu.memory_used_bytes", Source.DCGM, DCGM_INT64_BLANK),
    ("gpu.memory_used_bytes", Source.DCGM, DCGM_INT64_BLANK + 2),  # not supported
    ("gpu.memory_used_bytes", Source.DCGM, DCGM_INT64_BLANK + 3),  # not permissioned
    ("gpu.memory_used_bytes", Source.DCGM, 2**63 - 1),
    ("gpu.temperature_celsius", Source.DCGM, DCGM_INT32_BLANK + 1),  # 32-bit not found
    ("gpu.sm_active", Source.DCGM, DCGM_FP64_BLANK),
    ("gpu.sm_active", Source.DCGM, DCGM_FP64_BLANK + 2.0),
    ("gpu.power_usage_watts", Source.DCGM, DCGM_FP64_BLANK + 1.0),
    ("gpu.sm_active", Source.PROMETHEUS, DCGM_FP64_BLANK),
    ("gpu.sm_active", Source.NVML, math.nan),
    ("gpu.sm_active", Source.NVML, math.inf),
    ("gpu.power_usage_watts", Source.DCGM, -math.inf),
    ("gpu.temperature_celsius", Source.NVML, NVML_VALUE_NOT_AVAILABLE_UINT),
    ("process.memory_used_bytes", Source.NVML, NVML_VALUE_NOT_AVAILABLE_ULONGLONG),
    ("gpu.temperature_celsius", Source.NVML, None),  # NVML_ERROR_NOT_SUPPORTED, read as None
])
def test_sentinels_are_missing_never_numbers(name, kind, raw):
    assert metric(name).source(kind).to_catalogue_value(raw) is None


def test_nvml_not_supported_and_friends_are_missing_but_a_lost_gpu_is_not():
    assert nvml_error_is_missing(3) and nvml_error_is_missing(4)  # NOT_SUPPORTED, NO_PERMISSION
    assert not nvml_error_is_missing(15)  # GPU_IS_LOST: a health event
    assert not nvml_error_is_missing(0)


# --- architectures ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("Hopper (GH100)", Architecture.HOPPER), ("Ada Lovelace (AD102)", Architecture.ADA),
    ("Ampere (GA100)", Architecture.AMPERE), ("Blackwell (GB202)", Architecture.BLACKWELL),
    ("Volta (GV100)", Architecture.VOLTA), ("Turing (TU104)", Architecture.TURING),
    ("Pascal (GP100)", None), ("", None)])
def test_architecture_strings_map_to_the_enum(text, expected):
    assert architecture_of(text) is expected


def test_every_model_in_the_model_catalogue_has_an_architecture():
    for model in gpu_models.catalogue().values():
        assert architecture_of(model.architecture) is not None, model.architecture


# --- docs and CLI ----------------------------------------------------------------------------

def test_docs_match_the_catalogue():
    assert DOCS.is_file(), "docs/metrics.md is missing; run `gpufleet metrics docs`"
    assert DOCS.read_text() == catalogue_markdown(), (
        "docs/metrics.md is stale; regenerate it with `gpufleet metrics docs`")


def test_docs_name_every_metric_and_say_how_they_were_generated():
    text = catalogue_markdown()
    assert "Generated by `gpufleet metrics docs`" in text
    for row in CATALOGUE:
        assert f"`{row.name}`" in text


def test_metrics_docs_check_passes_against_the_committed_docs():
    result = invoke("metrics", "docs", "--check", "--output", DOCS)
    assert result.exit_code == 0, result.output
    assert "up to date" in result.stdout


def test_metrics_docs_writes_and_then_checks(tmp_path):
    target = tmp_path / "docs" / "metrics.md"
    missing = invoke("metrics", "docs", "--check", "-o", target)
    assert missing.exit_code == 1 and "is missing" in missing.stderr
    assert invoke("metrics", "docs", "--output", target).exit_code == 0
    assert target.read_text() == catalogue_markdown()
    target.write_text(target.read_text() + "edited by hand\n")
    stale = invoke("metrics", "docs", "--check", "-o", target)
    assert stale.exit_code == 1 and "out of date" in stale.stderr


def test_metrics_ls_json_lists_the_catalogue():
    result = invoke("metrics", "ls", "--json")
    assert result.exit_code == 0, result.output
    views = json.loads(result.stdout)
    assert [v["name"] for v in views] == [m.name for m in CATALOGUE]
    sm = next(v for v in views if v["name"] == "gpu.sm_active")
    assert sm["dcgm"] == {"field": "DCGM_FI_PROF_SM_ACTIVE", "field_id": 1002, "scale": 100.0,
                          "architectures": [a.value for a in Architecture], "per_mig": True}
    assert (sm["unit"], sm["class"], sm["scopes"]) == ("percent", "relative_activity",
                                                       ["device", "mig"])


def test_metrics_ls_table_shows_every_metric():
    result = invoke("metrics", "ls")
    assert result.exit_code == 0, result.output
    for row in CATALOGUE:
        assert row.name in result.stdout
