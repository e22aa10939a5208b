"""`gpufleet metrics ls` and `metrics docs`: the metric catalogue, which is code, seen two ways.

Both run locally: the catalogue ships with gpufleet, so no server is asked.
"""

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.errors import CliError
from gpufleet.cli.output import done, emit, table
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
def docs(
    check: Annotated[bool, typer.Option(
        "--check", help="Fail when the file differs from the catalogue, instead of writing.")
    ] = False,
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The Markdown file to write or check.")] = DOCS_PATH,
) -> None:
    """Write the metric reference (docs/metrics.md) generated from the catalogue."""
    expected = catalogue_markdown()
    if check:
        current = output.read_text() if output.is_file() else None
        if current != expected:
            state = "is missing" if current is None else "is out of date"
            raise CliError(f"{output} {state}; run `gpufleet metrics docs --output {output}`")
        done(f"{output} is up to date")
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(expected)
    done(f"wrote {output}")
