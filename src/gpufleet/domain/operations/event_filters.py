"""Which events a reader or a subscription wants: type globs and `where` conditions
(docs/operations.md, "Subscriptions").

A type glob names event types as shell globs over the dotted name: `request.*`,
`gpu.health_changed`, `*`. A condition tests one field of the event, flattened to dotted
paths (`type`, `actor`, `reason`, `subject.kind`, `subject.id`, `labels.<name>`,
`data.<name>`, `data.<name>.<name>`):

- a label matcher, as Prometheus writes them: `labels.project=vision`,
  `data.models=~.*H100.*`, `actor!=user:bot` (anchored regexes; an absent field matches
  as the empty string);
- a numeric comparison: `data.count>=8`, `data.units_lost>0` (`>`, `>=`, `<`, `<=`; a
  field that is absent or not a number never compares true).

Every condition must hold. A bad one is refused with a 400 that names it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.matchers import LabelMatcher, parse_matcher

MAX_TYPE_GLOB_CHARS = 63
MAX_CONDITION_CHARS = 500
_TYPE_GLOB = re.compile(r"[A-Za-z0-9_.*?-]+")
_COMPARISON = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(>=|<=|>|<)\s*(\S+)\s*$")
_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)")
EXACT_FIELDS = ("type", "actor", "reason", "subject.kind", "subject.id")
PREFIX_FIELDS = ("labels.", "data.")


def check_type_glob(glob: str) -> str:
    """`glob` if it is one (letters, digits, `_ . - * ?`), else a 400 naming it."""
    if not 0 < len(glob) <= MAX_TYPE_GLOB_CHARS or not _TYPE_GLOB.fullmatch(glob):
        raise InvalidInput(f"{glob!r} is not an event type glob: write a dotted event type "
                           "such as request.approved, with * or ? as wildcards (request.*)",
                           code="invalid_event_type", details={"type": glob})
    return glob


def type_matches(globs: Iterable[str], event_type: str) -> bool:
    """True when any glob matches (no globs: every type)."""
    globs = tuple(globs)
    return not globs or any(fnmatchcase(event_type, g) for g in globs)


def glob_to_like(glob: str) -> str:
    """The SQL LIKE pattern (escape `\\`) that matches what `glob` matches."""
    escaped = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


@dataclass(frozen=True)
class Comparison:
    """`field op number`: true only when the field holds a number that compares so."""

    field: str
    op: str
    value: float

    def matches(self, fields: Mapping[str, str]) -> bool:
        try:
            actual = float(fields[self.field])
        except (KeyError, ValueError):
            return False
        if math.isnan(actual):
            return False
        return {">": actual > self.value, ">=": actual >= self.value,
                "<": actual < self.value, "<=": actual <= self.value}[self.op]

    def __str__(self) -> str:
        return f"{self.field}{self.op}{self.value:g}"


Condition = Comparison | LabelMatcher


def parse_condition(text: str) -> Condition:
    """One `where` condition; anything else is a 400 `invalid_condition` naming it."""
    if len(text) > MAX_CONDITION_CHARS:
        raise _bad(text, f"longer than {MAX_CONDITION_CHARS} characters")
    field = _FIELD.match(text)
    if field is None:
        raise _bad(text, "write field=value, field!=value, field=~regex, field!~regex or "
                         "field>=number (also >, <, <=)")
    _check_field(text, field.group(1))
    compared = _COMPARISON.match(text)
    if compared:
        name, op, number = compared.groups()
        try:
            value = float(number)
        except ValueError:
            raise _bad(text, f"{number!r} is not a number to compare {name} with") from None
        if not math.isfinite(value):
            raise _bad(text, f"{number!r} is not a finite number")
        return Comparison(name, op, value)
    try:
        return parse_matcher(text)
    except InvalidInput as exc:
        raise _bad(text, exc.message) from None


def parse_conditions(texts: Iterable[str]) -> tuple[Condition, ...]:
    return tuple(parse_condition(t) for t in texts)


def all_hold(conditions: Iterable[Condition], fields: Mapping[str, str]) -> bool:
    return all(c.matches(fields) for c in conditions)


def _check_field(text: str, name: str) -> None:
    if name in EXACT_FIELDS or (name.startswith(PREFIX_FIELDS)
                                and name not in ("labels.", "data.")):
        return
    raise _bad(text, f"unknown field {name!r}: conditions test "
                     f"{', '.join(EXACT_FIELDS)}, labels.<name> or data.<name>")


def _bad(text: str, why: str) -> InvalidInput:
    return InvalidInput(f"where condition {text!r}: {why}", code="invalid_condition",
                        details={"condition": text})


def flatten(event: Mapping[str, Any]) -> dict[str, str]:
    """The event as dotted paths to strings, what conditions test: `subject.kind`,
    `data.count` ("8"), `labels.project`. Lists join with commas; booleans are
    `true`/`false`; null is absent."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif isinstance(value, bool):
            flat[prefix] = "true" if value else "false"
        elif isinstance(value, list | tuple):
            flat[prefix] = ",".join(str(v) for v in value if v is not None)
        else:
            flat[prefix] = str(value)

    walk("", event)
    return flat
