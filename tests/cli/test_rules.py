"""`gpufleet rules ls | check | test | export` (HTTP through the test app), and the
export checked by `promtool check rules` (Debian's prometheus package)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.cli.test_cli import invoke, json_of, ok, rows
from tests.services.operations.test_rule_evaluation import world  # noqa: F401  (fixture)

GOOD = """\
[[rules]]
name = "hot-gpu"
kind = "threshold"
severity = "critical"
metric = "gpu.temperature_celsius"
op = ">="
value = 85
for = "10m"
summary = "{gpu} at {value:.0f} °C"

[[rules]]
name = "node-down"
kind = "state"
condition = "node_unreachable"
"""

BAD = """\
[[rules]]
name = "hot-gpu"
kind = "threshold"
metric = "gpu.temperature"
op = ">="
value = 85

[[rules]]
name = "slow"
kind = "threshold"
metric = "gpu.sm_active"
op = "<"
value = 5
for = "soon"
"""


@pytest.fixture
def files(tmp_path):
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(GOOD)
    bad.write_text(BAD)
    return {"good": good, "bad": bad}


def test_check_accepts_a_good_file(files):
    assert ok("rules", "check", files["good"]).stdout.strip().endswith("2 rules OK")


def test_check_names_file_line_and_field(files):
    result = invoke("rules", "check", files["bad"])
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith(f"{files['bad']}:4: rules[0].metric: unknown metric "
                               "'gpu.temperature'; did you mean gpu.temperature_celsius")
    assert lines[1].startswith(f"{files['bad']}:14: rules[1].for: for 'soon' is not a "
                               "duration")
    assert lines[-1] == f"error: {files['bad']}: 2 problems; nothing was used"
    assert "Traceback" not in result.output


def test_check_a_file_that_is_not_there(tmp_path):
    result = invoke("rules", "check", tmp_path / "nope.toml")
    assert result.exit_code == 1 and "cannot read" in result.stderr


def test_ls_shows_the_default_pack(cli_in_process):
    out = ok("rules", "ls").stdout
    assert rows(out, "gpu-xid-error")[0][:3] == ["gpu-xid-error", "increase", "warning"]
    names = {r["name"] for r in json_of("rules", "ls")}
    assert {"node-unreachable", "idle-allocation", "gpu-ecc-uncorrectable"} <= names


def test_test_prints_what_would_fire(cli_in_process, world, files):  # noqa: F811
    out = ok("rules", "test", files["good"]).stdout
    [row] = rows(out, "hot-gpu")
    assert f"gpu={world['held']}" in " ".join(row)
    assert "alice" in row
    assert "2 rules evaluated, 1 observations" in out


def test_export_of_the_default_pack(files):
    text = ok("rules", "export", "--default-pack", "--format", "prometheus").stdout
    assert "alert: GpuXidError" in text
    assert "increase(DCGM_EXP_XID_ERRORS_TOTAL[10m]) >= 1" in text
    assert "#   node-unreachable: fleet state" in text  # skipped, with the reason
    assert "100 * DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_TOTAL >= 95" in text


def test_export_passes_promtool(tmp_path, files):
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("GPUFLEET_TEST_REQUIRE_PROMTOOL"):
            pytest.fail("promtool is required (GPUFLEET_TEST_REQUIRE_PROMTOOL is set)")
        pytest.skip("promtool not installed (Debian: apt-get install prometheus)")
    for name, args in (("pack", ["--default-pack"]), ("file", [files["good"]])):
        target = tmp_path / f"{name}.yaml"
        ok("rules", "export", *args, "--output", target)
        checked = subprocess.run([promtool, "check", "rules", str(target)],
                                 capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "SUCCESS" in checked.stdout


def test_export_of_the_servers_rules(api, cli_in_process):
    response = api.request("PUT", "/api/v1/alert-rules/gpu-xid-error",
                           json={"kind": "increase", "metric": "gpu.xid_errors_total",
                                 "enabled": False})
    assert response.status_code == 200, response.text
    text = ok("rules", "export").stdout
    assert "#   gpu-xid-error: disabled" in text
    assert "alert: GpuEccUncorrectable" in text
    assert "error: give a rule file or --default-pack" in \
        invoke("rules", "export", "x.toml", "--default-pack").stderr
