import pytest

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.event_filters import (
    all_hold,
    check_type_glob,
    flatten,
    glob_to_like,
    parse_condition,
    parse_conditions,
    type_matches,
)

APPROVED = {"schema": 1, "id": 7, "type": "request.approved", "actor": "user:olga",
            "subject": {"kind": "request", "id": "GR-1042"}, "reason": None,
            "labels": {"project": "vision", "allocation": "GR-1042"},
            "data": {"count": 8, "models": ["H100-80GB"], "kind": "whole", "same_node": True}}


def test_flatten_gives_dotted_strings():
    flat = flatten(APPROVED)
    assert flat["subject.kind"] == "request" and flat["labels.project"] == "vision"
    assert flat["data.count"] == "8" and flat["data.models"] == "H100-80GB"
    assert flat["data.same_node"] == "true" and "reason" not in flat


@pytest.mark.parametrize("conditions, holds", [
    (["data.count>=8"], True),
    (["data.count>8"], False),
    (["data.count<=8", "data.count>7.5"], True),
    (["data.count<8"], False),
    (["data.models=~.*H100.*", "labels.project=vision"], True),
    (["data.models=~H100"], False),             # anchored, as in Prometheus
    (["labels.project!=vision"], False),
    (["data.missing>=0"], False),               # absent: never compares true
    (["data.kind>=1"], False),                  # not a number: never compares true
    (["labels.owner!~.+"], True),               # absent label matches as ""
    (["subject.id=GR-1042", "type=request.approved", "actor=user:olga"], True),
    ([], True),
])
def test_conditions(conditions, holds):
    assert all_hold(parse_conditions(conditions), flatten(APPROVED)) is holds


@pytest.mark.parametrize("text, names", [
    ("data.count>=eight", "eight"),
    ("data.count>=inf", "finite"),
    ("gpus>=8", "unknown field 'gpus'"),
    ("labels.=x", "unknown field"),
    ("data.x=~(", "regular expression"),
    (">=8", "write field=value"),
    ("data.count", "write label=value"),
])
def test_bad_conditions_are_refused_naming_them(text, names):
    with pytest.raises(InvalidInput) as refused:
        parse_condition(text)
    assert refused.value.code == "invalid_condition"
    assert refused.value.details == {"condition": text}
    assert text in refused.value.message and names in refused.value.message


def test_type_globs():
    assert type_matches(["request.*"], "request.approved")
    assert not type_matches(["request.*"], "pool.approved")
    assert type_matches([], "anything.at_all")
    assert glob_to_like("request_x.*") == "request\\_x.%"
    for bad in ["", "request.[ab]", "a b", "x" * 64, "request/approved"]:
        with pytest.raises(InvalidInput):
            check_type_glob(bad)
