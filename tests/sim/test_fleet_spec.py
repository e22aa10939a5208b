"""Fleet specs load, size up as promised, and refuse what cannot exist with a clear message."""

from __future__ import annotations

import time

import pytest

from gpufleet.domain.inventory import SharingMode
from gpufleet.sim.fleet_spec import FleetSpecError, load_default_spec, load_spec, parse_spec_text
from gpufleet.sim.scaled import scaled_spec

ENVS = """
seed: 7
environments:
  - {name: lab, kind: onprem, default_sharing_mode: exclusive}
  - {name: slicing, kind: onprem, default_sharing_mode: mig}
"""


def spec_with(groups: str):
    return parse_spec_text(ENVS + "node_groups:\n" + groups, "test.yaml")


def test_default_fleet_is_the_kt_like_fleet():
    spec = load_default_spec()
    assert 1650 <= spec.gpu_count <= 1750
    assert 200 <= spec.node_count <= 260
    by_env = spec.gpus_by_environment()
    assert set(by_env) == {"azure-koreacentral", "onprem-hpc", "onprem-slicing"}
    assert 760 <= by_env["azure-koreacentral"] <= 840
    assert 680 <= by_env["onprem-hpc"] <= 760
    assert 160 <= by_env["onprem-slicing"] <= 200
    azure = spec.environment("azure-koreacentral")
    assert (azure.kind, azure.provider, azure.region) == ("cloud", "azure", "koreacentral")
    modes = {spec.sharing_mode(g) for g in spec.node_groups if g.environment == "onprem-slicing"}
    assert modes == {SharingMode.MIG, SharingMode.SHARED}
    assert {spec.sharing_mode(g) for g in spec.node_groups
            if g.environment == "onprem-hpc"} == {SharingMode.EXCLUSIVE}


def test_a_small_spec_loads_from_a_file(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(ENVS + """node_groups:
  - {environment: lab, shape: dgx-h100, count: 3, hostname_prefix: dgx, rack_size: 2}
""")
    spec = load_spec(path)
    group = spec.node_groups[0]
    assert [group.hostname(i) for i in range(3)] == ["dgx-001", "dgx-002", "dgx-003"]
    assert [group.node_labels(i)["rack"] for i in range(3)] == ["dgx-r01", "dgx-r01", "dgx-r02"]
    assert spec.gpu_count == 24
    assert spec.sharing_mode(group) is SharingMode.EXCLUSIVE


def test_mig_layouts_make_a_group_mig_in_any_environment():
    spec = spec_with("  - {environment: lab, shape: dgx-h100, count: 1, hostname_prefix: a,\n"
                     "     mig_layouts: [[7g.80gb]]}")
    assert spec.sharing_mode(spec.node_groups[0]) is SharingMode.MIG


@pytest.mark.parametrize("groups, message", [
    ("  - {environment: lab, shape: dgx-h100, count: 1, hostname_prefix: a, colour: red}",
     r"node_groups.0.colour: Extra inputs are not permitted"),
    ("  - {environment: lab, shape: dgx-h900, count: 1, hostname_prefix: a}",
     r"node_groups.0.shape: unknown shape 'dgx-h900'; known shapes: "),
    ("  - {environment: moon, shape: dgx-h100, count: 1, hostname_prefix: a}",
     r"unknown environment 'moon'"),
    ("  - {environment: slicing, shape: mig-h100, count: 1, hostname_prefix: a,\n"
     "     mig_layouts: [[4g.40gb, 4g.40gb]]}",
     r"mig_layouts\[0\] is not valid on H100-80GB: .*does not fit on one GPU"),
    ("  - {environment: slicing, shape: mig-a100, count: 1, hostname_prefix: a,\n"
     "     mig_layouts: [[1g.5gb]]}",
     r"unknown MIG profile '1g.5gb'"),
    ("  - {environment: lab, shape: l40s-4, count: 1, hostname_prefix: a,\n"
     "     mig_layouts: [[1g.10gb]]}",
     r"L40S-48GB GPUs, which cannot do MIG"),
    ("  - {environment: slicing, shape: l40s-4, count: 1, hostname_prefix: a}",
     r"L40S-48GB GPUs cannot do MIG; set sharing_mode"),
    ("  - {environment: lab, shape: dgx-h100, count: 1, hostname_prefix: a,\n"
     "     sharing_mode: exclusive, mig_layouts: [[7g.80gb]]}",
     r"mig_layouts given, but the group's sharing mode is exclusive"),
    ("  - {environment: lab, shape: dgx-h100, count: 1, hostname_prefix: a}\n"
     "  - {environment: lab, shape: hgx-a100, count: 1, hostname_prefix: a}",
     r"hostname prefixes used by two node groups: a"),
    ("  - {environment: lab, shape: dgx-h100, count: 0, hostname_prefix: a}",
     r"count: Input should be greater than or equal to 1"),
])
def test_bad_specs_are_refused_with_a_clear_message(groups, message):
    with pytest.raises(FleetSpecError, match=r"^test.yaml: .*" + message):
        spec_with(groups)


def test_unknown_top_level_field_and_bad_yaml():
    with pytest.raises(FleetSpecError, match="nodes: Extra inputs are not permitted"):
        parse_spec_text(ENVS + "nodes: []\n", "test.yaml")
    with pytest.raises(FleetSpecError, match="not valid YAML"):
        parse_spec_text("seed: [1,", "test.yaml")
    with pytest.raises(FleetSpecError, match="cannot read"):
        load_spec("/nonexistent/fleet.yaml")


def test_scaled_spec_makes_100k_gpus_quickly():
    started = time.perf_counter()
    spec = scaled_spec(12_500)
    elapsed_s = time.perf_counter() - started
    assert spec.node_count == 12_500
    assert spec.gpu_count == 100_000
    assert set(spec.gpus_by_environment()) == {"azure-koreacentral", "onprem-hpc",
                                               "onprem-slicing"}
    assert elapsed_s < 30  # generous: a guard against quadratic work, not a benchmark
    assert scaled_spec(1).gpu_count == 8
