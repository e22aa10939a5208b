"""The rule language: kinds, their fields, labels refused with the valid choices,
summaries, and a rule's written form round-tripping."""

from __future__ import annotations

import pytest

from gpufleet.domain.operations.rule_files import default_rules
from gpufleet.domain.operations.rules import (
    Op,
    RuleProblems,
    render_summary,
    rule_from_mapping,
)


def refused(**body) -> dict[str, str]:
    with pytest.raises(RuleProblems) as caught:
        rule_from_mapping({"name": "r", **body})
    return {p.field_text: p.message for p in caught.value.problems}


def test_every_default_rule_round_trips_through_its_written_form():
    for rule in default_rules():
        assert rule_from_mapping(rule.as_dict()) == rule


@pytest.mark.parametrize(("op", "left", "right", "holds"), [
    (Op.GE, 85, 85, True), (Op.GT, 85, 85, False), (Op.LT, 1, 2, True),
    (Op.LE, 2, 2, True), (Op.EQ, 1, 1, True), (Op.NE, 1, 1, False),
    (Op.HAS_ANY_BITS, 0x40, 0xE8, True), (Op.HAS_ANY_BITS, 0x04, 0xE8, False),
    (Op.HAS_ANY_BITS, 0x01 | 0x08, 0xE8, True),
])
def test_comparisons(op, left, right, holds):
    assert op.holds(left, right) is holds


def test_each_kind_names_what_it_lacks():
    assert "required for a threshold rule" in refused(kind="threshold",
                                                      metric="gpu.sm_active")["op"]
    assert "either" in refused(kind="absence", after="5m")["absent"]
    assert "required" in refused(kind="state", condition="request_pending")["after"]
    assert "required" in refused(kind="state", condition="quota_nearly_exhausted")["value"]
    assert "0 < value" in refused(kind="efficiency", value=0)["value"]
    assert "not used by a state rule" in refused(kind="state", condition="node_unreachable",
                                                  metric="gpu.sm_active")["metric"]
    assert "needs `across`" in refused(kind="threshold", metric="gpu.sm_active", op="<",
                                       value=1, by=["node"])["by"]


def test_unknown_labels_are_refused_with_the_choices():
    problems = refused(kind="state", condition="node_unreachable",
                       group_by=["rule", "gpu"], matchers=["projec=x"])
    assert problems["group_by"].startswith("unknown label 'gpu'; choose from: rule, "
                                           "severity, environment, node")
    assert "did you mean project" in problems["matchers"]


def test_an_increase_needs_a_counter():
    assert "is not a counter" in refused(kind="increase", metric="gpu.sm_active")["metric"]


def test_a_bad_matcher_and_a_bad_template():
    assert "not a matcher" in refused(kind="state", condition="node_unreachable",
                                      matchers=["node"])["matchers"]
    assert "not a template" in refused(kind="state", condition="node_unreachable",
                                       summary="{node")["summary"]


def test_summaries_render_labels_and_the_value():
    rule = rule_from_mapping({"name": "r", "kind": "threshold", "metric":
                              "gpu.temperature_celsius", "op": ">=", "value": 85,
                              "summary": "{gpu} {value:.0f} °C ({owner}) [{labels}]"})
    assert render_summary(rule, {"gpu": "GPU-1", "node": "n"}, 91.4) == \
        "GPU-1 91 °C () [gpu=GPU-1, node=n]"


def test_a_project_rule_groups_by_rule_alone():
    rule = rule_from_mapping({"name": "r", "kind": "efficiency", "value": 20})
    assert rule.group_by == ("rule",) and rule.observed_labels == ("project",)
