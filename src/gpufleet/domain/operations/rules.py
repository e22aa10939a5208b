"""Alert rules: what to watch for, declared (docs/operations.md, "Alert rules").

A rule says which condition, on which series, is worth telling someone about. The evaluator
(services/operations/rule_evaluation.py) says which series' conditions hold *now*, as
`Observation`s; the alert state machine applies the rule's `for_s` (pending → firing).

Five kinds:
- threshold: a catalogue metric (optionally as a percentage of another), over a short
  window, compared with a value — per unit, or aggregated across units by labels;
- increase: a lifetime counter grew by at least `value` over the window (XIDs, ECC);
- absence: an agent silent for `after_s`, or a metric that stopped reporting;
- state: a fact of the fleet's state (node unreachable, GPU quarantined, request pending
  too long, quota nearly exhausted, idle allocation, zombie process, unattributed usage);
- efficiency: a project's active / allocated GPU-hours over the window below a percentage
  (docs/design.md, "Funnel and activity").

A rule is built from a mapping (a rule file's table, an API body) by `rule_from_mapping`,
which refuses an unknown metric or label with the valid choices.
"""

from __future__ import annotations

import difflib
import math
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.matchers import LabelMatcher, parse_matcher
from gpufleet.domain.operations.notifications import Severity
from gpufleet.domain.operations.quantities import HOURS, SECONDS, Quantity
from gpufleet.domain.telemetry.catalogue import CATALOGUE, find
from gpufleet.domain.telemetry.durations import parse_duration
from gpufleet.domain.telemetry.vocabulary import AcrossSeries, MetricClass, Unit
from gpufleet.domain.telemetry.vocabulary import Comparison as Op

RULE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
DEFAULT_GROUP_BY = ("rule", "environment")
# The labels an observation about a unit carries (docs/operations.md, "Labels").
UNIT_LABELS = ("environment", "node", "gpu", "mig_instance")
OWNER_LABELS = ("allocation", "project", "owner")
# A static label's name, as Prometheus and Alertmanager take it.
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class RuleKind(StrEnum):
    THRESHOLD = "threshold"
    INCREASE = "increase"
    ABSENCE = "absence"
    STATE = "state"
    EFFICIENCY = "efficiency"


class StateCondition(StrEnum):
    NODE_UNREACHABLE = "node_unreachable"
    GPU_QUARANTINED = "gpu_quarantined"
    REQUEST_PENDING = "request_pending"  # pending longer than `after_s`
    QUOTA_NEARLY_EXHAUSTED = "quota_nearly_exhausted"  # ≥ `value` % of a quota used
    POOL_NEARLY_EXHAUSTED = "pool_nearly_exhausted"  # ≥ `value` % of a pool's units held
    IDLE_ALLOCATION = "idle_allocation"
    ZOMBIE_PROCESS = "zombie_process"
    UNATTRIBUTED_USAGE = "unattributed_usage"


class Absent(StrEnum):
    AGENT = "agent"


# Labels each state condition's observations carry, beyond the static ones.
STATE_LABELS: dict[StateCondition, tuple[str, ...]] = {
    StateCondition.NODE_UNREACHABLE: ("environment", "node"),
    StateCondition.GPU_QUARANTINED: UNIT_LABELS,
    StateCondition.REQUEST_PENDING: ("project", "request", "owner"),
    StateCondition.QUOTA_NEARLY_EXHAUSTED: ("project", "flavour"),
    StateCondition.POOL_NEARLY_EXHAUSTED: ("project", "pool", "flavour"),
    StateCondition.IDLE_ALLOCATION: ("environment", "allocation", "project", "owner"),
    StateCondition.ZOMBIE_PROCESS: (*UNIT_LABELS, "pid"),
    StateCondition.UNATTRIBUTED_USAGE: (*UNIT_LABELS, "pid", "kind"),
}


# Annotations (not labels) each state condition adds, usable in a summary.
STATE_ANNOTATIONS: dict[StateCondition, tuple[str, ...]] = {
    StateCondition.NODE_UNREACHABLE: ("last_seen_at",),
    StateCondition.GPU_QUARANTINED: ("reason",),
    StateCondition.IDLE_ALLOCATION: ("state", "idle_since", "units", "gpus"),
    StateCondition.ZOMBIE_PROCESS: ("reason", "process"),
    StateCondition.UNATTRIBUTED_USAGE: ("reason", "claimed_allocation"),
}


# The unit of the value each state condition's observations carry (None: no value).
STATE_VALUE_UNITS: dict[StateCondition, str] = {
    StateCondition.REQUEST_PENDING: HOURS,  # pending for
    StateCondition.QUOTA_NEARLY_EXHAUSTED: Unit.PERCENT,
    StateCondition.POOL_NEARLY_EXHAUSTED: Unit.PERCENT,
    StateCondition.IDLE_ALLOCATION: HOURS,  # idle for
    StateCondition.ZOMBIE_PROCESS: Unit.BYTES,  # the process's GPU memory
    StateCondition.UNATTRIBUTED_USAGE: Unit.BYTES,  # a process's GPU memory
}


@dataclass(frozen=True)
class Rule:
    """One alert rule (see the module docstring for the kinds).

    `summary`: a template, `{value}` and any label name (`{gpu}`, `{node}`, `{project}`)
    or `{labels}` (all labels as `k=v, …`), rendered into each observation's evidence.
    `labels`: static labels added to every observation (a team, a runbook tier).
    `group_by`: how the alert state machine groups notifications.
    Kind-specific: `metric`, `op`, `value`, `ratio_to` (threshold: compare
    100 × metric / ratio_to, in %), `over_s` (the window values are read over),
    `over_time` (threshold: `last` or `mean` over that window), `across` / `by`
    (threshold: aggregate units across, per `by` labels), `condition`, `after_s`
    (absence: silent for; request_pending: pending for), `matchers` (label filters).
    """

    name: str
    kind: RuleKind
    severity: Severity
    for_s: float = 0.0
    summary: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    group_by: tuple[str, ...] = DEFAULT_GROUP_BY
    description: str = ""
    enabled: bool = True
    metric: str | None = None
    op: Op | None = None
    value: float | None = None
    ratio_to: str | None = None
    over_s: float = 300.0
    over_time: str = "last"
    across: AcrossSeries | None = None
    by: tuple[str, ...] = ()
    condition: StateCondition | None = None
    absent: Absent | None = None
    after_s: float | None = None
    matchers: tuple[LabelMatcher, ...] = ()

    @property
    def observed_labels(self) -> tuple[str, ...]:
        """The identifying labels this rule's observations carry (static ones apart)."""
        if self.kind is RuleKind.STATE and self.condition is not None:
            return STATE_LABELS[self.condition]
        if self.kind is RuleKind.EFFICIENCY:
            return ("project",)
        if self.kind is RuleKind.ABSENCE and self.absent is Absent.AGENT:
            return ("environment", "node")
        if self.kind is RuleKind.THRESHOLD and self.across is not None:
            return self.by
        row = find(self.metric or "")
        return (*UNIT_LABELS, *(row.labels if row else ()))

    @property
    def value_unit(self) -> str | None:
        """The unit of the value its observations carry, and of its `value`: the catalogue
        metric's, or that of what the rule computes (a percentage of another metric, a
        count of units, seconds silent, hours pending or idle)."""
        if self.kind is RuleKind.EFFICIENCY:
            return Unit.PERCENT
        if self.kind is RuleKind.ABSENCE:
            return SECONDS
        if self.kind is RuleKind.STATE:
            return STATE_VALUE_UNITS.get(self.condition) if self.condition else None
        if self.ratio_to:
            return Unit.PERCENT
        if self.across is AcrossSeries.COUNT:
            return Unit.COUNT
        row = find(self.metric or "")
        return row.unit if row else None

    def as_dict(self) -> dict[str, Any]:
        """The rule as a rule file / API body writes it (round-trips `rule_from_mapping`)."""
        body: dict[str, Any] = {"name": self.name, "kind": self.kind.value,
                                "severity": self.severity.value}
        if self.for_s:
            body["for"] = seconds_text(self.for_s)
        optional = {
            "summary": self.summary, "description": self.description,
            "labels": dict(self.labels) or None,
            "group_by": list(self.group_by) if self.group_by != DEFAULT_GROUP_BY else None,
            "enabled": None if self.enabled else False, "metric": self.metric,
            "op": self.op.value if self.op else None, "value": self.value,
            "ratio_to": self.ratio_to, "condition": self.condition, "absent": self.absent,
            "after": seconds_text(self.after_s) if self.after_s else None,
            "across": self.across.value if self.across else None,
            "by": list(self.by) or None,
            "matchers": [str(m) for m in self.matchers] or None,
        }
        if self.kind in (RuleKind.THRESHOLD, RuleKind.INCREASE, RuleKind.EFFICIENCY):
            optional["over"] = seconds_text(self.over_s)
        if self.kind is RuleKind.THRESHOLD and self.over_time != "last":
            optional["over_time"] = self.over_time
        body.update({k: (v.value if isinstance(v, StrEnum) else v)
                     for k, v in optional.items() if v not in (None, "")})
        return body


def seconds_text(seconds: float) -> str:
    """600 → "10m", 5400 → "90m", 45 → "45s": the shortest exact whole unit."""
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


# --- the body of a rule, as written ----------------------------------------------------


def _duration_s(value: object, name: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"write a duration like 10m or 1h, not a bare number ({value})")
    try:
        return parse_duration(str(value), name=name).total_seconds()
    except InvalidInput as exc:
        raise ValueError(exc.message) from None


class RuleSpec(BaseModel):
    """A rule as a file or the API writes it: `for`, `over`, `after` are durations (10m)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(pattern=RULE_NAME_PATTERN)
    kind: RuleKind
    severity: Severity = Severity.WARNING
    for_: str | None = Field(default=None, alias="for")
    summary: str = Field(default="", max_length=500)
    description: str = Field(default="", max_length=4000)
    labels: dict[str, str] = Field(default_factory=dict)
    group_by: list[str] | None = None
    enabled: bool = True
    metric: str | None = None
    op: Op | None = None
    value: float | None = None
    ratio_to: str | None = None
    over: str | None = None
    over_time: str | None = None
    across: AcrossSeries | None = None
    by: list[str] = Field(default_factory=list)
    condition: StateCondition | None = None
    absent: Absent | None = None
    after: str | None = None
    matchers: list[str] = Field(default_factory=list)

    @field_validator("for_", "over", "after", mode="before")
    @classmethod
    def _duration(cls, value: object, info) -> object:
        if value is None:
            return None
        _duration_s(value, info.field_name.rstrip("_"))
        return str(value)

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{value} is not a finite number")
        return value

    @field_validator("over_time")
    @classmethod
    def _over_time(cls, value: str | None) -> str | None:
        if value is not None and value not in ("last", "mean"):
            raise ValueError(f"over_time {value!r}: choose from last, mean")
        return value


@dataclass(frozen=True)
class FieldProblem:
    """One thing wrong with a rule: `path` names the field (("rules", 0, "metric"))."""

    path: tuple[str | int, ...]
    message: str

    @property
    def field_text(self) -> str:
        text = ""
        for part in self.path:
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
        return text


class RuleProblems(Exception):
    """A rule body's problems, each naming its field; the file loader adds lines."""

    def __init__(self, problems: list[FieldProblem]):
        super().__init__("; ".join(f"{p.field_text}: {p.message}" for p in problems))
        self.problems = problems


def rule_from_mapping(body: Mapping[str, Any], path: tuple[str | int, ...] = ()) -> Rule:
    """A `Rule` from its written form; RuleProblems naming every field that is wrong."""
    try:
        spec = RuleSpec.model_validate(body)
    except ValidationError as exc:
        raise RuleProblems([FieldProblem((*path, *_alias(e["loc"])), _pydantic_message(e))
                            for e in exc.errors()]) from None
    problems: list[FieldProblem] = []
    rule = _rule_of(spec, lambda name, message: problems.append(
        FieldProblem((*path, name), message)))
    if problems:
        raise RuleProblems(problems)
    return rule


def _alias(loc: tuple) -> tuple:
    return tuple("for" if part == "for_" else part for part in loc)


def _pydantic_message(error: dict) -> str:
    if error["type"] == "extra_forbidden":
        return f"unknown field; choose from: {', '.join(_FIELDS)}"
    if error["type"] == "missing":
        return "required"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "enum":
        return f"{error['input']!r}: {message.lower()}"
    if error["type"] == "string_pattern_mismatch":
        return f"{error['input']!r}: lowercase letters, digits, '.', '_', '-' (≤ 63)"
    return message


_FIELDS = tuple((f.alias or name) for name, f in RuleSpec.model_fields.items())


def _choices(word: str, valid: list[str] | tuple[str, ...]) -> str:
    close = [v for v in valid if word and v.startswith(word)][:2] or \
        difflib.get_close_matches(word, valid, n=2, cutoff=0.75)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"{hint}choose from: {', '.join(valid)}"


def _metric(name: str | None, field_name: str, problem, *, counter: bool = False) -> None:
    if name is None:
        problem(field_name, f"required for this kind; {_choices('', _metric_names(counter))}")
        return
    row = find(name)
    if row is None:
        problem(field_name, f"unknown metric {name!r}; {_choices(name, _metric_names(counter))}")
    elif counter and row.metric_class is not MetricClass.LIFETIME_COUNTER:
        problem(field_name, f"{name} is not a counter; an increase rule needs one of: "
                            f"{', '.join(_metric_names(True))}")


def _metric_names(counters_only: bool) -> list[str]:
    return [m.name for m in CATALOGUE if m.name.startswith("gpu.")
            and (not counters_only or m.metric_class is MetricClass.LIFETIME_COUNTER)]


def _rule_of(spec: RuleSpec, problem) -> Rule:
    kind = spec.kind
    values: dict[str, Any] = {}
    over_default = {RuleKind.INCREASE: "10m", RuleKind.EFFICIENCY: "24h"}.get(kind, "5m")
    if kind in (RuleKind.THRESHOLD, RuleKind.INCREASE):
        _metric(spec.metric, "metric", problem, counter=kind is RuleKind.INCREASE)
        if kind is RuleKind.THRESHOLD:
            for name in ("op", "value"):
                if getattr(spec, name) is None:
                    problem(name, "required for a threshold rule")
            if spec.ratio_to is not None:
                _metric(spec.ratio_to, "ratio_to", problem)
            if spec.op is Op.HAS_ANY_BITS and spec.value is not None and not (
                    spec.value == int(spec.value) and 0 < spec.value < 2**64):
                problem("value", f"{spec.value:g} is not a bit mask: has_any_bits takes a "
                                 "whole number from 1 to 2**64 − 1, e.g. 0xE8")
        values.update(op=spec.op or Op.GE, value=1.0 if spec.value is None else spec.value)
    elif kind is RuleKind.ABSENCE:
        if (spec.absent is None) == (spec.metric is None):
            problem("absent", "an absence rule names either `absent = \"agent\"` or a `metric`")
        elif spec.metric is not None:
            _metric(spec.metric, "metric", problem)
        if spec.after is None:
            problem("after", "required: how long silent before the rule observes it (10m)")
    elif kind is RuleKind.STATE:
        if spec.condition is None:
            problem("condition", f"required; choose from: {', '.join(StateCondition)}")
        elif spec.condition is StateCondition.REQUEST_PENDING and spec.after is None:
            problem("after", "required: how long a request may stay pending (4h)")
        elif spec.condition in _PERCENT_CONDITIONS and spec.value is None:
            problem("value", "required: the percentage in use that is nearly exhausted (90)")
        values["value"] = spec.value
    elif kind is RuleKind.EFFICIENCY:
        if spec.value is None or not 0 < spec.value <= 100:
            problem("value", "required: the efficiency percentage (0 < value ≤ 100) below "
                             "which a project is observed")
        values["value"] = spec.value
    unexpected = _unexpected_fields(spec)
    for name in unexpected:
        problem(name, f"not used by a {kind.value} rule")
    matchers = []
    for n, text in enumerate(spec.matchers):
        try:
            matchers.append(parse_matcher(text))
        except InvalidInput as exc:
            problem("matchers", f"[{n}] {exc.message}")
    if spec.across is None and spec.by:
        problem("by", "aggregating across units needs `across` (mean, max, sum, count)")
    rule = Rule(
        name=spec.name, kind=kind, severity=spec.severity,
        for_s=_duration_s(spec.for_, "for") if spec.for_ else 0.0,
        summary=spec.summary, labels=dict(spec.labels),
        group_by=tuple(spec.group_by) if spec.group_by is not None else DEFAULT_GROUP_BY,
        description=spec.description, enabled=spec.enabled, metric=spec.metric,
        ratio_to=spec.ratio_to, over_s=_duration_s(spec.over or over_default, "over"),
        over_time=spec.over_time or "last", across=spec.across, by=tuple(spec.by),
        condition=spec.condition, absent=spec.absent,
        after_s=_duration_s(spec.after, "after") if spec.after else None,
        matchers=tuple(matchers), **values)
    if spec.group_by is None and "environment" not in rule.observed_labels:
        rule = replace(rule, group_by=("rule",))  # a project's rule has no environment
    _check_labels(rule, problem)
    return rule


_PERCENT_CONDITIONS = (StateCondition.QUOTA_NEARLY_EXHAUSTED,
                       StateCondition.POOL_NEARLY_EXHAUSTED)

_KIND_FIELDS: dict[RuleKind, set[str]] = {
    RuleKind.THRESHOLD: {"metric", "op", "value", "ratio_to", "over", "over_time", "across",
                         "by", "matchers"},
    RuleKind.INCREASE: {"metric", "op", "value", "over", "matchers"},
    RuleKind.ABSENCE: {"absent", "metric", "after", "matchers"},
    RuleKind.STATE: {"condition", "after", "value", "matchers"},
    RuleKind.EFFICIENCY: {"value", "over", "matchers"},
}
_KIND_SPECIFIC = set().union(*_KIND_FIELDS.values())


def _unexpected_fields(spec: RuleSpec) -> list[str]:
    allowed = _KIND_FIELDS[spec.kind]
    return sorted(name for name in _KIND_SPECIFIC - allowed
                  if getattr(spec, name) not in (None, []))


def _check_labels(rule: Rule, problem) -> None:
    """Every label a rule names (group_by, by, matchers, summary placeholders) must be one
    its observations can carry; else refused with the choices."""
    observed = [*rule.observed_labels, *OWNER_LABELS]
    observed = list(dict.fromkeys(observed))
    for name in rule.labels:
        if not _LABEL_NAME.fullmatch(name):
            problem("labels", f"{name!r} is not a label name: letters, digits and _, "
                              "not starting with a digit")
        elif name in ("alertname", "severity", "rule", *observed):
            problem("labels", f"{name!r} is set by gpufleet on this rule's alerts; "
                              "a static label needs a name of its own (team, runbook)")
    if rule.across is not None:
        for name in rule.by:
            if name not in ("environment", "node", *find_labels(rule.metric)):
                problem("by", f"cannot aggregate by {name!r}; "
                              f"{_choices(name, ['environment', 'node'])}")
    grouping = ["rule", "severity", *observed, *rule.labels]
    for name in rule.group_by:
        if name not in grouping:
            problem("group_by", f"unknown label {name!r}; {_choices(name, grouping)}")
    for matcher in rule.matchers:
        if matcher.name not in observed:
            problem("matchers", f"unknown label {matcher.name!r}; "
                                f"{_choices(matcher.name, observed)}")
    notes = STATE_ANNOTATIONS.get(rule.condition, ()) if rule.condition else ()
    if rule.kind is RuleKind.EFFICIENCY:
        notes = ("allocated_gpu_hours",)
    _check_summary(rule.summary, ["value", "labels", "rule", *observed, *notes, *rule.labels],
                   problem)


def _check_summary(summary: str, placeholders: list[str], problem) -> None:
    """Each placeholder a plain name the observations carry (no `.attribute`, `[index]`
    or `!conversion`: see `_PlainFields`), with a format spec its value takes."""
    try:
        fields = [(f, spec, conversion) for _, f, spec, conversion
                  in string.Formatter().parse(summary) if f is not None]
    except ValueError as exc:
        problem("summary", f"not a template: {exc}")
        return
    for name, spec, conversion in fields:
        if not name.isidentifier() or conversion:
            problem("summary", f"placeholder {{{name}{'!' + conversion if conversion else ''}}}"
                               " is not a plain name: write {gpu}, {value} or {value:.0f}")
            continue
        if name not in placeholders:
            problem("summary", f"unknown placeholder {{{name}}}; "
                               f"{_choices(name, placeholders)}")
            continue
        try:
            format(0.0 if name == "value" else "", spec or "")
        except ValueError as exc:
            problem("summary", f"{{{name}:{spec}}}: {exc}")


def find_labels(metric: str | None) -> tuple[str, ...]:
    row = find(metric or "")
    return row.labels if row else ()


def render_summary(rule: Rule, labels: Mapping[str, str], value: float | None) -> str:
    """The rule's summary with `{value}` and label placeholders filled in (a label the
    observation lacks renders empty). `{value}` is shown in its unit (`Rule.value_unit`:
    80 GiB, 16 min); with a format spec (`{value:.0f}`) it is the bare number."""
    shown = "" if value is None else Quantity(value, rule.value_unit)
    fields = _Blank({**labels, "rule": rule.name, "value": shown,
                     "labels": ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))})
    try:
        return _PlainFields().vformat(rule.summary, (), fields) if rule.summary else ""
    except (ValueError, KeyError, IndexError, AttributeError, TypeError):  # checked when declared
        return rule.summary


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return ""


class _PlainFields(string.Formatter):
    """Placeholders are names only: `{value.__class__}` or `{gpu[0]}` would let whoever
    writes a summary — an operator, or a member testing a rule — walk from a value to
    the server's objects. Refused when declared (`_check_summary`); never followed here,
    for rules stored before that check."""

    def get_field(self, field_name: str, args, kwargs) -> tuple[Any, str]:
        if not field_name.isidentifier():
            raise ValueError(f"placeholder {{{field_name}}} is not a plain name")
        return kwargs[field_name], field_name
