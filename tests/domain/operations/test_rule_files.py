"""Rule files: TOML and YAML, every problem as FILE:LINE: FIELD: message."""

from __future__ import annotations

import pytest

from gpufleet.domain.operations.rule_files import RuleFileError, default_rules, load_rules
from gpufleet.domain.operations.rules import RuleKind

TOML = """\
# comment
[[rules]]
name = "hot"
kind = "threshold"
metric = "gpu.temperature_celsius"
op = ">="
value = 85
for = "10m"

[rules.labels]
team = "infra"

[[rules]]
name = "xid"
kind = "increase"
metric = "gpu.xid_errors_total"
"""

YAML = """\
rules:
  - name: hot
    kind: threshold
    metric: gpu.temperature_celsius
    op: ">="
    value: 85
    for: 10m
    labels:
      team: infra
  - name: xid
    kind: increase
    metric: gpu.xid_errors_total
"""


@pytest.mark.parametrize(("text", "file"), [(TOML, "r.toml"), (YAML, "r.yaml")])
def test_the_same_rules_in_toml_and_yaml(text, file):
    hot, xid = load_rules(text, file)
    assert (hot.name, hot.kind, hot.for_s, dict(hot.labels)) == \
        ("hot", RuleKind.THRESHOLD, 600, {"team": "infra"})
    assert (xid.kind, xid.value, xid.over_s) == (RuleKind.INCREASE, 1.0, 600)


def problems(text: str, file: str) -> list[str]:
    with pytest.raises(RuleFileError) as caught:
        load_rules(text, file)
    return [str(p) for p in caught.value.problems]


def test_toml_problems_name_the_line_of_the_field():
    text = TOML.replace('value = 85', 'value = "hot"').replace('"gpu.xid_errors_total"',
                                                                '"gpu.xid"')
    assert problems(text, "r.toml") == [
        "r.toml:7: rules[0].value: Input should be a valid number, unable to parse string "
        "as a number",
        "r.toml:16: rules[1].metric: unknown metric 'gpu.xid'; did you mean "
        "gpu.xid_errors_total? choose from: gpu.energy_joules_total, "
        "gpu.xid_errors_total, gpu.ecc_corrected_errors_total, "
        "gpu.ecc_uncorrected_errors_total, gpu.remapped_rows_correctable_total, "
        "gpu.remapped_rows_uncorrectable_total, gpu.pcie_replays_total, "
        "gpu.nvlink_crc_flit_errors_total, gpu.nvlink_crc_data_errors_total, "
        "gpu.nvlink_replay_errors_total, gpu.nvlink_recovery_errors_total"]


def test_a_key_in_a_sub_table_and_a_missing_field():
    text = TOML.replace('team = "infra"', "team = 3")
    assert problems(text, "r.toml") == [
        "r.toml:11: rules[0].labels.team: Input should be a valid string"]
    assert problems(TOML.replace('op = ">="\n', ""), "r.toml") == [
        "r.toml:2: rules[0].op: required for a threshold rule"]


def test_yaml_problems_name_the_line_of_the_field():
    text = YAML.replace("for: 10m", "for: ten minutes").replace("    kind: increase\n", "")
    assert problems(text, "r.yaml") == [
        "r.yaml:7: rules[0].for: for 'ten minutes' is not a duration like 90s, 30m, 6h, 7d "
        "or 1h30m",
        "r.yaml:10: rules[1].kind: required"]


def test_a_missing_field_is_reported_at_its_rule():
    assert problems(YAML.replace("    op: \">=\"\n", ""), "r.yml") == \
        ["r.yml:2: rules[0].op: required for a threshold rule"]


@pytest.mark.parametrize(("text", "file", "expected"), [
    ("[[rules]\nname = 1", "r.toml", "r.toml:1: not TOML: "),
    ("rules:\n  - name: a\n   kind: b", "r.yaml", "r.yaml:3: not YAML: "),
    ("other = 1", "r.toml", "r.toml:1: rules: a rule file holds a list `rules`"),
    ("rules = [1]", "r.toml", "r.toml:1: rules[0]: a rule is a table"),
])
def test_files_that_are_not_rule_files(text, file, expected):
    [problem] = problems(text, file)
    assert problem.startswith(expected), problem


def test_a_name_declared_twice():
    text = TOML.replace('name = "xid"', 'name = "hot"')
    assert problems(text, "r.toml") == [
        "r.toml:14: rules[1].name: 'hot' is declared twice (first rules[0])"]


def test_the_default_pack_has_what_the_issue_lists():
    names = {r.name for r in default_rules()}
    assert {"gpu-memory-saturation", "gpu-thermal-near-slowdown", "gpu-throttling-sustained",
            "gpu-xid-error", "gpu-ecc-uncorrectable", "gpu-remapped-rows-pending",
            "gpu-row-remap-failed", "gpu-nvlink-errors", "node-unreachable", "agent-stale",
            "unattributed-usage", "zombie-process", "idle-allocation"} == names
