"""`gpufleet config show` and `config docs`: the settings, declared once, seen two ways."""

from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.cli.client import api_path, connect, settings_errors
from gpufleet.cli.commands.common import DocsCheck, DocsOutput, JsonFlag, write_or_check_docs
from gpufleet.cli.output import emit, table
from gpufleet.settings import describe_settings, settings_markdown

app = typer.Typer(help="Settings: effective values and their documentation.",
                  no_args_is_help=True)

DOCS_PATH = Path("docs/settings.md")


def _as_json_value(value: Any) -> Any:
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


@app.command("show")
def show(server: Annotated[bool, typer.Option(
            "--server", help="The running server's settings (admins), not this CLI's.")
         ] = False,
         as_json: JsonFlag = False) -> None:
    """Every setting's effective value and where it came from (secrets masked): this CLI
    process's own by default — what `gpufleet serve` would start with here — or, with
    --server, those of the server the CLI talks to, as it started."""
    if server:
        with connect() as api:
            views = api.get(api_path("server", "settings"))
        whose = f"the server at {api.url}, as it started"
    else:
        with settings_errors():
            described = describe_settings()
        views = [{"name": v.name, "value": _as_json_value(v.value), "source": v.source,
                  "description": v.description} for v in described]
        whose = "this CLI process (environment, config file, login); --server: the server's"
    emit(views, as_json, lambda rows: table(
        ["setting", "value", "source"], [[r["name"], r["value"], r["source"]] for r in rows],
        title=f"settings of {whose}"))


@app.command("docs")
def docs(check: DocsCheck = False, output: DocsOutput = DOCS_PATH) -> None:
    """Write the settings reference (docs/settings.md) generated from the declarations."""
    write_or_check_docs(settings_markdown(), output, check, "gpufleet config docs")
