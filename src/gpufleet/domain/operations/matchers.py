"""Label matchers, as Prometheus and Alertmanager write them: `key=value`, `key!=value`,
`key=~regex`, `key!~regex`.

One grammar for everything that selects by label: receivers' routes, silences, event
subscriptions. Regexes are anchored (the whole value must match), as in Prometheus, so
`project=~vis.*` does not match `television`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.domain.errors import InvalidInput

_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_MATCHER = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


class MatchOp(StrEnum):
    EQUAL = "="
    NOT_EQUAL = "!="
    REGEX = "=~"
    NOT_REGEX = "!~"


@dataclass(frozen=True, slots=True)
class LabelMatcher:
    """One condition on one label. A label that is absent matches as the empty string, as
    in Prometheus: `owner!=alice` matches an alert with no owner."""

    name: str
    op: MatchOp
    value: str
    _pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, name: str, op: MatchOp | str, value: str) -> LabelMatcher:
        op = MatchOp(op)
        if not _LABEL_NAME.fullmatch(name):
            raise InvalidInput(f"{name!r} is not a label name", code="invalid_matcher",
                               details={"matcher": f"{name}{op}{value}"})
        pattern = None
        if op in (MatchOp.REGEX, MatchOp.NOT_REGEX):
            try:
                pattern = re.compile(value)
            except re.error as exc:
                raise InvalidInput(f"{name}{op}{value}: not a regular expression ({exc})",
                                   code="invalid_matcher",
                                   details={"matcher": f"{name}{op}{value}"}) from None
        return cls(name, op, value, pattern)

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.name) or ""
        if self.op is MatchOp.EQUAL:
            return actual == self.value
        if self.op is MatchOp.NOT_EQUAL:
            return actual != self.value
        hit = self._pattern is not None and self._pattern.fullmatch(actual) is not None
        return hit if self.op is MatchOp.REGEX else not hit

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


def parse_matcher(text: str) -> LabelMatcher:
    """`project=vision` → LabelMatcher; anything else is a 400 naming the text. A value may
    be quoted ("..."), as Alertmanager's amtool writes it."""
    found = _MATCHER.match(text)
    if not found:
        raise InvalidInput(f"{text!r} is not a matcher: write label=value, label!=value, "
                           "label=~regex or label!~regex", code="invalid_matcher",
                           details={"matcher": text})
    name, op, value = found.groups()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return LabelMatcher.of(name, op, value)


def parse_matchers(texts: Iterable[str]) -> tuple[LabelMatcher, ...]:
    return tuple(parse_matcher(t) for t in texts)


def all_match(matchers: Iterable[LabelMatcher], labels: Mapping[str, str]) -> bool:
    """True when every matcher matches (no matchers: everything matches)."""
    return all(m.matches(labels) for m in matchers)
