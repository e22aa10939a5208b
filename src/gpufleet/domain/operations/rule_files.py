"""Rule files, TOML or YAML: a list `rules`, one table per rule (docs/operations.md,
"Rule file format").

A malformed file is refused with every problem as `FILE:LINE: FIELD: message`, the line
found from the parser's own marks (YAML: `yaml.compose` keeps each node's line) or, for
TOML (tomllib keeps none), from the key's line in the text: its `[[rules]]` header and
the `key =` lines under it.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.rules import FieldProblem, Rule, RuleProblems, rule_from_mapping

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class FileProblem:
    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else \
            f"{where}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "field": self.field,
                "message": self.message}


class RuleFileError(InvalidInput):
    """A rule file that cannot be used; `problems` says where and why, one per line."""

    default_code = "invalid_rule_file"

    def __init__(self, problems: list[FileProblem]):
        super().__init__("\n".join(str(p) for p in problems), code=self.default_code,
                         details={"problems": [p.as_dict() for p in problems]})
        self.problems = problems


def load_rules(text: str, file: str) -> list[Rule]:
    """The rules a file declares (TOML unless its name ends in .yaml / .yml); RuleFileError
    naming the file, line and field of every problem."""
    if file.endswith((".yaml", ".yml")):
        document, lines = _yaml(text, file)
    else:
        document, lines = _toml(text, file)
    return rules_from_document(document, file, lines)


def rules_from_document(document: Any, file: str,
                        lines: Mapping[Path_, int] | None = None) -> list[Rule]:
    lines = lines or {}
    if not isinstance(document, Mapping) or not isinstance(document.get("rules"), list):
        raise RuleFileError([FileProblem(file, 1, "rules", "a rule file holds a list `rules` "
                                         "([[rules]] tables in TOML, `rules:` in YAML)")])
    unknown = [k for k in document if k != "rules"]
    problems = [FileProblem(file, lines.get((k,)), str(k), "unknown key; a rule file holds "
                            "`rules` only") for k in unknown]
    rules: list[Rule] = []
    seen: dict[str, int] = {}
    for n, body in enumerate(document["rules"]):
        path: Path_ = ("rules", n)
        if not isinstance(body, Mapping):
            problems.append(_located(file, lines, FieldProblem(path, "a rule is a table")))
            continue
        try:
            rule = rule_from_mapping(body, path)
        except RuleProblems as exc:
            problems.extend(_located(file, lines, p) for p in exc.problems)
            continue
        if rule.name in seen:
            first = seen[rule.name]
            problems.append(_located(file, lines, FieldProblem(
                (*path, "name"), f"{rule.name!r} is declared twice (first rules[{first}])")))
        seen.setdefault(rule.name, n)
        rules.append(rule)
    if problems:
        raise RuleFileError(problems)
    return rules


def _located(file: str, lines: Mapping[Path_, int], problem: FieldProblem) -> FileProblem:
    """The problem at the line of its field, or of the nearest enclosing table that has
    one (a missing field is reported at its rule's first line)."""
    path = problem.path
    while path and path not in lines:
        path = path[:-1]
    return FileProblem(file, lines.get(path), problem.field_text, problem.message)


# --- YAML ----------------------------------------------------------------------------------


def _yaml(text: str, file: str) -> tuple[Any, dict[Path_, int]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        reason = getattr(exc, "problem", None) or str(exc)
        raise RuleFileError([FileProblem(file, mark.line + 1 if mark else None, "",
                                         f"not YAML: {reason}")]) from None
    lines: dict[Path_, int] = {}
    if node is not None:
        _yaml_lines(node, (), lines)
    return document, lines


def _yaml_lines(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, key.value)
            lines[child] = key.start_mark.line + 1
            _yaml_lines(value, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for n, item in enumerate(node.value):
            _yaml_lines(item, (*path, n), lines)


# --- TOML ----------------------------------------------------------------------------------

_ARRAY_TABLE = re.compile(r"^\s*\[\[\s*([A-Za-z0-9_.\- ]+?)\s*\]\]")
_TABLE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\- ]+?)\s*\]")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_\-]+)\s*=""")
_TOML_LINE = re.compile(r"at line (\d+)")


def _toml(text: str, file: str) -> tuple[Any, dict[Path_, int]]:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_LINE.search(str(exc))
        reason = str(exc).split(" (at line")[0]
        raise RuleFileError([FileProblem(file, int(found.group(1)) if found else None, "",
                                         f"not TOML: {reason}")]) from None
    return document, _toml_lines(text)


def _toml_lines(text: str) -> dict[Path_, int]:
    """Each `[[rules]]` header's line as ("rules", n), each key's as ("rules", n, key),
    sub-tables' keys (`[rules.labels]`) below them. Multi-line values are not followed
    into: their first line is the key's."""
    lines: dict[Path_, int] = {}
    counts: dict[str, int] = {}
    table: Path_ = ()
    for number, line in enumerate(text.splitlines(), start=1):
        if found := _ARRAY_TABLE.match(line):
            parts = found.group(1).split(".")
            head = ".".join(parts)
            counts[head] = counts.get(head, -1) + 1
            table = (*_array_parent(parts[:-1], counts), parts[-1], counts[head])
            lines.setdefault(table, number)
        elif found := _TABLE.match(line):
            parts = found.group(1).split(".")
            table = (*_array_parent(parts, counts),)
            lines.setdefault(table, number)
        elif found := _KEY.match(line):
            key = found.group(1).strip("\"'")
            lines.setdefault((*table, key), number)
    return lines


def _array_parent(parts: list[str], counts: dict[str, int]) -> Path_:
    """A dotted table name as a path, with the current index of each array of tables in
    it (`rules.labels` under the third [[rules]] → ("rules", 2, "labels"))."""
    path: list[str | int] = []
    for n, part in enumerate(parts):
        path.append(part)
        head = ".".join(parts[:n + 1])
        if head in counts:
            path.append(counts[head])
    return tuple(path)


DEFAULT_PACK = "default_rules.toml"


@cache
def default_rules() -> tuple[Rule, ...]:
    """The default pack that ships with gpufleet (package data)."""
    text = resources.files("gpufleet.domain.operations.data").joinpath(DEFAULT_PACK) \
        .read_text(encoding="utf-8")
    return tuple(load_rules(text, DEFAULT_PACK))
