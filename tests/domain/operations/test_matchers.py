import pytest

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.matchers import MatchOp, all_match, parse_matcher


@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("project=vision", {"project": "vision"}, True),
    ("project=vision", {"project": "visionary"}, False),
    ("project!=vision", {"project": "nlp"}, True),
    ("project!=vision", {}, True),  # absent is the empty string
    ("project=~vis.*", {"project": "vision"}, True),
    ("project=~vis.*", {"project": "television"}, False),  # anchored
    ("project!~vis.*", {"project": "nlp"}, True),
    ('severity="critical"', {"severity": "critical"}, True),
    ("owner=", {}, True),
])
def test_matcher_verdicts(text, labels, expected):
    assert parse_matcher(text).matches(labels) is expected


def test_operator_parsed_longest_first():
    assert parse_matcher("a!=b").op is MatchOp.NOT_EQUAL
    assert parse_matcher("a=~b").op is MatchOp.REGEX
    assert parse_matcher("a=b=c").value == "b=c"


@pytest.mark.parametrize("text", ["project", "=vision", "9x=1", "project=~(", ""])
def test_bad_matchers_are_refused_naming_the_text(text):
    with pytest.raises(InvalidInput) as refused:
        parse_matcher(text)
    assert refused.value.code == "invalid_matcher"


def test_no_matchers_match_everything():
    assert all_match([], {"anything": "x"})
