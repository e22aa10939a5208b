"""`gpufleet metrics ls` and `metrics docs`: the metric catalogue, which is code, seen two ways.

Both run locally: the catalogue ships with gpufleet, so no server is asked.
"""

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.commands.common import DocsCheck, DocsOutput, write_or_check_docs
from gpufleet.cli.output import emit, table
from gpufleet.domain.telemetry.catalogue import CATALOGUE
from gpufleet.domain.telemetry.catalogue_markdown import catalogue_markdown

app = typer.Typer(help="The metric catalogue: every metric, its unit, class and sources.",
                  no_args_is_help=True)

DOCS_PATH = Path("docs/metrics.md")


@app.command("ls")
def ls(as_json: Annotated[bool, typer.Option(
        "--json", help="Print the catalogue as JSON instead of a table.")] = False) -> None:
    """Every metric in the catalogue: name, unit, class, scope and DCGM field."""
    rows = [m.as_dict() for m in CATALOGUE]
    emit(rows, as_json, lambda views: table(
        ["metric", "unit", "class", "scope", "dcgm field"],
        [[v["name"], v["unit"], v["class"], ",".join(v["scopes"]),
          v["dcgm"]["field"] if v["dcgm"] else None] for v in views]))


@app.command("docs")
def docs(check: DocsCheck = False, output: DocsOutput = DOCS_PATH) -> None:
    """Write the metric reference (docs/metrics.md) generated from the catalogue."""
    write_or_check_docs(catalogue_markdown(), output, check, "gpufleet metrics docs")
