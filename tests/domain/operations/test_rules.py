"""The rule language: kinds, their fields, labels refused with the valid choices,
summaries, and a rule's written form round-tripping."""

from __future__ import annotations

from dataclasses import replace

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


@pytest.mark.parametrize("summary", [
    "{value.__class__}", "{value.__class__.__new__.__globals__}", "{gpu[0]}", "{value!r}",
])
def test_a_summary_placeholder_is_a_plain_name(summary):
    """Attribute and index access would let whoever writes a summary (members test rules)
    walk from a value to the server's objects."""
    assert "not a plain name" in refused(kind="threshold", metric="gpu.sm_active", op=">",
                                         value=1, summary=summary)["summary"]


def test_a_stored_summary_with_attribute_access_renders_as_written():
    rule = rule_from_mapping({"name": "r", "kind": "threshold", "metric": "gpu.sm_active",
                              "op": ">", "value": 1})
    sneaky = replace(rule, summary="{value.__class__.__new__.__globals__}")
    assert render_summary(sneaky, {}, 5.0) == sneaky.summary


def test_a_format_spec_the_value_cannot_take_is_refused():
    assert "{value:zz}" in refused(kind="threshold", metric="gpu.sm_active", op=">",
                                   value=1, summary="{value:zz}")["summary"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_value_must_be_a_finite_number(value):
    assert "finite" in refused(kind="threshold", metric="gpu.sm_active", op=">",
                               value=value)["value"]


@pytest.mark.parametrize("value", [0.5, -1, 0, 2**64, 1e29])
def test_a_bit_mask_is_a_positive_whole_number(value):
    assert "not a bit mask" in refused(kind="threshold", metric="gpu.clock_throttle_reasons",
                                       op="has_any_bits", value=value)["value"]


@pytest.mark.parametrize(("labels", "says"), [
    ({"a b": "x"}, "not a label name"), ({"1st": "x"}, "not a label name"),
    ({"severity": "critical"}, "set by gpufleet"), ({"gpu": "x"}, "set by gpufleet"),
    ({"owner": "x"}, "set by gpufleet"),
])
def test_a_static_label_has_a_name_of_its_own(labels, says):
    assert says in refused(kind="threshold", metric="gpu.sm_active", op=">", value=1,
                           labels=labels)["labels"]
