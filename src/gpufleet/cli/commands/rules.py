"""`gpufleet rules ls | check | test | export`: alert rules (docs/operations.md, "Alert
rules").

`check` and `export FILE` run locally (the rule language ships with gpufleet); `ls`,
`test` and `export` of the server's rules ask the server.
"""

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import JsonFlag
from gpufleet.cli.errors import CliError
from gpufleet.cli.output import done, emit, labels_text, note, table
from gpufleet.domain.operations.prometheus_rules import prometheus_rules
from gpufleet.domain.operations.rule_files import RuleFileError, default_rules, load_rules
from gpufleet.domain.operations.rules import Rule, rule_from_mapping

app = typer.Typer(help="Alert rules: list, check and test rule files, export for Prometheus.",
                  no_args_is_help=True)

RuleFile = Annotated[Path, typer.Argument(help="A rule file: TOML, or YAML (.yaml, .yml).",
                                          exists=False)]


class ExportFormat(StrEnum):
    PROMETHEUS = "prometheus"


def _load(path: Path) -> list[Rule]:
    """The file's rules; its problems as `FILE:LINE: FIELD: message` lines on stderr and
    exit status 1."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    try:
        return load_rules(text, str(path))
    except RuleFileError as exc:
        for problem in exc.problems:
            note(str(problem))
        raise CliError(f"{path}: {len(exc.problems)} problem"
                       f"{'s' if len(exc.problems) != 1 else ''}; nothing was used") from None


@app.command("ls")
def ls(as_json: JsonFlag = False) -> None:
    """The rules the server evaluates: the default pack and the rules stored there."""
    with connect() as api:
        rules = api.get(api_path("alert-rules"))
    emit(rules, as_json, lambda rs: table(
        ["name", "kind", "severity", "for", "enabled", "source", "summary"],
        [[r["name"], r["kind"], r["severity"], r["body"].get("for", "-"),
          "yes" if r["enabled"] else "no", r["source"], r["summary"]] for r in rs]))


@app.command("check")
def check(path: RuleFile) -> None:
    """Validate a rule file locally; each problem as FILE:LINE: FIELD: message."""
    rules = _load(path)
    done(f"{path}: {len(rules)} rule{'s' if len(rules) != 1 else ''} OK")


@app.command("test")
def test(path: RuleFile, as_json: JsonFlag = False) -> None:
    """Evaluate a rule file's rules against the server's data now: what would fire (before
    each rule's `for`). Nothing is stored or sent."""
    rules = _load(path)
    with connect() as api:
        reply = api.post(api_path("alert-rules", "test"),
                         {"rules": [r.as_dict() for r in rules]})
    for name, why in reply["unavailable"].items():
        note(f"{name}: not evaluated: {why}")
    emit(reply, as_json, lambda r: table(
        ["rule", "labels", "value", "evidence", "owner"],
        [[o["rule"], labels_text(o["labels"]), o["value"], o["evidence"],
          o["annotations"].get("owner")] for o in r["observations"]],
        caption=f"{len(r['evaluated'])} rules evaluated, "
                f"{len(r['observations'])} observations"))


@app.command("export")
def export(
    path: Annotated[Path | None, typer.Argument(
        help="A rule file to export; without it, the rules the server evaluates.")] = None,
    export_format: Annotated[ExportFormat, typer.Option(
        "--format", help="prometheus: alerting rules over dcgm-exporter names.")
    ] = ExportFormat.PROMETHEUS,
    default_pack: Annotated[bool, typer.Option(
        "--default-pack", help="Export the default pack that ships with gpufleet (no "
        "server asked).")] = False,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write to this file instead of stdout.")] = None,
) -> None:
    """Rules as a Prometheus rule file (check it with `promtool check rules`); fleet-state
    rules without a dcgm-exporter equivalent are listed in comments."""
    if path is not None and default_pack:
        raise CliError("give a rule file or --default-pack, not both")
    if default_pack:
        rules = list(default_rules())
    elif path is not None:
        rules = _load(path)
    else:
        with connect() as api:
            rules = [rule_from_mapping(r["body"]) for r in api.get(api_path("alert-rules"))]
    text = prometheus_rules(rules)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        note(f"wrote {output}")
