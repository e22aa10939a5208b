"""`gpufleet config show` and `config docs`: the settings, declared once, seen two ways."""

from pathlib import Path
from typing import Any

import typer

from gpufleet.cli.client import settings_errors
from gpufleet.cli.commands.common import DocsCheck, DocsOutput, JsonFlag, write_or_check_docs
from gpufleet.cli.output import emit, table
from gpufleet.settings import describe_settings, settings_markdown

app = typer.Typer(help="Settings: effective values and their documentation.",
                  no_args_is_help=True)

DOCS_PATH = Path("docs/settings.md")


def _as_json_value(value: Any) -> Any:
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


@app.command("show")
def show(as_json: JsonFlag = False) -> None:
    """Every setting's effective value and where it came from (secrets masked)."""
    with settings_errors():
        described = describe_settings()
    views = [{"name": v.name, "value": _as_json_value(v.value), "source": v.source,
              "description": v.description} for v in described]
    emit(views, as_json, lambda rows: table(
        ["setting", "value", "source"], [[r["name"], r["value"], r["source"]] for r in rows]))


@app.command("docs")
def docs(check: DocsCheck = False, output: DocsOutput = DOCS_PATH) -> None:
    """Write the settings reference (docs/settings.md) generated from the declarations."""
    write_or_check_docs(settings_markdown(), output, check, "gpufleet config docs")
